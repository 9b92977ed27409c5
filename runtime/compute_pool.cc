#include "atoll/compute_pool.h"

#include <algorithm>
#include <thread>

namespace atl {

ComputePool::ComputePool(int threads, int slots)
    : threads_(threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))) {
  // TBB counts the application thread in max_allowed_parallelism; tasks here
  // are only ever enqueued, so all of them run on workers: ask for one more.
  control_ = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                   static_cast<size_t>(threads_ + 1));
  for (int i = 0; i < slots; ++i)
    arenas_.push_back(std::make_unique<tbb::task_arena>(1, 0));  // one worker, no slot kept for a caller
}

ComputePool::~ComputePool() {
  wait_idle();
  arenas_.clear();
}

void ComputePool::submit(int slot, std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (running_ >= threads_) {
      waiting_.emplace_back(slot, std::move(task));
      return;
    }
    ++running_;
  }
  launch(slot, std::move(task));
}

void ComputePool::launch(int slot, std::function<void()> task) {
  auto held = std::make_shared<std::function<void()>>(std::move(task));
  arenas_.at(static_cast<size_t>(slot))->enqueue([this, held] {
    (*held)();
    *held = nullptr;  // release what the task holds before anyone can see the pool idle
    std::pair<int, std::function<void()>> next{-1, {}};
    {
      std::lock_guard lock(mu_);
      if (!waiting_.empty()) {
        next = std::move(waiting_.front());
        waiting_.pop_front();
      } else if (--running_ == 0) {
        idle_.notify_all();
      }
    }
    if (next.first >= 0) launch(next.first, std::move(next.second));  // keeps its admission
  });
}

void ComputePool::wait_idle() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return running_ == 0 && waiting_.empty(); });
}

}  // namespace atl
