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
//     step_seconds_i = headroom * compute * (batch_i / batch) / share_i
// of wall time, where `compute` is one step's compute on one thread at batch
// `batch`, measured before the run with as many steps at once as the run
// will have (measure_step_compute): the same for every mode, so modes run
// side by side get the same hardware. A learner waits out what a step took
// less than that; one that took longer (the pool was late) is not made up.
// The headroom (topology `hardware_headroom`, 1.15 by default) leaves the
// cores room for what the measurement leaves out (the actors' own work:
// codecs, merges, messages) and keeps the pool below its capacity, where any
// jitter would make every step late. Where that work is large next to a step
// (a small model, a slow machine), steps run late (late() over paced()) and
// learners share cores the way islands on their own chips would not: more
// headroom restores the islands, at the cost of wall time.
//
// Thread-safe: learners on different threads ask at once.
#pragma once

#include <atomic>
#include <cstdint>

#include "atoll/compute_pool.h"
#include "atoll/job.h"
#include "atoll/status.h"

namespace atl {

class StepPacer {
 public:
  // `threads`: the pool's; `total_speed`: the sum of the speeds of the
  // learners sharing it (> 0); `compute_seconds`: one step at `batch` on one
  // thread (> 0); `headroom`: a step's wall time over its compute (>= 1).
  StepPacer(int threads, double total_speed, double compute_seconds, int batch, double headroom);

  // The wall seconds a step of a learner of `speed` (an injected slowdown
  // divides it) and `batch` takes.
  double step_seconds(double speed, int batch) const;

  // Books a step that took `wall_seconds` from its submission to its end;
  // returns the seconds to wait before the next one (0: it was late).
  double pace(double wall_seconds, double speed, int batch);

  double compute_seconds() const { return compute_seconds_; }
  uint64_t paced() const { return paced_.load(); }
  uint64_t late() const { return late_.load(); }  // steps that took longer than their pace

 private:
  const int threads_;
  const double total_speed_;
  const double compute_seconds_;
  const int batch_;
  const double headroom_;
  std::atomic<uint64_t> paced_{0}, late_{0};
};

// The compute seconds of one inner step of `job`'s model at `batch` on one
// thread, with `concurrent` steps (at most the pool's threads) running at once
// in `pool` and nothing else: the median over `rounds` rounds, after one that
// warms up. It builds `concurrent` replicas of the model for the purpose.
// Measured once per process for each model, data, batch and concurrency:
// runs compared side by side in one process get the same hardware.
Result<double> measure_step_compute(const Job& job, ComputePool& pool, int concurrent, int batch, int rounds = 8);

}  // namespace atl
