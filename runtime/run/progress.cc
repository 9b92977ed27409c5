#include "atoll/progress.h"

#include <cstdio>

namespace atl {

std::string duration_text(double seconds) {
  char buf[32];
  const auto s = static_cast<long>(seconds + 0.5);
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

std::string progress_text(size_t index, size_t total, double elapsed_seconds, size_t ran, double ran_seconds) {
  std::string s = "run " + std::to_string(index + 1) + " of " + std::to_string(total) + ", " +
                  duration_text(elapsed_seconds) + " elapsed";
  if (ran > 0 && total > index)
    s += ", about " + duration_text(ran_seconds / double(ran) * double(total - index)) + " left";
  return s;
}

}  // namespace atl
