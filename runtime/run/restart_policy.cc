#include "atoll/restart_policy.h"

#include <algorithm>
#include <cmath>

namespace atl {

std::optional<double> RestartPolicy::on_failure(double now) {
  if (gave_up_) return std::nullopt;
  recent_.push_back(now);
  while (!recent_.empty() && now - recent_.front() > limits_.window_seconds) recent_.pop_front();
  if (static_cast<int>(recent_.size()) > limits_.max_restarts) {
    gave_up_ = true;
    return std::nullopt;
  }
  return std::min(limits_.backoff_max,
                  limits_.backoff_initial * std::pow(2.0, static_cast<double>(recent_.size() - 1)));
}

}  // namespace atl
