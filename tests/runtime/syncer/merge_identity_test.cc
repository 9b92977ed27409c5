// The streaming merge (MergeAccumulator, atoll/merge.h) gives bit for bit
// what its plain loops give, for a given order of contributions: the
// reference below is the accumulator as first written (one element, one
// norm term at a time, on one thread), and the fast one (vectorized norms,
// passes split over threads) must not differ from it in a single bit.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "atoll/codec.h"
#include "atoll/merge.h"
#include "atoll/nesterov.h"
#include "atoll/rng.h"
#include "test_support.h"

namespace atl {
namespace {

double plain_sum_of_squares(std::span<const float> x) {
  double s = 0.0;
  for (float v : x) s += static_cast<double>(v) * v;
  return s;
}

double plain_norm(std::span<const float> x) { return std::sqrt(plain_sum_of_squares(x)); }

// MergeAccumulator's add() and merge() in their plain form.
class PlainAccumulator {
 public:
  explicit PlainAccumulator(Fragment f) : f_(std::move(f)) {}

  void add(std::span<const float> g, double weight) {
    if (!(weight > 0.0)) return;
    const bool rda = f_.rule == MergeRule::kRda;
    if (count_ == 0) {
      sum_.assign(f_.size, 0.0);
      unit_.assign(f_.size, 0.0);
      length_.assign(f_.pieces.size(), 0.0);
    }
    ++count_;
    weight_ += weight;
    for (size_t i = 0; i < f_.size; ++i) sum_[i] += weight * g[i];
    if (!rda) return;
    for (size_t k = 0; k < f_.pieces.size(); ++k) {
      const auto& piece = f_.pieces[k];
      if (piece.rule == MergeRule::kAvg) continue;  // its weighted sum is all it needs
      const double n = plain_norm(g.subspan(piece.fragment_offset, piece.size));
      length_[k] += weight * n;
      if (n == 0.0) continue;
      const double a = weight / n;
      for (size_t i = piece.fragment_offset; i < piece.fragment_offset + piece.size; ++i) unit_[i] += a * g[i];
    }
  }

  bool merge(std::span<float> out) const {
    if (count_ == 0) return false;
    const double w = weight_;
    if (f_.rule == MergeRule::kAvg) {
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(sum_[i] / w);
      return true;
    }
    for (size_t k = 0; k < f_.pieces.size(); ++k) {
      const auto& piece = f_.pieces[k];
      std::span<float> o = out.subspan(piece.fragment_offset, piece.size);
      if (piece.rule == MergeRule::kAvg) {
        for (size_t i = 0; i < o.size(); ++i) o[i] = static_cast<float>(sum_[piece.fragment_offset + i] / w);
        continue;
      }
      for (size_t i = 0; i < o.size(); ++i) o[i] = static_cast<float>(unit_[piece.fragment_offset + i] / w);
      const double direction = plain_norm(o);
      if (direction < kRdaMinDirection) {
        for (size_t i = 0; i < o.size(); ++i) o[i] = static_cast<float>(sum_[piece.fragment_offset + i] / w);
        continue;
      }
      const auto scale = static_cast<float>(length_[k] / w / direction);
      for (float& x : o) x *= scale;
    }
    return true;
  }

 private:
  Fragment f_;
  size_t count_ = 0;
  double weight_ = 0.0;
  std::vector<double> sum_, unit_, length_;
};

// A fragment of tensors of these sizes, every piece under `rule`; `mixed`:
// RDA but for an averaged last piece (a piece of a head beside the body).
Fragment fragment_of(std::vector<size_t> sizes, MergeRule rule, bool mixed = false) {
  Fragment f;
  f.rule = mixed ? MergeRule::kRda : rule;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const bool avg = mixed ? k + 1 == sizes.size() : rule == MergeRule::kAvg;
    f.pieces.push_back({static_cast<int>(k), f.size, f.size, sizes[k], 0, avg ? MergeRule::kAvg : MergeRule::kRda});
    f.size += sizes[k];
  }
  return f;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Outer gradients as the syncer sees them: int4-decoded (values on a coarse
// grid, where ties in the norm's rounding are frequent) or plain floats,
// lengths over four orders of magnitude.
std::vector<float> push_of(size_t n, uint64_t seed, double scale, bool int4) {
  std::vector<float> g = testing::random_vector(n, seed, scale);
  if (!int4) return g;
  std::vector<float> decoded(n);
  BOOST_REQUIRE(decode_payload(encode_payload(Codec::kInt4, 64, g), decoded).ok());
  return decoded;
}

// codec.h's int formats in their plain form: a step per block, then the codes
// packed lowest bits first.
std::vector<uint8_t> plain_encode(int bits, uint32_t block, std::span<const float> x) {
  const int qmax = (1 << (bits - 1)) - 1;
  const size_t blocks = (x.size() + block - 1) / block;
  std::vector<uint8_t> out(blocks * 4 + (x.size() * static_cast<size_t>(bits) + 7) / 8, 0);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * block, end = std::min(x.size(), begin + block);
    float absmax = 0.0f;
    bool finite = true;
    for (size_t i = begin; i < end; ++i) {
      absmax = std::max(absmax, std::fabs(x[i]));
      finite &= std::isfinite(x[i]);
    }
    const float step = finite ? absmax / static_cast<float>(qmax) : std::numeric_limits<float>::quiet_NaN();
    const float inv = finite && step > 0.0f ? 1.0f / step : 0.0f;
    std::memcpy(out.data() + 4 * b, &step, 4);
    for (size_t i = begin; i < end; ++i) {
      const float r = std::min(std::max(x[i] * inv, -float(qmax)), float(qmax));
      const unsigned code = finite ? static_cast<unsigned>(static_cast<int>(std::nearbyint(r)) + qmax) : unsigned(qmax);
      const size_t bit = i * static_cast<size_t>(bits);
      out[blocks * 4 + bit / 8] |= static_cast<uint8_t>(code << (bit % 8));
    }
  }
  return out;
}

std::vector<float> plain_decode(int bits, uint32_t block, std::span<const uint8_t> in, size_t n) {
  const int qmax = (1 << (bits - 1)) - 1;
  const size_t blocks = (n + block - 1) / block;
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    float step;
    std::memcpy(&step, in.data() + 4 * (i / block), 4);
    const size_t bit = i * static_cast<size_t>(bits);
    const int code = (in[blocks * 4 + bit / 8] >> (bit % 8)) & ((1 << bits) - 1);
    out[i] = static_cast<float>(code - qmax) * step;
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(merge_identity_test)

BOOST_AUTO_TEST_CASE(int_codecs_equal_their_plain_form_bit_for_bit) {
  // What the syncer decodes and broadcasts: blocks that start on a byte (the
  // fast path) and blocks that do not, a last block cut short, a block with
  // an infinity (a NaN step), one of zeros.
  // Long enough to be split over threads.
  std::vector<float> x = testing::random_vector(300007, 21, 1e-3);
  std::fill(x.begin() + 640, x.begin() + 704, 0.0f);
  std::vector<float> with_inf = x;
  with_inf[1000] = std::numeric_limits<float>::infinity();
  for (auto [codec, bits] : {std::pair{Codec::kInt8, 8}, {Codec::kInt4, 4}, {Codec::kInt2, 2}})
    for (uint32_t block : {8u, 9u, 64u, 66u, 1000u, 4096u}) {
      const Payload p = encode_payload(codec, block, x);
      BOOST_CHECK_MESSAGE(p.bytes == plain_encode(bits, block, x), codec_name(codec) << " block " << block);
      std::vector<float> decoded(x.size());
      BOOST_REQUIRE(decode_payload(p, decoded).ok());
      BOOST_CHECK_MESSAGE(same_bits(decoded, plain_decode(bits, block, p.bytes, x.size())),
                          codec_name(codec) << " block " << block);
      BOOST_CHECK(encode_payload(codec, block, with_inf).bytes == plain_encode(bits, block, with_inf));
    }
  // A long payload that is wrong in one place is refused, and says why.
  const Payload good = encode_payload(Codec::kInt4, 64, x);
  std::vector<float> out(x.size());
  DecodeFault fault = DecodeFault::kNone;
  Payload bad_code = good;
  bad_code.bytes[bad_code.bytes.size() - 1000] = 0xff;  // code 15: above 2 * 7
  BOOST_CHECK(!decode_payload(bad_code, out, fault).ok());
  BOOST_CHECK(fault == DecodeFault::kMalformed);
  Payload nan_step = encode_payload(Codec::kInt4, 64, with_inf);
  BOOST_CHECK(!decode_payload(nan_step, out, fault).ok());
  BOOST_CHECK(fault == DecodeFault::kNonFinite);
}

BOOST_AUTO_TEST_CASE(sum_of_squares_equals_the_plain_loop) {
  Rng rng(7);
  std::vector<std::vector<float>> cases;
  cases.push_back({});
  cases.push_back({0.0f, -0.0f, 0.0f});
  for (size_t n : {1, 5, 1023, 1024, 1025, 70000}) cases.push_back(testing::random_vector(n, n, 1.0));
  // Few bits per value: squares land on halves of the sum's last unit often.
  std::vector<float> coarse(50000);
  for (auto& v : coarse) v = static_cast<float>(std::floor(8.0 * rng.uniform()) - 4.0) * 0.125f;
  cases.push_back(coarse);
  // Magnitudes over 60 binades, growing and shrinking: the sum crosses binades inside chunks.
  std::vector<float> wide(40000);
  for (size_t i = 0; i < wide.size(); ++i)
    wide[i] = static_cast<float>((rng.uniform() - 0.5) * std::ldexp(1.0, static_cast<int>(i % 4000) / 70 - 30));
  cases.push_back(wide);
  std::vector<float> rising(40000);
  for (size_t i = 0; i < rising.size(); ++i) rising[i] = std::ldexp(1.0f, static_cast<int>(i / 400) - 50);
  cases.push_back(rising);
  // Subnormals, tiny and huge values, an infinity, a NaN.
  std::vector<float> ends = testing::random_vector(5000, 3, 1e-3);
  ends[10] = std::numeric_limits<float>::denorm_min();
  ends[2000] = 1e-30f;
  cases.push_back(ends);
  std::vector<float> tiny(3000);
  for (auto& v : tiny) v = std::numeric_limits<float>::denorm_min() * static_cast<float>(1 + 100 * rng.uniform());
  cases.push_back(tiny);
  std::vector<float> huge = testing::random_vector(3000, 4, 1.0);
  huge[1500] = 3e38f;
  cases.push_back(huge);
  std::vector<float> inf = testing::random_vector(3000, 5, 1.0);
  inf[2500] = std::numeric_limits<float>::infinity();
  cases.push_back(inf);
  std::vector<float> nan = testing::random_vector(3000, 6, 1.0);
  nan[2900] = std::numeric_limits<float>::quiet_NaN();
  cases.push_back(nan);
  cases.push_back(push_of(200000, 8, 1e-3, true));
  for (const auto& x : cases) {
    const double fast = sum_of_squares(x), plain = plain_sum_of_squares(x);
    BOOST_CHECK_MESSAGE(same_bits(fast, plain) || (std::isnan(fast) && std::isnan(plain)),
                        x.size() << " values: " << fast << " against " << plain);
  }
}

BOOST_AUTO_TEST_CASE(accumulator_equals_its_plain_loops_bit_for_bit) {
  Rng rng(11);
  // Pieces longer than a thread's range (2^16) so that passes split, short
  // ones, one of a single value; fragments of one tensor and of several.
  const std::vector<std::vector<size_t>> shapes = {{300000}, {37, 5, 128, 1, 64}, {140000, 3, 70001, 262144}};
  for (int kind = 0; kind < 3; ++kind)  // AVG, RDA, RDA with an averaged piece
    for (const auto& sizes : shapes)
      for (size_t m : {1, 4, 7}) {
        const MergeRule rule = kind == 0 ? MergeRule::kAvg : MergeRule::kRda;
        const Fragment f = fragment_of(sizes, rule, kind == 2);
        MergeAccumulator fast(f);
        PlainAccumulator plain(f);
        for (size_t i = 0; i < m; ++i) {
          std::vector<float> g =
              push_of(f.size, 100 * m + i, std::pow(10.0, 2.0 * rng.uniform() - 4.0), i % 2 == 0);
          // Zeros at the start, negative in the first push (which writes
          // the sums rather than adding to them): a whole tensor without
          // direction in the fragment of several.
          if (i < 2)
            std::fill(g.begin(), g.begin() + static_cast<ptrdiff_t>(std::min<size_t>(f.size, 40)), i == 0 ? -0.0f : 0.0f);
          const double w = i % 5 == 3 ? 0.0 : token_weight(1 + static_cast<uint64_t>(4096 * rng.uniform()),
                                                           1 + static_cast<uint64_t>(12 * rng.uniform()));
          fast.add(g, w);
          plain.add(g, w);
        }
        std::vector<float> a(f.size), b(f.size);
        const bool merged = plain.merge(b);
        BOOST_CHECK_EQUAL(fast.merge(a), merged);
        BOOST_CHECK_MESSAGE(!merged || same_bits(a, b), merge_rule_name(rule) << (kind == 2 ? " with an avg piece" : "")
                                                                              << ", " << sizes.size()
                                                                              << " tensors, M = " << m);
      }
}

BOOST_AUTO_TEST_CASE(the_fallback_to_the_mean_is_bit_for_bit_too) {
  // Two opposite pushes: the mean direction vanishes and RDA takes the mean.
  const Fragment f = fragment_of({200000}, MergeRule::kRda);
  const std::vector<float> g = push_of(f.size, 9, 1e-3, true);
  std::vector<float> h(g.size());
  for (size_t i = 0; i < g.size(); ++i) h[i] = -g[i];
  MergeAccumulator fast(f);
  PlainAccumulator plain(f);
  const std::vector<float>* order[] = {&g, &h, &g, &h};
  for (const auto* x : order) {
    fast.add(*x, 2.0);
    plain.add(*x, 2.0);
  }
  std::vector<float> a(f.size), b(f.size);
  BOOST_REQUIRE(fast.merge(a) && plain.merge(b));
  BOOST_CHECK(same_bits(a, b));
  // A round after clear() starts from zero as the first did.
  fast.clear();
  plain = PlainAccumulator(f);
  fast.add(g, 1.5);
  plain.add(g, 1.5);
  BOOST_REQUIRE(fast.merge(a) && plain.merge(b));
  BOOST_CHECK(same_bits(a, b));
}

BOOST_AUTO_TEST_CASE(the_outer_step_in_place_equals_the_step_on_copies) {
  // The syncer's outer step as first written: on copies, kept when finite.
  const NesterovConfig c{0.7f, 0.6f};
  auto plain = [&](std::vector<float>& theta, std::vector<float>& velocity, const std::vector<float>& g) {
    std::vector<float> t = theta, v = velocity;
    for (size_t i = 0; i < t.size(); ++i) {
      v[i] = c.momentum * v[i] + g[i];
      t[i] -= c.lr * (g[i] + c.momentum * v[i]);
    }
    for (size_t i = 0; i < t.size(); ++i)
      if (!std::isfinite(t[i]) || !std::isfinite(v[i])) return false;
    theta = t;
    velocity = v;
    return true;
  };
  for (size_t n : {size_t{1}, size_t{1000}, size_t{300001}}) {
    std::vector<float> theta = testing::random_vector(n, 31, 0.02), velocity = testing::random_vector(n, 32, 1e-3);
    const std::vector<float> g = push_of(n, 33, 1e-3, true);
    std::vector<float> t2 = theta, v2 = velocity;
    for (int round = 0; round < 3; ++round) {
      BOOST_REQUIRE(plain(theta, velocity, g));
      BOOST_REQUIRE(nesterov_step_if_finite(c, t2, v2, g));
      BOOST_CHECK(same_bits(theta, t2) && same_bits(velocity, v2));
    }
    std::vector<float> t3 = t2, v3 = v2;
    nesterov_step(c, t3, v3, g);  // the plain step gives the same bits too
    BOOST_REQUIRE(plain(t2, v2, g));
    BOOST_CHECK(same_bits(t2, t3) && same_bits(v2, v3));
    // An update that overflows changes nothing.
    std::vector<float> huge = g;
    huge[n / 2] = 3e38f;
    velocity[n / 2] = 3e38f;
    const std::vector<float> t0 = theta, v0 = velocity;
    BOOST_CHECK(!nesterov_step_if_finite(c, theta, velocity, huge));
    BOOST_CHECK(same_bits(theta, t0) && same_bits(velocity, v0));
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
