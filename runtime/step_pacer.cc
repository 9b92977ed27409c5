#include "atoll/step_pacer.h"

#include <algorithm>
#include <cstdio>

#include "atoll/log.h"

namespace atl {

StepPacer::StepPacer(int threads, double total_speed, int calibration_steps)
    : threads_(std::max(1, threads)),
      total_speed_(total_speed > 0.0 ? total_speed : 1.0),
      calibration_steps_(std::max(1, calibration_steps)) {}

double StepPacer::step_seconds(double compute_seconds, double speed) const {
  const double share = std::min(1.0, threads_ * std::max(speed, 1e-6) / total_speed_);
  return kHeadroom * compute_seconds / share;
}

std::optional<double> StepPacer::pace(double compute_seconds, double wall_seconds, double speed, bool first) {
  std::lock_guard lock(mu_);
  if (!calibration_.done) {
    if (first || !(compute_seconds > 0.0)) return std::nullopt;
    samples_.push_back(compute_seconds);
    if (static_cast<int>(samples_.size()) < calibration_steps_) return std::nullopt;
    auto mid = samples_.begin() + static_cast<std::ptrdiff_t>(samples_.size() / 2);
    std::nth_element(samples_.begin(), mid, samples_.end());
    calibration_.done = true;
    calibration_.samples = static_cast<int>(samples_.size());
    calibration_.compute_seconds = *mid;
    calibration_.step_seconds = step_seconds(*mid, 1.0);
    samples_.clear();
    char line[200];
    std::snprintf(line, sizeof line,
                  "dedicated hardware: one step computes in %.1f ms on one thread (median of %d, every learner "
                  "alive); a speed-1 learner's step now takes %.1f ms",
                  1e3 * calibration_.compute_seconds, calibration_.samples, 1e3 * calibration_.step_seconds);
    log_info(line);
    return std::nullopt;  // this step ran shared; the next is paced
  }
  const double target = step_seconds(calibration_.compute_seconds, speed);
  ++calibration_.paced;
  if (wall_seconds > target) ++calibration_.late;
  return std::max(0.0, target - wall_seconds);
}

StepPacer::Calibration StepPacer::calibration() const {
  std::lock_guard lock(mu_);
  return calibration_;
}

}  // namespace atl
