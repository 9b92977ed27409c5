// StepPacer: dedicated hardware on one machine (topology `hardware = "dedicated"`).
//
// The learners of one process share its ComputePool. On shared hardware a
// step takes the wall time the pool gives it, so when a learner dies the
// survivors take its cores and speed up: a chaos run then measures the
// machine, not the method. Dedicated hardware models islands that own their
// chips. Learner i owns
//     share_i = min(1, threads * speed_i / total_speed)
// of the pool's threads (total_speed: the speeds of the learners the process
// runs), and a step of it takes
//     step_seconds(speed_i) = headroom * compute / share_i
// of wall time, where `compute` is the median compute time of one step on one
// thread over the calibration steps, measured at the start while every
// learner is alive. A learner waits out what a step took less than that; one
// that took longer (the pool was late) is not made up. The headroom (5%)
// keeps the pool from running at exactly its capacity, where any jitter
// would make every step late.
//
// Thread-safe: learners on different threads book and ask at once.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

namespace atl {

class StepPacer {
 public:
  static constexpr double kHeadroom = 1.05;

  // `threads`: the pool's; `total_speed`: the sum of the speeds of the
  // learners sharing it (> 0); `calibration_steps`: steps measured before
  // the pace is fixed (over all learners, a first step of each excluded).
  StepPacer(int threads, double total_speed, int calibration_steps);

  // Books one step of a learner of `speed` (an injected slowdown divides it):
  // its compute seconds on one thread and the wall seconds from its submission
  // to its end. `first`: the first step of a learner incarnation (cold, not
  // measured). Returns the wall seconds to wait before the next step, or
  // nullopt while calibrating (the shared-hardware rule applies until then).
  std::optional<double> pace(double compute_seconds, double wall_seconds, double speed, bool first);

  struct Calibration {
    bool done = false;
    int samples = 0;
    double compute_seconds = 0.0;  // median over the samples: one step on one thread
    double step_seconds = 0.0;     // a speed-1 learner's paced step
    uint64_t paced = 0;            // steps paced after calibration
    uint64_t late = 0;             // of them, steps that took longer than their pace
  };
  Calibration calibration() const;

  // The paced step of a learner of `speed`, given one step's compute seconds.
  double step_seconds(double compute_seconds, double speed) const;

 private:
  const int threads_;
  const double total_speed_;
  const int calibration_steps_;
  mutable std::mutex mu_;
  std::vector<double> samples_;  // compute seconds, while calibrating
  Calibration calibration_;
};

}  // namespace atl
