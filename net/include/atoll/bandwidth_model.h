// The bandwidth model: how fast a learner's link must be for each mode to
// keep its compute busy (`atoll bandwidth`; docs/across-machines.md, "The bandwidth model").
//
// Per learner, on its own link to the syncer (bits/s each way; the syncer's
// side carries M times that):
//
//   dp         every step, the learner sends its gradient (fp32) and waits
//              for the new parameters (fp32): the transfer and a round trip
//              sit on the step's critical path. Utilization at bandwidth B:
//                u = T / (T + RTT + 2 * 32 N / B)
//              so u >= target needs B >= 64 N / (T (1/target - 1) - RTT),
//              and no B suffices once RTT >= T (1/target - 1).
//   decoupled  every H steps, the learner pushes each of its P fragments
//              (push codec) and receives each fragment's broadcast (broadcast
//              codec), while it trains on: nothing waits. Compute stays busy
//              while the link carries that traffic with the target's headroom:
//                B >= 8 (push bytes + broadcast bytes) / (H T) / target
//              (up and down travel on the two directions of a full-duplex
//              link, so the larger of the two sets the need). A push is also
//              merged in its round only if it arrives within the overlap:
//                one-way delay + 8 (push bytes / P) / B <= tau T.
//
// The hub: a syncer shard's link carries its share of every learner's
// traffic. S shards own P/S fragments each (balanced by size), so each
// carries M / S times one learner's need, each way:
//                hub = M * learner need / S
// and a hub link of bandwidth L needs S >= M * learner need / L shards.
//
// N: parameters; T: seconds of compute per inner step; RTT in seconds.
// Frame and message overheads (a few dozen bytes per message) are left out.
#pragma once

#include <cstdint>
#include <string>

#include "atoll/codec.h"

namespace atl {

struct BandwidthInputs {
  double parameters = 0;     // N
  double step_seconds = 1;   // T: one inner step of one learner, compute only
  double rtt_seconds = 0;    // round trip between a learner and the syncer
  double target = 0.95;      // compute utilization to keep, in (0, 1)
  int sync_every = 12;       // H
  int fragments = 12;        // P
  int overlap = 2;           // tau, in steps
  Codec push_codec = Codec::kInt4;
  uint32_t push_block = 64;
  Codec broadcast_codec = Codec::kInt4;
  uint32_t broadcast_block = 64;
};

struct BandwidthNeed {
  // Bits per second each way on one learner's link; infinity: none suffices.
  double dp = 0;
  double decoupled = 0;            // sustained traffic with headroom
  double decoupled_on_time = 0;    // pushes that reach their round in time
  // The average rate the link carries each way when compute is never held up
  // (what a traffic graph shows), beside what it must be able to carry.
  double dp_average = 0;
  double decoupled_average = 0;
  double dp_bytes_per_step = 0;    // one way
  double decoupled_bytes_per_step = 0;  // the larger direction, averaged over H steps
};

BandwidthNeed bandwidth_need(const BandwidthInputs& in);

// One syncer shard's link (bits/s each way) for M learners and S shards,
// from one learner's need (a field of BandwidthNeed).
double hub_need(double learner_bits, int learners, int shards);
// The fewest shards whose links of `link_bits` carry the hub: 0 when the
// learner's need is unreachable; never more than `fragments` (a shard owns a
// fragment at least), and then the link is too slow even so (check hub_need).
int shards_needed(double learner_bits, int learners, double link_bits, int fragments);

// Compute utilization at link bandwidth `bits_per_second`: dp's formula
// above; decoupled is 1 while the link carries its traffic, and the share
// the link can carry beyond that.
double dp_utilization(const BandwidthInputs& in, double bits_per_second);
double decoupled_utilization(const BandwidthInputs& in, double bits_per_second);

// "1.24 Gbit/s", "850 kbit/s", "unreachable".
std::string human_bits(double bits_per_second);

}  // namespace atl
