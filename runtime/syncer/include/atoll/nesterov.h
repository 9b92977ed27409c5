// Nesterov SGD: the outer optimizer the syncer runs on each fragment.
//
//   v <- mu*v + g ;  theta <- theta - lr*(g + mu*v)
//
// g is the merged outer gradient (base - learner, see merge.h), so a positive
// lr moves the global copy towards where the learners went. Keep lr < 1 (lr
// >= 1 gives loss spikes). The effective step is about lr/(1-mu), so short
// sync intervals want less momentum: the topology's default is 0.5 with mu
// 0.6 at H = 12 (topology.h), not this struct's 0.7 and 0.8.
//
// Delayed Nesterov (Async Local-SGD, arXiv 2401.09135, Algorithm 3) moves
// the velocity only every N-th step, on the mean of the N gradients since,
// and steps plainly by lr*g/N between:
//
//   b <- b + g
//   N-th step:  v <- mu*v + b/N ;  theta <- theta - lr*(g/N + mu*v) ;  b <- 0
//   otherwise:  theta <- theta - lr*g/N
//
// Over N steps theta moves as one Nesterov step on the mean gradient, so a
// stale gradient, merged alone, cannot swing the velocity. N = 1 is Nesterov.
#pragma once

#include <cstdint>
#include <span>

#include "atoll/optimizer_config.h"

namespace atl {

// REQUIRES: theta, velocity and g have the same size.
void nesterov_step(const NesterovConfig& config, std::span<float> theta,
                   std::span<float> velocity, std::span<const float> g);

// nesterov_step() in place when every value it gives is finite; otherwise
// returns false and leaves theta and velocity as they were (a finite but huge
// update can still overflow). Bit for bit what nesterov_step() gives, without
// copies of theta and velocity: one pass checks, a second one writes. Long
// vectors are split over oneTBB's threads by element ranges.
// REQUIRES: theta, velocity and g have the same size.
bool nesterov_step_if_finite(const NesterovConfig& config, std::span<float> theta,
                             std::span<float> velocity, std::span<const float> g);

// Step `k` (0, 1, ...) of delayed Nesterov in place when every value it gives
// is finite, as nesterov_step_if_finite(); `pending` holds b, the sum of the
// gradients since the last velocity step (zeros at k = 0). Step k moves the
// velocity when (k + 1) % config.every == 0. With every = 1 it is
// nesterov_step_if_finite(), and pending is not used (it may be empty).
// REQUIRES: config.every >= 1; theta, velocity and g have the same size, and
// pending too when config.every > 1.
bool delayed_nesterov_step_if_finite(const NesterovConfig& config, uint64_t k, std::span<float> theta,
                                     std::span<float> velocity, std::span<float> pending,
                                     std::span<const float> g);

}  // namespace atl
