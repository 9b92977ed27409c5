// OverDoor: what a syncer whose run is over leaves at its address.
//
// A syncer started under an engine that always restarts it (a Kubernetes
// StatefulSet) must not start a finished run again, and a learner that comes
// late (a Job's pod started again, one that missed the end) must learn that
// the run is over rather than retry until it gives up. So an idle syncer
// keeps its door: every connection that passes the handshake (the cluster
// token, TLS) gets one Done("the run is over ...") frame and is closed. A
// learner process takes it as it takes the end of a run (it exits 0); a
// learner asking for the topology or an open slot gets Status::over.
//
// Thread-safety: the door's events only queue; one thread of its own answers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "atoll/door.h"
#include "atoll/status.h"

namespace atl {

class OverDoor {
 public:
  // Listens on host:port (0: any free port) with the cluster's options;
  // `why` is what every learner is told ("the run is over: ...").
  static Result<std::unique_ptr<OverDoor>> open(const std::string& host, uint16_t port, DoorOptions options,
                                                std::string why);
  ~OverDoor();
  OverDoor(const OverDoor&) = delete;
  OverDoor& operator=(const OverDoor&) = delete;

  uint16_t port() const { return port_; }
  uint64_t told() const;  // connections told so far

 private:
  OverDoor() = default;
  void answer();  // the answering thread

  std::string why_;
  uint16_t port_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<uint64_t> opened_;  // connections to tell
  uint64_t told_ = 0;
  bool stopping_ = false;
  std::thread thread_;
  std::unique_ptr<Door> door_;  // destroyed first: no event comes after
};

}  // namespace atl
