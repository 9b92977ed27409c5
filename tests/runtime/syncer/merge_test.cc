// Token weights, the weighted mean and RDA against hand-computed values, and
// the property RDA exists for: it keeps the update's length as M grows.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "atoll/merge.h"
#include "test_support.h"

namespace atl {
namespace {

double norm(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return std::sqrt(s);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(merge_test)

BOOST_AUTO_TEST_CASE(token_weight_is_tokens_squared_over_steps) {
  BOOST_CHECK_EQUAL(token_weight(100, 4), 2500.0);  // 100 * (100 / 4)
  BOOST_CHECK_EQUAL(token_weight(100, 0), 0.0);     // no step since the base: no weight
  // 2^40 tokens in one step: the uint64 square would overflow, the double doesn't.
  const double big = token_weight(uint64_t{1} << 40, 1);
  BOOST_CHECK_CLOSE(big, std::ldexp(1.0, 80), 1e-9);
  // Half the steps with the same tokens per step counts half.
  BOOST_CHECK_CLOSE(token_weight(50, 2), token_weight(100, 4) / 2, 1e-12);
}

BOOST_AUTO_TEST_CASE(weighted_mean_matches_hand_values) {
  const std::vector<float> g1 = {1, 0}, g2 = {0, 2};
  const std::vector<Contribution> cs = {{g1, 1.0}, {g2, 3.0}};
  std::vector<float> out(2);
  weighted_mean(cs, out);
  BOOST_CHECK_CLOSE(out[0], 0.25f, 1e-5);  // 1*1/4
  BOOST_CHECK_CLOSE(out[1], 1.5f, 1e-5);   // 3*2/4
}

BOOST_AUTO_TEST_CASE(rda_matches_hand_values) {
  // |g1| = 3, |g2| = 4, equal weights: length 3.5 along unit([1,0] + [0,1]).
  const std::vector<float> g1 = {3, 0}, g2 = {0, 4};
  const std::vector<Contribution> cs = {{g1, 1.0}, {g2, 1.0}};
  std::vector<float> out(2);
  rda(cs, out);
  const float each = static_cast<float>(3.5 / std::sqrt(2.0));  // 2.4748737
  BOOST_CHECK_CLOSE(out[0], each, 1e-4);
  BOOST_CHECK_CLOSE(out[1], each, 1e-4);
  // Weights 3:1: length (3*3 + 4)/4 = 3.25 along unit(0.75*[1,0] + 0.25*[0,1]).
  const std::vector<Contribution> skewed = {{g1, 3.0}, {g2, 1.0}};
  rda(skewed, out);
  const double dn = std::sqrt(0.75 * 0.75 + 0.25 * 0.25);
  BOOST_CHECK_CLOSE(out[0], 3.25 * 0.75 / dn, 1e-4);
  BOOST_CHECK_CLOSE(out[1], 3.25 * 0.25 / dn, 1e-4);
}

BOOST_AUTO_TEST_CASE(rda_falls_back_to_the_mean_when_directions_cancel) {
  // unit(g1) + unit(g2) = 0: no direction. The weighted mean is [0.5, 0].
  const std::vector<float> g1 = {2, 0}, g2 = {-1, 0};
  const std::vector<Contribution> cs = {{g1, 1.0}, {g2, 1.0}};
  std::vector<float> out(2, 99.0f);
  rda(cs, out);
  BOOST_CHECK_CLOSE(out[0], 0.5f, 1e-5);
  BOOST_CHECK_SMALL(out[1], 1e-7f);
}

BOOST_AUTO_TEST_CASE(rda_keeps_the_norm_while_the_mean_of_orthogonal_updates_shrinks) {
  const size_t dim = 16;
  const double length = 2.0;
  for (size_t m : {1, 2, 4, 8, 16}) {
    std::vector<std::vector<float>> gs(m, std::vector<float>(dim, 0.0f));
    std::vector<Contribution> cs;
    for (size_t i = 0; i < m; ++i) {
      gs[i][i] = static_cast<float>(length);  // orthogonal, equal length
      cs.push_back({gs[i], 1.0});
    }
    std::vector<float> mean(dim), merged(dim);
    weighted_mean(cs, mean);
    rda(cs, merged);
    BOOST_TEST_MESSAGE("M=" << m << " mean=" << norm(mean) << " rda=" << norm(merged));
    BOOST_CHECK_CLOSE(norm(mean), length / std::sqrt(double(m)), 1e-4);
    BOOST_CHECK_CLOSE(norm(merged), length, 1e-4);
  }
}

BOOST_AUTO_TEST_CASE(merge_fragment_applies_rda_per_tensor_and_avg_to_the_whole) {
  Fragment f;
  f.size = 5;
  f.pieces = {{0, 0, 0, 2}, {1, 10, 2, 3}};  // two tensors: [0,2) and [2,5)
  const auto g1 = testing::random_vector(5, 1), g2 = testing::random_vector(5, 2);
  const std::vector<Contribution> cs = {{g1, 2.0}, {g2, 1.0}, {g1, 0.0}};

  f.rule = MergeRule::kRda;
  std::vector<float> out(5);
  BOOST_REQUIRE(merge_fragment(f, cs, out));
  for (const auto& piece : f.pieces) {
    std::vector<float> expect(piece.size);
    const std::vector<Contribution> sub = {
        {std::span<const float>(g1).subspan(piece.fragment_offset, piece.size), 2.0},
        {std::span<const float>(g2).subspan(piece.fragment_offset, piece.size), 1.0}};
    rda(sub, expect);
    for (size_t i = 0; i < piece.size; ++i)
      BOOST_CHECK_CLOSE(out[piece.fragment_offset + i], expect[i], 1e-4);
  }

  f.rule = MergeRule::kAvg;
  BOOST_REQUIRE(merge_fragment(f, cs, out));
  for (size_t i = 0; i < 5; ++i) BOOST_CHECK_CLOSE(out[i], (2 * g1[i] + g2[i]) / 3, 1e-3);

  // A piece of a head beside the body: that piece averaged, the other by RDA.
  f.rule = MergeRule::kRda;
  f.pieces[1].rule = MergeRule::kAvg;
  BOOST_REQUIRE(merge_fragment(f, cs, out));
  std::vector<float> body(2);
  rda(std::vector<Contribution>{{std::span<const float>(g1).first(2), 2.0}, {std::span<const float>(g2).first(2), 1.0}},
      body);
  for (size_t i = 0; i < 2; ++i) BOOST_CHECK_CLOSE(out[i], body[i], 1e-4);
  for (size_t i = 2; i < 5; ++i) BOOST_CHECK_CLOSE(out[i], (2 * g1[i] + g2[i]) / 3, 1e-3);
}

BOOST_AUTO_TEST_CASE(merge_fragment_without_weight_leaves_out_untouched) {
  Fragment f;
  f.size = 2;
  f.pieces = {{0, 0, 0, 2}};
  const std::vector<float> g = {1, 1};
  const std::vector<Contribution> cs = {{g, 0.0}, {g, 0.0}};
  std::vector<float> out = {7, 7};
  BOOST_CHECK(!merge_fragment(f, cs, out));
  BOOST_CHECK_EQUAL(out[0], 7.0f);
}

BOOST_AUTO_TEST_CASE(identical_inputs_merge_to_themselves) {
  const auto g = testing::random_vector(32, 7);
  const std::vector<Contribution> cs = {{g, 1.0}, {g, 5.0}, {g, 0.5}};
  std::vector<float> mean(32), merged(32);
  weighted_mean(cs, mean);
  rda(cs, merged);
  for (size_t i = 0; i < g.size(); ++i) {
    BOOST_CHECK_CLOSE(mean[i], g[i], 1e-3);
    BOOST_CHECK_CLOSE(merged[i], g[i], 1e-3);
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
