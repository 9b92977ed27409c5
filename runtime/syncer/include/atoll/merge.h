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
#include <vector>

#include "atoll/fragments.h"

namespace atl {

// w = tokens * (tokens / steps) in double (the integer square overflows at
// LLM scale); 0 when steps == 0.
double token_weight(uint64_t tokens, uint64_t steps);

struct Contribution {
  std::span<const float> g;  // outer gradient, base - theta
  double weight;             // token_weight(); >= 0
};

// The sum of x's squares in double, added in index order: bit for bit the
// plain loop `s = 0; for (float v : x) s += double(v) * v;` (norms are part
// of the merge, which must not depend on how it is computed), in a few
// instructions per value instead of one addition's latency.
double sum_of_squares(std::span<const float> x);

// Below this length of the weighted mean of unit vectors, RDA's direction is
// considered undefined and the weighted mean is used instead.
inline constexpr double kRdaMinDirection = 1e-6;

// REQUIRES: every c.g.size() == out.size(); sum of weights > 0.
void weighted_mean(std::span<const Contribution> cs, std::span<float> out);
void rda(std::span<const Contribution> cs, std::span<float> out);

// Merges a whole fragment: AVG fragments take the weighted mean; RDA fragments
// take rda() piece by piece, and the weighted mean of each averaged piece (a
// piece of a head beside the body). Contributions with weight 0 are ignored.
// Returns false (and leaves `out` untouched) when no contribution has weight > 0.
// REQUIRES: every c.g.size() == out.size() == fragment.size.
bool merge_fragment(const Fragment& fragment, std::span<const Contribution> cs,
                    std::span<float> out);

// merge_fragment() in streaming form: each contribution is folded into
// running sums as it arrives, and its vector is no longer needed. The syncer
// keeps one per fragment, so its memory does not grow with the learners.
//
//   AVG: sum_m w_m g_m and W = sum_m w_m
//   RDA, per tensor: sum_m w_m |g_m| (a scalar), sum_m (w_m / |g_m|) g_m (the
//        weighted sum of unit vectors), and sum_m w_m g_m for the fallback to
//        AVG when the mean direction vanishes
//
// The vectors are double: 8 bytes per parameter for AVG, 16 for RDA, however
// many contribute (float sums would lose about sqrt(M) ulps, and more where
// the directions cancel, which is exactly where RDA's fallback looks). merge()
// gives what merge_fragment() gives over the same contributions, to float
// rounding: only the order of the double operations differs.
//
// For a given order of add() calls the result is the same bit for bit
// however it is computed: each element's sums run in the order of the
// contributions and each norm in index order, whether the passes run on one
// thread or several (add() and merge() split long fragments over oneTBB's
// threads by element ranges; tests/runtime/syncer/merge_identity_test.cc
// holds the plain loops they are checked against).
class MergeAccumulator {
 public:
  MergeAccumulator() = default;
  // The rules of `fragment` and its pieces decide what is summed (the caller may force one first: force_rule()).
  explicit MergeAccumulator(Fragment fragment);

  // Folds in g with `weight`. A weight <= 0 is ignored, as merge_fragment()
  // ignores it. REQUIRES: g.size() == fragment.size.
  void add(std::span<const float> g, double weight);
  // Contributions folded in (weight > 0), and the sum of their weights.
  size_t count() const { return count_; }
  double weight() const { return weight_; }
  // The merge of every contribution folded in since the last clear(). Returns
  // false (and leaves `out` untouched) when there is none.
  // REQUIRES: out.size() == fragment.size.
  bool merge(std::span<float> out) const;
  // Forgets every contribution; the sums keep their memory for the next round.
  void clear();
  // Bytes the sums hold.
  size_t bytes() const { return (sum_.capacity() + unit_.capacity() + length_.capacity()) * sizeof(double); }

 private:
  Fragment fragment_;
  size_t count_ = 0;
  double weight_ = 0.0;
  std::vector<double> sum_;     // sum w g (AVG; RDA's fallback)
  std::vector<double> unit_;    // RDA: sum (w / |g_piece|) g, piece by piece
  std::vector<double> length_;  // RDA: per piece, sum w |g_piece|
};

}  // namespace atl
