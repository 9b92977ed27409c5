// RestartPolicy: when a supervisor restarts a failed child, and when it gives
// up on it (OTP's restart intensity), as a pure function of the failures'
// times. The supervisor actor (actors/supervision.cc) keeps one per child.
//
// A child that fails more than `max_restarts` times within `window_seconds`
// is given up; otherwise it is restarted after a backoff that starts at
// `backoff_initial` and doubles with each failure inside the window, capped
// at `backoff_max`. Times are seconds on any monotone clock.
#pragma once

#include <deque>
#include <optional>

namespace atl {

class RestartPolicy {
 public:
  struct Limits {
    int max_restarts = 10;
    double window_seconds = 10.0;
    double backoff_initial = 0.05;
    double backoff_max = 2.0;
  };
  explicit RestartPolicy(Limits limits) : limits_(limits) {}

  // A failure at `now`: the seconds to wait before restarting, or nullopt:
  // give up (and every later call says so too).
  std::optional<double> on_failure(double now);
  bool gave_up() const { return gave_up_; }

 private:
  Limits limits_;
  std::deque<double> recent_;  // failure times inside the window
  bool gave_up_ = false;
};

}  // namespace atl
