// EventLoopThread: a thread that runs a kj event loop, for the door (net/)
// and the status server (observe/).
//
// Header-only: it needs kj-async, which those layers link and the rest of
// runtime/ does not.
//
// Threading: start() and the destructor are called from one thread (the
// owner's); executor() may be used from any thread while the object lives.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <kj/async-io.h>

#include "atoll/log.h"
#include "atoll/status.h"

namespace atl {

// kj's description of `e` without the condition that failed ("expected ...;
// "): the reason, fit for a message.
inline std::string kj_reason(const kj::Exception& e) {
  std::string text = e.getDescription().cStr();
  if (const size_t semi = text.rfind("; "); semi != std::string::npos) text = text.substr(semi + 2);
  if (text.rfind("message = ", 0) == 0) text = text.substr(10);
  return text;
}

class EventLoopThread {
 public:
  // What runs on the thread: it sets up what it serves on `io`, then calls
  // serve(), which returns once the object is being destroyed; then it tears
  // down (no event of the loop may reach its owner after that). REQUIRES: it
  // calls serve() or throws a kj::Exception.
  using Body = std::function<void(kj::AsyncIoContext& io, const std::function<void()>& serve)>;

  // Starts the thread and waits until `body` calls serve(). Fails, with kj's
  // reason, if `body` throws before that. `name` ("door") begins the error
  // logged if the loop fails later.
  static Result<std::unique_ptr<EventLoopThread>> start(std::string name, Body body) {
    std::unique_ptr<EventLoopThread> t(new EventLoopThread(std::move(name)));
    // start()'s own: the thread touches them only until it says it is ready
    // (under the lock, so that start() cannot return before it is done).
    std::mutex mu;
    std::condition_variable cv;
    bool ready = false;
    std::string failure;
    EventLoopThread* raw = t.get();
    t->thread_ = std::thread([raw, body = std::move(body), &mu, &cv, &ready, &failure] {
      bool serving = false;
      try {
        auto io = kj::setupAsyncIo();
        auto stop = kj::newPromiseAndCrossThreadFulfiller<void>();
        raw->stop_ = kj::mv(stop.fulfiller);
        raw->executor_ = kj::getCurrentThreadExecutor().addRef();
        body(io, [&] {
          serving = true;
          {
            std::lock_guard lock(mu);
            ready = true;
            cv.notify_all();
          }
          stop.promise.wait(io.waitScope);
        });
      } catch (const kj::Exception& e) {
        if (serving) {
          log_error(raw->name_ + ": its event loop failed: " + kj_reason(e));
          return;
        }
        std::lock_guard lock(mu);
        failure = kj_reason(e);
        if (failure.empty()) failure = "kj failed";
        ready = true;
        cv.notify_all();
      }
    });
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return ready; });
    if (!failure.empty()) {
      lock.unlock();
      t->thread_.join();
      t->stop_ = nullptr;  // its promise is gone with the thread
      return Status::unavailable(failure);
    }
    return t;
  }

  // Ends serve() and waits for the body to return.
  ~EventLoopThread() {
    if (stop_) stop_->fulfill();
    if (thread_.joinable()) thread_.join();
  }
  EventLoopThread(const EventLoopThread&) = delete;
  EventLoopThread& operator=(const EventLoopThread&) = delete;

  // Runs work on the loop's thread (executeSync, executeAsync).
  const kj::Executor& executor() const { return *executor_; }
  // True on the loop's own thread, where executeSync would deadlock.
  bool on_loop() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  explicit EventLoopThread(std::string name) : name_(std::move(name)) {}

  std::string name_;
  std::thread thread_;
  kj::Own<const kj::Executor> executor_;                 // set before start() returns
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> stop_;  // likewise
};

}  // namespace atl
