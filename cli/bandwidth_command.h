// `atoll bandwidth`: the link each mode needs (atoll/bandwidth_model.h).
#pragma once

#include <string>
#include <vector>

namespace atl::cli {

struct BandwidthArgs {
  std::string file;                   // topology; empty: the built-in default
  std::vector<std::string> sets;      // "key=value" over the topology's keys
  double step_seconds = 0.25;         // compute per inner step of one learner
  double rtt_ms = 0;                  // round trip to the syncer
  double target = 0.95;               // compute utilization to keep
  double parameters = 0;              // > 0: this many instead of the topology model's
  std::vector<double> links_mbit;     // also: utilization of each mode at these bandwidths
  int learners = 0;                   // > 0: this many instead of the topology's [[learners]]
  int shards = 0;                     // syncer shards; 0: the topology's syncer.shards
  double hub_gbit = 10;               // each syncer shard's link, for the shards needed
  std::string link;                   // "rate=1gbit,delay=20ms": the settings that keep the target on it
};

// Prints what each mode needs per learner link and at the syncer.
// Exit status: 0 done; 2 a bad topology or arguments.
int bandwidth_command(const BandwidthArgs& args);

}  // namespace atl::cli
