// Nesterov SGD: the outer optimizer the syncer runs on each fragment.
//
//   v <- mu*v + g ;  theta <- theta - lr*(g + mu*v)
//
// g is the merged outer gradient (base - learner, see merge.h), so a positive
// lr moves the global copy towards where the learners went. Keep lr < 1 (lr
// >= 1 gives loss spikes). The effective step is about lr/(1-mu), so short
// sync intervals want less momentum: the topology's default is 0.7 with mu
// 0.6 at H = 12 (topology.h), not this struct's 0.8.
#pragma once

#include <span>

namespace atl {

struct NesterovConfig {
  float lr = 0.7f;
  float momentum = 0.8f;

  friend bool operator==(const NesterovConfig&, const NesterovConfig&) = default;
};

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

}  // namespace atl
