// ComputePool: where learners run their inner steps (docs/design.md section 2).
//
// One oneTBB task_arena with `threads` workers runs every learner's steps,
// never on CAF's scheduler threads: a busy learner cannot delay the syncer's
// rounds or a supervisor's reaction. The pool caps TBB's workers (the default
// would oversubscribe a small machine next to CAF's threads). Eigen runs
// single-threaded inside a task. A learner submits its next step only when
// the last one is done, so its steps never overlap.
//
// Fairness: at most `threads` tasks are in the arena at a time; the rest wait
// in a FIFO queue, so every learner waits for at most one round of the others.
// One arena, not one per learner: TBB hands workers to arenas by demand, and a
// worker lingering in a learner's arena that re-submits at once kept it while
// other arenas starved (measured with an arena per learner on 2 cores: a
// speed-0.7 learner made 226 steps in 5 s, at 0.5 s a step, while its peers
// made 20000 at 0.1 ms).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

namespace atl {

class ComputePool {
 public:
  // `threads`: compute threads in all (0: the machine's cores).
  explicit ComputePool(int threads);
  ~ComputePool();  // waits for every submitted task
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  int threads() const { return threads_; }

  // Runs `task` on the arena without waiting for it, after every task
  // submitted before it has started. `task` must not throw.
  void submit(std::function<void()> task);

  // Blocks until every task submitted so far has finished.
  void wait_idle();

 private:
  void launch(std::function<void()> task);  // REQUIRES: mu_ not held

  int threads_;
  std::unique_ptr<tbb::global_control> control_;
  std::unique_ptr<tbb::task_arena> arena_;

  std::mutex mu_;
  std::condition_variable idle_;
  int running_ = 0;  // admitted to the arena, not finished
  std::deque<std::function<void()>> waiting_;
};

}  // namespace atl
