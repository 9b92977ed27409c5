// Merging the learners' outer gradients of one fragment (docs/design.md section 5).
//
// Learner m's outer gradient is g_m = base - theta_m: the opposite of its
// progress since the global version it adopted. Its weight is
// tokens_m^2 / steps_m, so a learner that did half the steps counts half and
// bigger batches count more; a learner with no step since its base weighs 0.
//
//   AVG: sum_m w_m g_m / sum_m w_m
//   RDA, per tensor: (sum_m w_m |g_m| / W) * unit(sum_m w_m unit(g_m) / W)
//        (falls back to AVG when that mean direction vanishes)
//
// RDA keeps the length of the learners' updates when their directions differ:
// the plain mean of M orthogonal updates of equal length shrinks like 1/sqrt(M).
// All sums run in double; the vectors are float.
#pragma once

#include <cstdint>
#include <span>

#include "atoll/fragments.h"

namespace atl {

// w = tokens * (tokens / steps) in double (the integer square overflows at
// LLM scale); 0 when steps == 0.
double token_weight(uint64_t tokens, uint64_t steps);

struct Contribution {
  std::span<const float> g;  // outer gradient, base - theta
  double weight;             // token_weight(); >= 0
};

// Below this length of the weighted mean of unit vectors, RDA's direction is
// considered undefined and the weighted mean is used instead.
inline constexpr double kRdaMinDirection = 1e-6;

// REQUIRES: every c.g.size() == out.size(); sum of weights > 0.
void weighted_mean(std::span<const Contribution> cs, std::span<float> out);
void rda(std::span<const Contribution> cs, std::span<float> out);

// Merges a whole fragment: AVG fragments take the weighted mean; RDA fragments
// take rda() tensor by tensor. Contributions with weight 0 are ignored.
// Returns false (and leaves `out` untouched) when no contribution has weight > 0.
// REQUIRES: every c.g.size() == out.size() == fragment.size.
bool merge_fragment(const Fragment& fragment, std::span<const Contribution> cs,
                    std::span<float> out);

}  // namespace atl
