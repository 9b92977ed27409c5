// An emulated wide-area link: its shape, and one direction of it as a queue.
// The door shapes what a process sends with it (atoll/door.h, for kernels
// without netem); the simulator carries every message over it in virtual
// time (atoll/simulation.h). One model, so a simulated link and an emulated
// one can be compared.
//
// Like netem: data leaves at `rate`, one message after the other, and
// arrives `delay` later give or take `jitter`, never out of order (TCP
// delivers in order); each lost 1448-byte segment costs one more round trip
// (a fast retransmit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "atoll/status.h"

namespace atl {

struct LinkShape {
  double rate_mbit = 0;   // megabits per second; 0: unlimited
  double delay_ms = 0;    // one way
  double jitter_ms = 0;   // uniform in [-jitter, +jitter]
  double loss = 0;        // share of segments lost, in [0, 1)
  bool active() const { return rate_mbit > 0 || delay_ms > 0 || jitter_ms > 0 || loss > 0; }
  std::string to_string() const;  // "100 Mbit/s, 20 ms, jitter 1 ms, loss 0.1%" or "unshaped"
};

// "rate=100mbit,delay=20ms,jitter=1ms,loss=0.001" (any subset; rate also in
// kbit or gbit, times in us, ms or s). Errors name the part that is wrong.
Result<LinkShape> parse_link_shape(std::string_view text);

// One direction of a link. Times are seconds on any clock, the same for
// every call, and never decrease.
class LinkQueue {
 public:
  static constexpr size_t kSegmentBytes = 1448;  // a TCP segment on a 1500-byte MTU

  explicit LinkQueue(LinkShape shape = {}, uint64_t seed = 1) : shape_(shape), rng_(seed) {}

  // When `bytes` handed to the link at `now` have all reached the far end:
  // after what the link is still sending, at the rate, plus the delay.
  double arrival(double now, size_t bytes);
  // When the link will have sent everything handed to it so far.
  double free_at() const { return free_at_; }
  const LinkShape& shape() const { return shape_; }

 private:
  LinkShape shape_;
  std::mt19937_64 rng_;
  double free_at_ = 0.0, last_arrival_ = 0.0;
};

}  // namespace atl
