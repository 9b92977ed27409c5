#include "atoll/merge.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "atoll/huge_pages.h"

namespace atl {
namespace {

// s plus the squares of x, one at a time in index order. A float's square is
// exact in double, so each step rounds once whether or not the compiler fuses
// the multiply and the add.
double add_squares_plain(double s, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

double norm(std::span<const float> x) { return std::sqrt(sum_of_squares(x)); }

// Streaming passes over a fragment (MergeAccumulator) split their elements
// over threads in ranges of this many: about 10 us of work each, so a task's
// cost is noise. Each element belongs to one range, and its arithmetic is the
// same whatever the split, so results do not depend on the threads.
constexpr size_t kGrain = size_t{1} << 16;

template <class Body>
void for_ranges(size_t begin, size_t end, const Body& body) {
  if (end - begin < 2 * kGrain) return body(begin, end);
  tbb::parallel_for(tbb::blocked_range<size_t>(begin, end, kGrain),
                    [&](const tbb::blocked_range<size_t>& r) { body(r.begin(), r.end()); });
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

double sum_of_squares(std::span<const float> x) {
  // Chunk by chunk: while the sum s stays in one binade [2^(e-1), 2^e), it is
  // k units u = 2^(e-53) with k an integer in [2^52, 2^53), and s + a rounds
  // to (k + round(a/u)) u, whatever k is, unless a/u is halfway between two
  // integers (then the tie goes to the even k). So a chunk that has no tie
  // and stays in the binade is k plus a sum of integers, which any order
  // gives; any other chunk (s too small or large, a tie, a binade crossed,
  // a value not finite) is added one by one.
  constexpr size_t kChunk = 1024;
  double s = 0.0;
  for (size_t begin = 0; begin < x.size(); begin += kChunk) {
    const size_t len = std::min(kChunk, x.size() - begin);
    const float* xb = x.data() + begin;
    if (!(s >= 0x1p-900 && s < 0x1p900)) {  // far from both ends, so 1/u is a normal double
      s = add_squares_plain(s, xb, len);
      continue;
    }
    int e = 0;
    (void)std::frexp(s, &e);
    const double per_unit = std::ldexp(1.0, 53 - e);  // 1/u: exact scaling by a power of two
    const auto k = static_cast<int64_t>(s * per_unit);
    // Signed counters, so that the loop vectorizes. A square of 2^52 units or
    // more, an infinity or a NaN counts 2^52: the chunk then leaves the binade.
    int64_t units = 0, ties = 0;
    for (size_t i = 0; i < len; ++i) {
      const double t = static_cast<double>(xb[i]) * xb[i] * per_unit;
      const double ts = t < 0x1p52 ? t : 0x1p52;
      const double r = (ts + 0x1p52) - 0x1p52;  // ts rounded to an integer, ties to even
      ties += static_cast<int64_t>(std::fabs(ts - r) == 0.5);
      units += static_cast<int64_t>(r);  // <= 2^52 each: 1024 of them cannot overflow
    }
    if (ties == 0 && k + units < (int64_t{1} << 53)) s = static_cast<double>(k + units) / per_unit;
    else s = add_squares_plain(s, xb, len);
  }
  return s;
}

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
    if (piece.rule == MergeRule::kAvg) weighted_mean(piece_cs, out.subspan(piece.fragment_offset, piece.size));
    else rda(piece_cs, out.subspan(piece.fragment_offset, piece.size));
  }
  return true;
}

MergeAccumulator::MergeAccumulator(Fragment fragment) : fragment_(std::move(fragment)) {}

void MergeAccumulator::add(std::span<const float> g, double weight) {
  assert(g.size() == fragment_.size);
  if (!(weight > 0.0)) return;
  const bool rda = fragment_.rule == MergeRule::kRda;
  // The first of a round writes the sums instead of adding to zeros: 0 + y
  // is y + 0 (which turns -0 into +0, as adding to zero did), and a pass
  // that zeroed them is saved. resize() keeps the memory of the last round.
  const bool first = count_ == 0;
  if (first) {
    reserve_huge(sum_, fragment_.size);
    sum_.resize(fragment_.size);
    if (rda) {
      reserve_huge(unit_, fragment_.size);
      unit_.resize(fragment_.size);
      length_.assign(fragment_.pieces.size(), 0.0);
    }
  }
  ++count_;
  weight_ += weight;
  const float* x = g.data();
  double* sum = sum_.data();
  if (!rda) {
    for_ranges(0, fragment_.size, [&](size_t b, size_t e) {
      if (first)
        for (size_t i = b; i < e; ++i) sum[i] = weight * x[i] + 0.0;
      else
        for (size_t i = b; i < e; ++i) sum[i] += weight * x[i];
    });
    return;
  }
  // One pass over each piece for both sums, once its length is known; an
  // averaged piece needs the weighted sum only.
  double* unit = unit_.data();
  for (size_t k = 0; k < fragment_.pieces.size(); ++k) {
    const auto& piece = fragment_.pieces[k];
    if (piece.rule == MergeRule::kAvg) {
      for_ranges(piece.fragment_offset, piece.fragment_offset + piece.size, [&](size_t b, size_t e) {
        if (first)
          for (size_t i = b; i < e; ++i) sum[i] = weight * x[i] + 0.0;
        else
          for (size_t i = b; i < e; ++i) sum[i] += weight * x[i];
      });
      continue;
    }
    const double n = norm(g.subspan(piece.fragment_offset, piece.size));
    length_[k] += weight * n;
    const size_t end = piece.fragment_offset + piece.size;
    const bool direction = n != 0.0;  // none: adds to the length (zero) and the weight only
    const double a = direction ? weight / n : 0.0;
    for_ranges(piece.fragment_offset, end, [&](size_t b, size_t e) {
      if (first) {
        for (size_t i = b; i < e; ++i) sum[i] = weight * x[i] + 0.0;
        if (!direction) std::fill(unit + b, unit + e, 0.0);
        else
          for (size_t i = b; i < e; ++i) unit[i] = a * x[i] + 0.0;
      } else if (!direction) {
        for (size_t i = b; i < e; ++i) sum[i] += weight * x[i];
      } else {
        for (size_t i = b; i < e; ++i) {
          sum[i] += weight * x[i];
          unit[i] += a * x[i];
        }
      }
    });
  }
}

bool MergeAccumulator::merge(std::span<float> out) const {
  assert(out.size() == fragment_.size);
  if (count_ == 0) return false;
  const double w = weight_;
  const double* sum = sum_.data();
  float* o = out.data();
  if (fragment_.rule == MergeRule::kAvg) {
    for_ranges(0, out.size(), [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) o[i] = static_cast<float>(sum[i] / w);
    });
    return true;
  }
  const double* unit = unit_.data();
  for (size_t k = 0; k < fragment_.pieces.size(); ++k) {
    const auto& piece = fragment_.pieces[k];
    const size_t begin = piece.fragment_offset, end = begin + piece.size;
    if (piece.rule == MergeRule::kAvg) {
      for_ranges(begin, end, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) o[i] = static_cast<float>(sum[i] / w);
      });
      continue;
    }
    for_ranges(begin, end, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) o[i] = static_cast<float>(unit[i] / w);
    });
    const double direction = norm(out.subspan(begin, piece.size));  // of the mean direction as rda() rounds it
    if (direction < kRdaMinDirection) {
      for_ranges(begin, end, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) o[i] = static_cast<float>(sum[i] / w);
      });
      continue;
    }
    const auto scale = static_cast<float>(length_[k] / w / direction);
    for_ranges(begin, end, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) o[i] *= scale;
    });
  }
  return true;
}

void MergeAccumulator::clear() {
  count_ = 0;
  weight_ = 0.0;
}

}  // namespace atl
