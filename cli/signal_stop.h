// Ctrl-C and SIGTERM for the commands that run something.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include "atoll/run.h"

namespace atl::cli {

// Routes SIGINT and SIGTERM to a flag (a handler may do no more).
void catch_interrupts();
// True once per signal received since the last call.
bool take_interrupt();
// True if a signal is pending (not taken).
bool interrupt_pending();

// While runs go on: a signal stops the current run in order, so its report
// and summary are still written. A watcher thread does the stopping. With
// `first`, the first signal calls it instead (a learner process leaves in
// order) and the next one stops the run.
class SignalStop {
 public:
  explicit SignalStop(std::function<void(Run&)> first = {});
  ~SignalStop();
  SignalStop(const SignalStop&) = delete;
  SignalStop& operator=(const SignalStop&) = delete;
  // The run to stop on a signal (nullptr: none now). One that starts after
  // the signal is stopped at once.
  void watch(Run* run);
  bool fired() const;

 private:
  mutable std::mutex mu_;
  Run* run_ = nullptr;
  bool fired_ = false;
  std::function<void(Run&)> first_;  // unset once used
  std::atomic<bool> done_{false};
  std::thread watcher_;
};

}  // namespace atl::cli
