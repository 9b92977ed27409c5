// The utilization model of Streaming DiLoCo's Table 4: one FIFO link, per-layer
// transfers released over the backward pass, stalls where they are due.
#include "atoll/utilization_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

namespace atl {
namespace {

// One worker's link: carries one transfer at a time, in release order.
struct Link {
  double bits_per_second;
  double latency_seconds;
  double free_at = 0;

  // When a transfer of `bits` released at `release` is through.
  double send(double release, double bits) {
    free_at = std::max(release, free_at) + latency_seconds + bits / bits_per_second;
    return free_at;
  }
};

// Every method as streaming: data-parallel is H = 1, P = 1, tau = 0; DiLoCo is P = 1, tau = 0.
struct Cadence {
  int64_t every;
  int64_t fragments;
  int64_t overlap;
};

Cadence cadence_of(const SyncSchedule& s) {
  switch (s.method) {
    case SyncMethod::kDataParallel: return {1, 1, 0};
    case SyncMethod::kDiLoCo: return {s.sync_every, 1, 0};
    case SyncMethod::kStreaming: return {s.sync_every, s.fragments, s.overlap};
  }
  return {1, 1, 0};
}

// The step at whose backward the j-th fragment goes: P fragments per H steps,
// as evenly as whole steps allow, the last at the period's last step.
int64_t step_of_sync(int64_t j, const Cadence& c) { return (j + 1) * c.every / c.fragments - 1; }

// Release time, from the step's start, of the k-th of n transfers spread over
// the backward. Written from the step's end so the last one is T exactly, not
// T/3 + 2T/3 rounded: at unlimited bandwidth it then stalls by exactly zero.
double release_offset(int k, int n, double step_seconds) {
  return step_seconds - (2.0 * step_seconds / 3.0) * static_cast<double>(n - 1 - k) / n;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

double step_seconds_from_flops(double parameters, double tokens_per_step, double chips, double peak_flops,
                               double mfu) {
  return 6.0 * parameters * tokens_per_step / (chips * peak_flops * mfu);
}

Status validate(const Workload& w, const SyncSchedule& s) {
  const std::string where = "workload '" + w.name + "': ";
  if (!(w.parameters > 0))
    return Status::invalid_argument(where + "parameters must be > 0, got " + number(w.parameters));
  if (w.layers < 1) return Status::invalid_argument(where + "layers must be >= 1, got " + std::to_string(w.layers));
  if (!(w.step_seconds > 0))
    return Status::invalid_argument(where + "step_seconds must be > 0, got " + number(w.step_seconds));
  if (s.sync_every < 1)
    return Status::invalid_argument(where + "sync_every must be >= 1, got " + std::to_string(s.sync_every));
  if (s.fragments < 1 || s.fragments > w.layers)
    return Status::invalid_argument(where + "fragments must be in [1, layers = " + std::to_string(w.layers) +
                                    "], got " + std::to_string(s.fragments));
  if (s.overlap < 0) return Status::invalid_argument(where + "overlap must be >= 0, got " + std::to_string(s.overlap));
  if (!(s.bits_per_parameter > 0))
    return Status::invalid_argument(where + "bits_per_parameter must be > 0, got " + number(s.bits_per_parameter));
  if (!(s.volume_factor > 0))
    return Status::invalid_argument(where + "volume_factor must be > 0, got " + number(s.volume_factor));
  if (!(s.latency_seconds >= 0))
    return Status::invalid_argument(where + "latency_seconds must be >= 0, got " + number(s.latency_seconds));
  return Status();
}

double compute_utilization(const Workload& w, const SyncSchedule& s, double bits_per_second) {
  const Cadence c = cadence_of(s);
  const int64_t wanted = std::max<int64_t>(50, 3 * c.every);
  const int64_t steps = (wanted + c.every - 1) / c.every * c.every;  // whole periods
  const double T = w.step_seconds;
  const double layer_bits = w.parameters / w.layers * s.bits_per_parameter * s.volume_factor;

  Link link{bits_per_second, s.latency_seconds};
  // due[d]: the latest finish among the transfers due at the end of step d.
  // One slot past the end takes what falls due after the last step, uncharged.
  std::vector<double> due(static_cast<size_t>(steps + 1), -std::numeric_limits<double>::infinity());
  double start = 0;
  double stalled = 0;
  int64_t j = 0;  // the next fragment to send, counting every one sent
  for (int64_t step = 0; step < steps; ++step) {
    for (; step_of_sync(j, c) == step; ++j) {
      const int64_t f = j % c.fragments;
      const int first = static_cast<int>(f * w.layers / c.fragments);
      const int n = static_cast<int>((f + 1) * w.layers / c.fragments) - first;
      double& latest = due[static_cast<size_t>(std::min(step + c.overlap, steps))];
      for (int k = 0; k < n; ++k) latest = std::max(latest, link.send(start + release_offset(k, n, T), layer_bits));
    }
    const double end = start + T;
    const double stall = std::max(0.0, due[static_cast<size_t>(step)] - end);
    stalled += stall;
    start = end + stall;
  }
  const double computed = static_cast<double>(steps) * T;
  return computed / (computed + stalled);
}

std::vector<double> bandwidth_grid(double from_gbit, double to_gbit, int points) {
  std::vector<double> grid;
  if (points < 1) return grid;
  if (points == 1) return {from_gbit * 1e9};
  const double lo = std::log10(from_gbit);
  const double span = std::log10(to_gbit) - lo;
  for (int k = 0; k < points; ++k) grid.push_back(std::pow(10.0, lo + k * span / (points - 1)) * 1e9);
  return grid;
}

Result<std::optional<double>> smallest_bandwidth(const Workload& w, const SyncSchedule& s, double target,
                                                 const std::vector<double>& grid) {
  ATOLL_RETURN_IF_ERROR(validate(w, s));
  if (!(target > 0 && target < 1))
    return Status::invalid_argument("workload '" + w.name + "': target must be in (0, 1), got " + number(target));
  // A scan, not a bisection: it needs no monotonicity, and a grid of 50 costs well under a millisecond.
  for (double b : grid)
    if (compute_utilization(w, s, b) >= target) return std::optional<double>(b);
  return std::optional<double>();
}

}  // namespace atl
