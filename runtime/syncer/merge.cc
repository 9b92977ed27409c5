#include "atoll/merge.h"

#include <cassert>
#include <cmath>
#include <utility>
#include <vector>

namespace atl {
namespace {

double norm(std::span<const float> x) {
  double s = 0.0;
  for (float v : x) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

double total_weight(std::span<const Contribution> cs) {
  double w = 0.0;
  for (const auto& c : cs) w += c.weight;
  return w;
}

// out = sum_m coeff_m * g_m, accumulated in double per element.
void combine(std::span<const Contribution> cs, std::span<const double> coeff, std::span<float> out) {
  std::vector<double> acc(out.size(), 0.0);
  for (size_t m = 0; m < cs.size(); ++m) {
    if (coeff[m] == 0.0) continue;
    const float* g = cs[m].g.data();
    const double a = coeff[m];
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += a * g[i];
  }
  for (size_t i = 0; i < acc.size(); ++i) out[i] = static_cast<float>(acc[i]);
}

}  // namespace

double token_weight(uint64_t tokens, uint64_t steps) {
  if (steps == 0) return 0.0;
  const double t = static_cast<double>(tokens);
  return t * (t / static_cast<double>(steps));
}

void weighted_mean(std::span<const Contribution> cs, std::span<float> out) {
  const double w = total_weight(cs);
  assert(w > 0.0);
  std::vector<double> coeff(cs.size());
  for (size_t m = 0; m < cs.size(); ++m) coeff[m] = cs[m].weight / w;
  combine(cs, coeff, out);
}

void rda(std::span<const Contribution> cs, std::span<float> out) {
  const double w = total_weight(cs);
  assert(w > 0.0);
  double mean_norm = 0.0;
  std::vector<double> coeff(cs.size(), 0.0);
  for (size_t m = 0; m < cs.size(); ++m) {
    const double n = norm(cs[m].g);
    mean_norm += cs[m].weight * n / w;
    if (n > 0.0) coeff[m] = cs[m].weight / (w * n);  // unit(g_m), weighted
  }
  combine(cs, coeff, out);  // out = mean direction (length <= 1)
  const double direction = norm(out);
  if (direction < kRdaMinDirection) {
    weighted_mean(cs, out);
    return;
  }
  const auto scale = static_cast<float>(mean_norm / direction);
  for (float& x : out) x *= scale;
}

bool merge_fragment(const Fragment& fragment, std::span<const Contribution> cs,
                    std::span<float> out) {
  assert(out.size() == fragment.size);
  std::vector<Contribution> live;
  for (const auto& c : cs) {
    assert(c.g.size() == fragment.size);
    if (c.weight > 0.0) live.push_back(c);
  }
  if (live.empty()) return false;
  if (fragment.rule == MergeRule::kAvg) {
    weighted_mean(live, out);
    return true;
  }
  std::vector<Contribution> piece_cs(live.size());
  for (const auto& piece : fragment.pieces) {
    for (size_t m = 0; m < live.size(); ++m)
      piece_cs[m] = {live[m].g.subspan(piece.fragment_offset, piece.size), live[m].weight};
    rda(piece_cs, out.subspan(piece.fragment_offset, piece.size));
  }
  return true;
}

MergeAccumulator::MergeAccumulator(Fragment fragment) : fragment_(std::move(fragment)) {}

void MergeAccumulator::add(std::span<const float> g, double weight) {
  assert(g.size() == fragment_.size);
  if (!(weight > 0.0)) return;
  const bool rda = fragment_.rule == MergeRule::kRda;
  if (count_ == 0) {  // the first of a round: start from zero (assign keeps the capacity)
    sum_.assign(fragment_.size, 0.0);
    if (rda) {
      unit_.assign(fragment_.size, 0.0);
      length_.assign(fragment_.pieces.size(), 0.0);
    }
  }
  ++count_;
  weight_ += weight;
  const float* x = g.data();
  double* sum = sum_.data();
  for (size_t i = 0; i < fragment_.size; ++i) sum[i] += weight * x[i];
  if (!rda) return;
  double* unit = unit_.data();
  for (size_t k = 0; k < fragment_.pieces.size(); ++k) {
    const auto& piece = fragment_.pieces[k];
    const double n = norm(g.subspan(piece.fragment_offset, piece.size));
    length_[k] += weight * n;
    if (n == 0.0) continue;  // no direction: adds to the length (zero) and the weight only
    const double a = weight / n;
    for (size_t i = piece.fragment_offset; i < piece.fragment_offset + piece.size; ++i) unit[i] += a * x[i];
  }
}

bool MergeAccumulator::merge(std::span<float> out) const {
  assert(out.size() == fragment_.size);
  if (count_ == 0) return false;
  const double w = weight_;
  if (fragment_.rule == MergeRule::kAvg) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(sum_[i] / w);
    return true;
  }
  for (size_t k = 0; k < fragment_.pieces.size(); ++k) {
    const auto& piece = fragment_.pieces[k];
    std::span<float> o = out.subspan(piece.fragment_offset, piece.size);
    for (size_t i = 0; i < o.size(); ++i) o[i] = static_cast<float>(unit_[piece.fragment_offset + i] / w);
    const double direction = norm(o);  // of the mean direction as rda() rounds it
    if (direction < kRdaMinDirection) {
      for (size_t i = 0; i < o.size(); ++i) o[i] = static_cast<float>(sum_[piece.fragment_offset + i] / w);
      continue;
    }
    const auto scale = static_cast<float>(length_[k] / w / direction);
    for (float& x : o) x *= scale;
  }
  return true;
}

void MergeAccumulator::clear() {
  count_ = 0;
  weight_ = 0.0;
}

}  // namespace atl
