// Event-tape replay (chaos/fault_plan.cc): any text is a list of faults or
// an error naming the line.
#include <cmath>

#include "atoll/fault_plan.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto faults = atl::parse_fault_tape(atl::fuzz::text(data, size), "fuzz.jsonl");
  if (faults.ok())
    for (const auto& f : *faults) atl::fuzz::expect(std::isfinite(f.at) && f.at >= 0);
  return 0;
}
