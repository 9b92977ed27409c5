#include "signal_stop.h"

#include <chrono>
#include <csignal>
#include <utility>

#include "atoll/log.h"

namespace atl::cli {
namespace {

std::atomic<bool> interrupted{false};
void on_signal(int) { interrupted = true; }

}  // namespace

void catch_interrupts() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

bool take_interrupt() { return interrupted.exchange(false); }
bool interrupt_pending() { return interrupted.load(); }

SignalStop::SignalStop(std::function<void(Run&)> first) : first_(std::move(first)) {
  catch_interrupts();
  watcher_ = std::thread([this] {
    while (!done_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (!take_interrupt()) continue;
      std::lock_guard lock(mu_);
      fired_ = true;
      if (run_ && first_) {
        log_warn("interrupted (a second signal stops the run at once)");
        std::exchange(first_, nullptr)(*run_);
        continue;
      }
      log_warn("interrupted: stopping the run (the report follows)");
      if (run_) run_->stop();
    }
  });
}

SignalStop::~SignalStop() {
  done_ = true;
  watcher_.join();
}

void SignalStop::watch(Run* run) {
  std::lock_guard lock(mu_);
  run_ = run;
  if (run_ && fired_) {
    if (first_) std::exchange(first_, nullptr)(*run_);
    else run_->stop();
  }
}

bool SignalStop::fired() const {
  std::lock_guard lock(mu_);
  return fired_;
}

}  // namespace atl::cli
