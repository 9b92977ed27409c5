#include "atoll/compute_pool.h"

#include <algorithm>
#include <thread>

namespace atl {

ComputePool::ComputePool(int threads)
    : threads_(threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))) {
  // TBB counts the application thread in max_allowed_parallelism; tasks here
  // are only ever enqueued, so all of them run on workers: ask for one more.
  control_ = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                   static_cast<size_t>(threads_ + 1));
  arena_ = std::make_unique<tbb::task_arena>(threads_, 0);  // no slot kept for a caller
}

ComputePool::~ComputePool() {
  wait_idle();
  arena_.reset();
}

void ComputePool::submit(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (running_ >= threads_) {
      waiting_.push_back(std::move(task));
      return;
    }
    ++running_;
  }
  launch(std::move(task));
}

void ComputePool::launch(std::function<void()> task) {
  auto held = std::make_shared<std::function<void()>>(std::move(task));
  arena_->enqueue([this, held] {
    (*held)();
    *held = nullptr;  // release what the task holds before anyone can see the pool idle
    std::function<void()> next;
    {
      std::lock_guard lock(mu_);
      if (!waiting_.empty()) {
        next = std::move(waiting_.front());
        waiting_.pop_front();
      } else if (--running_ == 0) {
        idle_.notify_all();
      }
    }
    if (next) launch(std::move(next));  // keeps its admission
  });
}

void ComputePool::wait_idle() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return running_ == 0 && waiting_.empty(); });
}

}  // namespace atl
