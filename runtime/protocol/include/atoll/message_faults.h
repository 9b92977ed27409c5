// MessageFaults: the one interposition point for message faults.
//
// Every packet between a learner and the syncer, in either direction, passes
// route() when a fault plan is active; route() says what becomes of it:
// delivered now, later, twice, damaged, or not at all. With no fault ever
// added, active() is one relaxed atomic load and senders skip route()
// entirely, so a run without a plan pays nothing. Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "atoll/rng.h"

namespace atl {

enum class LinkFaultKind : uint8_t {
  kDrop = 0,       // partition: messages lost
  kDelay = 1,      // each message `seconds` late
  kDuplicate = 2,  // each message delivered twice
  kReorder = 3,    // each message late by a random time in [0, seconds]: they overtake each other
  kCorrupt = 4,    // bytes flipped in the message
};
const char* link_fault_name(LinkFaultKind kind);

struct LinkFault {
  LinkFaultKind kind = LinkFaultKind::kDrop;
  int learner = -1;  // the link between this learner and the syncer; -1: every link
  std::chrono::steady_clock::time_point from, until;
  double seconds = 0.0;      // kDelay: the delay; kReorder: the window
  double probability = 1.0;  // share of messages affected
};

class MessageFaults {
 public:
  explicit MessageFaults(uint64_t seed) : rng_(seed) {}

  bool active() const noexcept { return active_.load(std::memory_order_relaxed); }
  void add(const LinkFault& fault);

  struct Delivery {
    double delay_seconds = 0.0;
    std::vector<uint8_t> bytes;
  };
  // What becomes of `bytes` sent over learner `learner`'s link at `now`
  // (either direction). Several faults active on a link all apply.
  std::vector<Delivery> route(uint32_t learner, std::vector<uint8_t> bytes,
                              std::chrono::steady_clock::time_point now);

  // Messages each kind has affected so far.
  std::array<uint64_t, 5> affected() const;

 private:
  std::atomic<bool> active_{false};
  mutable std::mutex mu_;
  std::vector<LinkFault> faults_;
  Rng rng_;
  std::array<uint64_t, 5> affected_{};
};

}  // namespace atl
