// Compute utilization of a worker whose synchronization travels on its own
// link: the method behind Streaming DiLoCo's Table 4 (Douillard et al.,
// arXiv 2501.18512), as a pure, deterministic function of the workload, the
// schedule and the bandwidth. No CAF, no randomness, no simulator state.
//
// A step is T seconds of compute: forward T/3, then backward 2T/3. A payload
// is sent as per-layer transfers, each released when its layer's backward
// ends: a group of n layers sent in one step releases transfer k (0..n-1) at
//   T/3 + (k+1)/n x 2T/3   into the step,
// each of (N/L parameters) x bits_per_parameter x volume_factor bits. The
// link is one FIFO: a transfer released at r starts at max(r, link free)
// and takes latency + size / B. A transfer is due at the end of some step;
// at the end of each step, compute waits for the transfers due then:
//   stall = max(0, max over them of finish - end of that step)
// and the next step starts after it. Which transfers, and when due:
//   kDataParallel  every step, all L layers (the gradient's reductions
//                  overlapped with the backward pass); due that step.
//   kDiLoCo        the last step of every sync_every-step period, all L
//                  layers (the outer gradient); due that step.
//   kStreaming     fragments (P of them, in rotation, fragment f = layers
//                  [f L / P, (f+1) L / P)) go sync_every / P steps apart: the
//                  j-th at step floor((j+1) H / P) - 1, its layers spread
//                  over that step's backward; due `overlap` steps later.
//
//   utilization = compute time / (compute time + stall time)
//
// over a whole number of periods, at least max(50, 3 H) steps, from an idle
// link. Transfers due after the last simulated step are not charged: in the
// steady state they belong to the next window, as the start-up's missing
// predecessors belong to the previous one.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "atoll/status.h"

namespace atl {

struct Workload {
  std::string name;
  double parameters = 0;    // N
  int layers = 1;           // L: transfers per full model
  double step_seconds = 0;  // T: compute per step
};

// Kaplan's 6 N FLOPs per token: 6 N tokens_per_step / (chips x peak x mfu), in seconds.
// peak_flops: per chip, FLOP/s; mfu in (0, 1].
double step_seconds_from_flops(double parameters, double tokens_per_step, double chips, double peak_flops,
                               double mfu);

enum class SyncMethod { kDataParallel, kDiLoCo, kStreaming };

struct SyncSchedule {
  SyncMethod method = SyncMethod::kDataParallel;
  int sync_every = 1;  // H: steps per period (kDataParallel ignores it: 1)
  int fragments = 1;   // P: kStreaming only; 1 <= P <= layers
  int overlap = 0;     // tau: kStreaming only; steps a fragment may travel past its step
  double bits_per_parameter = 16;
  // Bits each worker's link carries per payload bit: 1 is one copy each way
  // on a full-duplex link; a ring all-reduce among M workers is 2 (M-1)/M.
  double volume_factor = 1.0;
  double latency_seconds = 0.0;  // added to every transfer
};

// Ok, or InvalidArgument naming the first field out of range: parameters,
// step_seconds, bits_per_parameter and volume_factor > 0, layers >= 1,
// sync_every >= 1, 1 <= fragments <= layers, overlap >= 0, latency >= 0.
Status validate(const Workload& workload, const SyncSchedule& schedule);

// Share of time spent computing at `bits_per_second` (> 0), in (0, 1]; exactly 1
// at infinity when latency_seconds is 0.
// REQUIRES: validate(workload, schedule).ok().
double compute_utilization(const Workload& workload, const SyncSchedule& schedule, double bits_per_second);

// `points` log-spaced bandwidths from from_gbit to to_gbit Gbit/s, in bits/s.
// The default is Table 4's grid: 10^(-1 + 4k/49) Gbit/s, k = 0..49, printed
// there rounded to 0.1 Gbit/s.
std::vector<double> bandwidth_grid(double from_gbit = 0.1, double to_gbit = 1000, int points = 50);

// The smallest bandwidth of `grid` (bits/s, ascending) at which utilization
// reaches `target`, or nullopt if none does. InvalidArgument if validate()
// fails or target is outside (0, 1).
Result<std::optional<double>> smallest_bandwidth(const Workload& workload, const SyncSchedule& schedule,
                                                 double target, const std::vector<double>& grid);

}  // namespace atl
