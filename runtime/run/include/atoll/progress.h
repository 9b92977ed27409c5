// Progress of a command that runs several runs in a row (atoll chaos,
// atoll sweep, the comparison benchmarks): which run of how many, the time
// elapsed, and the time left at the pace of the runs done so far.
#pragma once

#include <cstddef>
#include <string>

namespace atl {

// "45s", "3m07s", "1h02m".
std::string duration_text(double seconds);

// "run 3 of 8, 2m10s elapsed, about 4m20s left": `index` counts from 0;
// `ran` runs took `ran_seconds` (no estimate before the first one ends).
std::string progress_text(size_t index, size_t total, double elapsed_seconds, size_t ran, double ran_seconds);

}  // namespace atl
