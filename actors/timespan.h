// Seconds as CAF's timespan: the one conversion every timer, delayed send and
// request timeout of the actors (and the chaos injector) goes through.
#pragma once

#include <algorithm>
#include <chrono>

#include <caf/timespan.hpp>

namespace atl {

// The longest timer an actor sets: a year, longer than any run is watched
// for; a double of seconds past 292 years would overflow the nanoseconds.
inline constexpr double kLongestTimerSeconds = 365 * 86400.0;

// `seconds` as a caf::timespan, clamped to [0, kLongestTimerSeconds]: a
// timer is never negative, and NaN is 0.
inline caf::timespan timespan_of(double seconds) {
  if (!(seconds > 0.0)) return caf::timespan{0};
  return std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(std::min(seconds, kLongestTimerSeconds)));
}

}  // namespace atl
