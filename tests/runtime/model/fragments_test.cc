// Fragment plans: a partition of the tensors, balanced, deterministic, tagged.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <numeric>
#include <set>

#include "atoll/fragments.h"
#include "atoll/mlp.h"
#include "atoll/rng.h"
#include "atoll/topology.h"
#include "test_support.h"

namespace atl {
namespace {

ParamLayout layout_of(const std::vector<int>& sizes) {
  ParamLayout l;
  for (size_t i = 0; i < sizes.size(); ++i)
    l.add("t" + std::to_string(i), sizes[i], 1, TensorRole::kBody, true);
  return l;
}

size_t max_load(const std::vector<Fragment>& fs) {
  size_t m = 0;
  for (const auto& f : fs) m = std::max(m, f.size);
  return m;
}

// Every tensor in exactly one fragment, pieces consistent with the layout.
void check_partition(const ParamLayout& layout, const std::vector<Fragment>& fs) {
  std::vector<int> seen(static_cast<size_t>(layout.count()), 0);
  for (const auto& f : fs) {
    size_t offset = 0;
    for (const auto& p : f.pieces) {
      ++seen[static_cast<size_t>(p.tensor)];
      BOOST_CHECK_EQUAL(p.fragment_offset, offset);
      BOOST_CHECK_EQUAL(p.param_offset, layout.tensor(p.tensor).offset);
      BOOST_CHECK_EQUAL(p.size, layout.tensor(p.tensor).size());
      offset += p.size;
    }
    BOOST_CHECK_EQUAL(f.size, offset);
  }
  for (int n : seen) BOOST_CHECK_EQUAL(n, 1);
}

// The best possible largest load, by trying every assignment (tiny inputs only).
size_t optimum(const std::vector<int>& sizes, int p) {
  size_t best = SIZE_MAX;
  std::vector<size_t> load(static_cast<size_t>(p));
  const auto n = sizes.size();
  size_t combos = 1;
  for (size_t i = 0; i < n; ++i) combos *= static_cast<size_t>(p);
  for (size_t c = 0; c < combos; ++c) {
    std::fill(load.begin(), load.end(), 0);
    size_t x = c;
    for (size_t i = 0; i < n; ++i, x /= static_cast<size_t>(p)) load[x % static_cast<size_t>(p)] += static_cast<size_t>(sizes[i]);
    best = std::min(best, *std::max_element(load.begin(), load.end()));
  }
  return best;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fragments_test)

BOOST_AUTO_TEST_CASE(hand_example_is_a_balanced_partition) {
  const auto layout = layout_of({100, 90, 80, 70, 60, 50, 40, 30, 20, 10, 5, 5});  // 560
  auto fs = plan_fragments(layout, 3);
  BOOST_REQUIRE(fs.ok());
  BOOST_REQUIRE_EQUAL(fs->size(), 3u);
  check_partition(layout, *fs);
  const double ideal = 560.0 / 3;
  BOOST_TEST_MESSAGE("largest load " << max_load(*fs) << " ideal " << ideal);
  BOOST_CHECK_LE(double(max_load(*fs)), 4.0 / 3.0 * ideal);
}

BOOST_AUTO_TEST_CASE(largest_load_within_four_thirds_of_ideal_when_tensors_are_small) {
  // With every tensor at most a third of the ideal load, greedy placement
  // cannot exceed 4/3 of the ideal: the last tensor placed on the heaviest
  // fragment found it at or below the ideal.
  Rng rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    const int p = 1 + static_cast<int>(rng.below(24));
    const int n = 3 * p + static_cast<int>(rng.below(64));
    std::vector<int> sizes(static_cast<size_t>(n));
    for (auto& s : sizes) s = 1 + static_cast<int>(rng.below(1000));
    const double ideal = std::accumulate(sizes.begin(), sizes.end(), 0.0) / p;
    const int cap = std::max(1, static_cast<int>(ideal / 3));
    for (auto& s : sizes) s = std::min(s, cap);
    const double ideal_capped = std::accumulate(sizes.begin(), sizes.end(), 0.0) / p;
    const auto layout = layout_of(sizes);
    auto fs = plan_fragments(layout, p);
    BOOST_REQUIRE(fs.ok());
    check_partition(layout, *fs);
    BOOST_CHECK_LE(double(max_load(*fs)), 4.0 / 3.0 * std::max(ideal_capped, double(cap)) + 1e-9);
  }
}

BOOST_AUTO_TEST_CASE(greedy_is_within_four_thirds_of_the_optimum) {
  Rng rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int p = 2 + static_cast<int>(rng.below(2));
    const int n = p + static_cast<int>(rng.below(6));
    std::vector<int> sizes(static_cast<size_t>(n));
    for (auto& s : sizes) s = 1 + static_cast<int>(rng.below(50));
    auto fs = plan_fragments(layout_of(sizes), p);
    BOOST_REQUIRE(fs.ok());
    BOOST_CHECK_LE(3 * max_load(*fs), 4 * optimum(sizes, p));
  }
}

BOOST_AUTO_TEST_CASE(plan_is_deterministic_and_ties_break_by_name) {
  const auto layout = layout_of({8, 8, 8, 8});
  auto a = plan_fragments(layout, 2), b = plan_fragments(layout, 2);
  BOOST_REQUIRE(a.ok() && b.ok());
  for (size_t p = 0; p < 2; ++p) {
    BOOST_REQUIRE_EQUAL((*a)[p].pieces.size(), (*b)[p].pieces.size());
    for (size_t i = 0; i < (*a)[p].pieces.size(); ++i)
      BOOST_CHECK_EQUAL((*a)[p].pieces[i].tensor, (*b)[p].pieces[i].tensor);
  }
  // t0 -> 0, t1 -> 1, t2 -> 0, t3 -> 1
  BOOST_CHECK_EQUAL((*a)[0].pieces[0].tensor, 0);
  BOOST_CHECK_EQUAL((*a)[0].pieces[1].tensor, 2);
  BOOST_CHECK_EQUAL((*a)[1].pieces[0].tensor, 1);
}

BOOST_AUTO_TEST_CASE(fragments_holding_the_head_are_avg_the_rest_rda) {
  Mlp mlp(MlpConfig{784, {256}, 10});
  auto fs = plan_fragments(mlp.layout(), 2);
  BOOST_REQUIRE(fs.ok());
  check_partition(mlp.layout(), *fs);
  for (const auto& f : *fs) {
    bool has_head = false;
    for (const auto& p : f.pieces) has_head |= mlp.layout().tensor(p.tensor).role == TensorRole::kHead;
    BOOST_CHECK(f.rule == (has_head ? MergeRule::kAvg : MergeRule::kRda));
  }
  // layer0.weight (200704 floats) alone; the rest together with the head.
  BOOST_CHECK((*fs)[0].rule == MergeRule::kRda);
  BOOST_CHECK((*fs)[1].rule == MergeRule::kAvg);
}

BOOST_AUTO_TEST_CASE(bad_counts_are_refused_by_name) {
  const auto layout = layout_of({4, 4});
  auto zero = plan_fragments(layout, 0);
  BOOST_CHECK(!zero.ok());
  BOOST_CHECK(zero.status().message().find("at least 1") != std::string_view::npos);
  auto many = plan_fragments(layout, 3);
  BOOST_CHECK(!many.ok());
  BOOST_CHECK(many.status().message().find("exceeds the model's tensors (2)") != std::string_view::npos);
}

BOOST_AUTO_TEST_CASE(gather_then_scatter_restores_the_buffer) {
  const auto layout = layout_of({3, 5, 2, 7});
  auto fs = plan_fragments(layout, 2);
  BOOST_REQUIRE(fs.ok());
  const auto params = testing::random_vector(layout.size(), 3);
  std::vector<float> rebuilt(layout.size(), 0.0f);
  for (const auto& f : *fs) {
    std::vector<float> values(f.size);
    gather(f, params, values);
    scatter(f, values, rebuilt);
  }
  BOOST_CHECK(rebuilt == params);
}

BOOST_AUTO_TEST_CASE(fingerprint_changes_with_any_tensor_property) {
  ParamLayout a, b, c, d;
  a.add("w", 4, 3, TensorRole::kBody, true);
  b.add("w", 3, 4, TensorRole::kBody, true);  // shape
  c.add("v", 4, 3, TensorRole::kBody, true);  // name
  d.add("w", 4, 3, TensorRole::kHead, true);  // role
  BOOST_CHECK_NE(a.fingerprint(), b.fingerprint());
  BOOST_CHECK_NE(a.fingerprint(), c.fingerprint());
  BOOST_CHECK_NE(a.fingerprint(), d.fingerprint());
  ParamLayout a2;
  a2.add("w", 4, 3, TensorRole::kBody, true);
  BOOST_CHECK_EQUAL(a.fingerprint(), a2.fingerprint());
}

BOOST_AUTO_TEST_CASE(the_sync_interval_ramps_from_its_start_to_h) {
  OuterSpec o;
  o.sync_every = 24;
  BOOST_CHECK_EQUAL(sync_interval(o, 0), 24);  // no ramp
  o.sync_every_start = 6;
  o.sync_ramp_rounds = 10;
  BOOST_CHECK_EQUAL(sync_interval(o, 0), 6);
  BOOST_CHECK_EQUAL(sync_interval(o, 5), 15);
  BOOST_CHECK_EQUAL(sync_interval(o, 10), 24);
  BOOST_CHECK_EQUAL(sync_interval(o, 1000), 24);
  // Staggering uses the interval of version 0: fragment 2 of 12 first falls due at 3 * 6 / 12.
  BOOST_CHECK_EQUAL(steps_until_due(2, 12, sync_interval(o, 0), 0), 1u);
}

BOOST_AUTO_TEST_CASE(dylu_scales_h_by_speed_over_the_fastest_learner) {
  Topology t;  // speeds 1, 1, 0.7, 0.5; H = 12
  BOOST_CHECK_EQUAL(sync_interval(t, 0.5, 3), 12);  // off: everyone's H
  t.outer.sync_by_speed = true;
  BOOST_CHECK_EQUAL(sync_interval(t, 1.0, 3), 12);
  BOOST_CHECK_EQUAL(sync_interval(t, 0.7, 3), 8);  // 8.4 rounds to 8
  BOOST_CHECK_EQUAL(sync_interval(t, 0.5, 3), 6);
  BOOST_CHECK_EQUAL(sync_interval(t, 0.01, 3), 1);  // never below one step
  BOOST_CHECK_EQUAL(sync_interval(t, 0.0, 3), 12);  // speed unknown (not registered): H
  BOOST_CHECK_EQUAL(sync_interval(t, 2.0, 3), 12);  // a joiner faster than every [[learners]]: H
  t.learners = {{2.0, 8}, {1.0, 8}};
  BOOST_CHECK_EQUAL(sync_interval(t, 1.0, 3), 6);  // relative to the fastest, not to 1
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
