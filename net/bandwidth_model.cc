// The bandwidth model (atoll/bandwidth_model.h).
#include "atoll/bandwidth_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace atl {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

double bytes_of(Codec codec, double values, uint32_t block) {
  // encoded_size() works on counts; the model may be asked about 1e11 values.
  const double per_block = static_cast<double>(encoded_size(codec, block, block));
  return is_quantized(codec) ? std::ceil(values / block) * per_block : values * static_cast<double>(encoded_size(codec, 1, block));
}

// Bytes one learner sends (push) and receives (broadcasts) per H steps.
std::pair<double, double> decoupled_bytes(const BandwidthInputs& in) {
  const double per_fragment = in.parameters / std::max(1, in.fragments);
  return {in.fragments * bytes_of(in.push_codec, per_fragment, in.push_block),
          in.fragments * bytes_of(in.broadcast_codec, per_fragment, in.broadcast_block)};
}

}  // namespace

BandwidthNeed bandwidth_need(const BandwidthInputs& in) {
  BandwidthNeed n;
  n.dp_bytes_per_step = 4 * in.parameters;
  const double slack = in.step_seconds * (1 / in.target - 1) - in.rtt_seconds;
  n.dp = slack > 0 ? 2 * 8 * n.dp_bytes_per_step / slack : kInfinity;
  n.dp_average = 8 * n.dp_bytes_per_step / in.step_seconds;
  const auto [up, down] = decoupled_bytes(in);
  const double window = std::max(1, in.sync_every) * in.step_seconds;
  n.decoupled_bytes_per_step = std::max(up, down) / std::max(1, in.sync_every);
  n.decoupled = 8 * std::max(up, down) / window / in.target;
  n.decoupled_average = 8 * std::max(up, down) / window;
  const double room = in.overlap * in.step_seconds - in.rtt_seconds / 2;
  n.decoupled_on_time = room > 0 ? 8 * (up / std::max(1, in.fragments)) / room : kInfinity;
  return n;
}

double hub_need(double learner_bits, int learners, int shards) {
  return learner_bits * std::max(0, learners) / std::max(1, shards);
}

int shards_needed(double learner_bits, int learners, double link_bits, int fragments) {
  if (!std::isfinite(learner_bits) || !(link_bits > 0)) return 0;
  const double shards = std::ceil(hub_need(learner_bits, learners, 1) / link_bits);
  return static_cast<int>(std::clamp(shards, 1.0, static_cast<double>(std::max(1, fragments))));
}

double dp_utilization(const BandwidthInputs& in, double bits_per_second) {
  const double transfer = bits_per_second > 0 ? 2 * 8 * 4 * in.parameters / bits_per_second : kInfinity;
  return in.step_seconds / (in.step_seconds + in.rtt_seconds + transfer);
}

double decoupled_utilization(const BandwidthInputs& in, double bits_per_second) {
  const auto [up, down] = decoupled_bytes(in);
  const double needed = 8 * std::max(up, down) / (std::max(1, in.sync_every) * in.step_seconds);
  return needed <= 0 ? 1.0 : std::min(1.0, bits_per_second / needed);
}

std::string human_bits(double b) {
  if (!std::isfinite(b)) return "unreachable";
  char buf[32];
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.3g Gbit/s", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.3g Mbit/s", b / 1e6);
  else std::snprintf(buf, sizeof buf, "%.3g kbit/s", b / 1e3);
  return buf;
}

}  // namespace atl
