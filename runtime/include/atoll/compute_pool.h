// ComputePool: where learners run their inner steps (DESIGN section 2).
//
// One oneTBB task_arena per learner slot, each with room for one worker, so a
// learner's steps run one at a time and never on CAF's scheduler threads: a
// busy learner cannot delay the syncer's rounds or a supervisor's reaction.
// The pool caps TBB's workers (the default would oversubscribe a small
// machine next to CAF's threads). Eigen runs single-threaded inside a task.
//
// Fairness: a TBB worker lingers in an arena that just ran out of work, so
// learners that re-submit at once would keep every worker and starve the
// others (measured: a speed-0.7 learner got 42 steps in 20 s while its peers
// did 14000). The pool therefore admits at most `threads` tasks at a time, in
// arrival order; the rest wait in a FIFO queue.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

namespace atl {

class ComputePool {
 public:
  // `threads`: compute threads in all (0: the machine's cores); `slots`: learners.
  ComputePool(int threads, int slots);
  ~ComputePool();  // waits for every submitted task
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  int threads() const { return threads_; }

  // Runs `task` on the slot's arena without waiting for it. Tasks of one slot
  // run one after another. `task` must not throw.
  void submit(int slot, std::function<void()> task);

  // Blocks until every task submitted so far has finished.
  void wait_idle();

 private:
  int threads_;
  std::unique_ptr<tbb::global_control> control_;
  std::vector<std::unique_ptr<tbb::task_arena>> arenas_;
  void launch(int slot, std::function<void()> task);  // REQUIRES: mu_ not held

  std::mutex mu_;
  std::condition_variable idle_;
  int running_ = 0;  // admitted to an arena, not finished
  std::deque<std::pair<int, std::function<void()>>> waiting_;
};

}  // namespace atl
