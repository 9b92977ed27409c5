// CPU time of the calling thread: what a piece of work cost, whatever else
// the machine runs (wall time would count the waits for a core).
#pragma once

#include <ctime>

namespace atl {

// Seconds of CPU the calling thread has used since it started.
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace atl
