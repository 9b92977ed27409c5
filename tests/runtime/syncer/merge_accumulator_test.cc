// The streaming merge (MergeAccumulator, atoll/merge.h) against merge_fragment()
// over random contributions, both rules, several tensors per fragment, weights
// including 0; and what the syncer does with it when the run ends mid-round.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "atoll/merge.h"
#include "atoll/syncer_core.h"
#include "test_support.h"

namespace atl {
namespace {

// A fragment of tensors of these sizes, laid end to end, every piece under
// `rule`; `mixed`: RDA but for an averaged second piece (a head's, beside the body).
Fragment fragment_of(std::vector<size_t> sizes, MergeRule rule, bool mixed = false) {
  Fragment f;
  f.rule = mixed ? MergeRule::kRda : rule;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const bool avg = mixed ? k == 1 : rule == MergeRule::kAvg;
    f.pieces.push_back({static_cast<int>(k), 1000 + f.size, f.size, sizes[k], 0, avg ? MergeRule::kAvg : MergeRule::kRda});
    f.size += sizes[k];
  }
  return f;
}

// merge_fragment() and the accumulator agree to float rounding: relative
// 1e-5, with a floor far below the values' scale for elements that cancel.
void check_same(const std::vector<float>& streamed, const std::vector<float>& batch) {
  BOOST_REQUIRE_EQUAL(streamed.size(), batch.size());
  double scale = 0.0;
  for (float x : batch) scale = std::max(scale, double(std::fabs(x)));
  double worst = 0.0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const double diff = std::fabs(double(streamed[i]) - batch[i]);
    worst = std::max(worst, diff / std::max(double(std::fabs(batch[i])), 1e-6 * scale));
    BOOST_CHECK_LE(diff, 1e-5 * std::max(double(std::fabs(batch[i])), 1e-6 * scale));
  }
  BOOST_TEST_MESSAGE("largest relative difference " << worst);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(merge_accumulator_test)

BOOST_AUTO_TEST_CASE(streaming_equals_merge_fragment_over_random_contributions) {
  Rng rng(42);
  for (int kind = 0; kind < 3; ++kind)  // AVG, RDA, RDA with an averaged piece
    for (size_t m : {1, 2, 7, 64}) {
      const MergeRule rule = kind == 0 ? MergeRule::kAvg : MergeRule::kRda;
      const Fragment f = fragment_of({37, 5, 128, 1, 64}, rule, kind == 2);
      std::vector<std::vector<float>> gs;
      std::vector<double> ws;
      for (size_t i = 0; i < m; ++i) {
        // Lengths over four orders of magnitude; one in five weighs 0 (no step
        // since its base); one contribution has an all-zero tensor.
        gs.push_back(testing::random_vector(f.size, 100 * m + i, std::pow(10.0, 2.0 * rng.uniform() - 2.0)));
        if (i == 1) std::fill(gs.back().begin() + 37, gs.back().begin() + 42, 0.0f);
        ws.push_back(i % 5 == 3 ? 0.0 : token_weight(1 + static_cast<uint64_t>(4096 * rng.uniform()),
                                                     1 + static_cast<uint64_t>(12 * rng.uniform())));
      }
      if (std::all_of(ws.begin(), ws.end(), [](double w) { return w == 0.0; })) ws[0] = 1.0;
      std::vector<Contribution> cs;
      MergeAccumulator acc(f);
      for (size_t i = 0; i < m; ++i) {
        cs.push_back({gs[i], ws[i]});
        acc.add(gs[i], ws[i]);
      }
      std::vector<float> batch(f.size), streamed(f.size);
      BOOST_REQUIRE(merge_fragment(f, cs, batch));
      BOOST_REQUIRE(acc.merge(streamed));
      BOOST_TEST_MESSAGE((kind == 0 ? "AVG" : kind == 1 ? "RDA" : "RDA with an averaged piece") << ", M=" << m);
      check_same(streamed, batch);
      BOOST_CHECK_EQUAL(acc.count(), static_cast<size_t>(std::count_if(ws.begin(), ws.end(), [](double w) { return w > 0; })));
    }
}

BOOST_AUTO_TEST_CASE(rda_falls_back_to_the_mean_when_directions_cancel) {
  const Fragment f = fragment_of({2, 3}, MergeRule::kRda);
  const std::vector<float> g1 = {2, 0, 1, 1, 1}, g2 = {-1, 0, -3, -3, -3};
  MergeAccumulator acc(f);
  acc.add(g1, 1.0);
  acc.add(g2, 1.0);
  std::vector<float> streamed(5), batch(5);
  const std::vector<Contribution> cs = {{g1, 1.0}, {g2, 1.0}};
  BOOST_REQUIRE(merge_fragment(f, cs, batch));
  BOOST_REQUIRE(acc.merge(streamed));
  BOOST_CHECK_CLOSE(streamed[0], 0.5f, 1e-5);  // the weighted mean of the first tensor
  BOOST_CHECK_CLOSE(streamed[2], -1.0f, 1e-5);  // and of the second
  check_same(streamed, batch);
}

BOOST_AUTO_TEST_CASE(without_weight_nothing_merges_and_out_is_untouched) {
  const Fragment f = fragment_of({2}, MergeRule::kRda);
  const std::vector<float> g = {1, 1};
  MergeAccumulator acc(f);
  acc.add(g, 0.0);
  std::vector<float> out = {7, 7};
  BOOST_CHECK(!acc.merge(out));
  BOOST_CHECK_EQUAL(acc.count(), 0u);
  BOOST_CHECK_EQUAL(out[0], 7.0f);
}

BOOST_AUTO_TEST_CASE(clear_starts_the_next_round_and_memory_does_not_grow_with_contributions) {
  for (MergeRule rule : {MergeRule::kAvg, MergeRule::kRda}) {
    const Fragment f = fragment_of({100, 28}, rule);
    MergeAccumulator acc(f);
    for (uint64_t i = 0; i < 3; ++i) acc.add(testing::random_vector(f.size, 900 + i), 2.0);
    const size_t bytes = acc.bytes();
    BOOST_CHECK_EQUAL(bytes, (rule == MergeRule::kAvg ? 8u : 16u) * f.size + (rule == MergeRule::kAvg ? 0u : 8u * 2));
    acc.clear();
    std::vector<std::vector<float>> gs;
    std::vector<Contribution> cs;
    for (uint64_t i = 0; i < 200; ++i) gs.push_back(testing::random_vector(f.size, i));
    for (uint64_t i = 0; i < 200; ++i) {
      cs.push_back({gs[i], 1.0 + double(i % 7)});
      acc.add(gs[i], 1.0 + double(i % 7));
    }
    BOOST_CHECK_EQUAL(acc.bytes(), bytes);  // 200 learners cost what 3 did
    std::vector<float> streamed(f.size), batch(f.size);
    BOOST_REQUIRE(merge_fragment(f, cs, batch));
    BOOST_REQUIRE(acc.merge(streamed));
    check_same(streamed, batch);  // nothing of the first round is left
  }
}

// ---- the syncer: answers are folded in as they arrive, never replaced

namespace {

using testing::at;
using testing::kStart;

using Core = testing::SyncerCoreDriver;

// Learners 0 and 1 registered, quorum 2, no grace.
Core two_learners() {
  Topology t = testing::tiny_mlp_topology(Mode::kDecoupled);
  t.outer.quorum = 2;
  t.outer.grace_gamma = 0.0;
  Core c(t);
  c.must_join(0);
  c.must_join(1);
  return c;
}

const Pull* pull_to(const SyncerEffects& fx, uint32_t learner) {
  for (const auto& s : fx.sends)
    if (s.learner == learner && std::holds_alternative<Pull>(s.message)) return &std::get<Pull>(s.message);
  return nullptr;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_duplicated_answer_is_late_not_merged_twice) {
  Core c = two_learners();
  c.progress(0, 4, 1.0);
  const auto fx = c.progress(1, 4, 1.1);  // both due: the round opens
  BOOST_REQUIRE(pull_to(fx, 0));
  const uint64_t round = pull_to(fx, 0)->round;
  c.push_from_base(0, round, 0, 4, 1.0f, 1.2);
  c.push_from_base(0, round, 0, 4, 1.0f, 1.3);  // the 'duplicate' fault
  BOOST_CHECK_EQUAL(c.core->stats().late, 1u);
  BOOST_CHECK_EQUAL(c.core->version(0), 0u);  // K = 2: the duplicate did not make the quorum
  c.push_from_base(1, round, 0, 4, 3.0f, 1.4);
  BOOST_CHECK_EQUAL(c.core->version(0), 1u);
  BOOST_CHECK_EQUAL(c.core->stats().merged_pushes, 2u);
}

BOOST_AUTO_TEST_CASE(the_run_ending_mid_round_merges_what_is_in_then_pulls_the_last_answers) {
  Core c = two_learners();
  c.progress(0, 4, 1.0);
  auto fx = c.progress(1, 4, 1.1);
  const uint64_t round = pull_to(fx, 0)->round;
  c.push_from_base(0, round, 0, 4, 1.0f, 1.2);  // learner 0 is folded in; learner 1 has not answered yet
  fx = {};
  c.core->begin_flush(at(1.3), fx);
  // Learner 0's answer is merged and broadcast at once, without the quorum ...
  BOOST_CHECK_EQUAL(c.core->version(0), 1u);
  BOOST_REQUIRE_EQUAL(fx.to_all.size(), 1u);
  const Broadcast& b = std::get<Broadcast>(fx.to_all[0]);
  BOOST_CHECK((b.merged == std::vector<uint32_t>{0}));
  // ... and the last pulls wait until that broadcast is out (sends go before to_all).
  BOOST_CHECK(!pull_to(fx, 0) && !pull_to(fx, 1));
  const SyncerEffects::Timer* open = nullptr;
  for (const auto& t : fx.timers)
    if (t.kind == SyncerEffects::TimerKind::kFlush && t.seconds == 0.0) open = &t;
  BOOST_REQUIRE(open);
  const SyncerEffects::Timer opener = *open;
  fx = {};
  c.core->on_timer(opener, at(1.3), fx);
  BOOST_REQUIRE(pull_to(fx, 0) && pull_to(fx, 1));
  BOOST_CHECK(pull_to(fx, 0)->last);
  const uint64_t last = pull_to(fx, 0)->round;
  c.push_from_base(1, round, 0, 5, 3.0f, 1.4);  // learner 1's answer to the merged round: late
  BOOST_CHECK_EQUAL(c.core->stats().late, 1u);
  // The last answers: learner 0's progress since its merged push, learner 1's since its base.
  c.push_from_base(0, last, 1, 1, 1.0f, 1.5);
  BOOST_CHECK(!c.core->flushed());
  c.push_from_base(1, last, 1, 6, 3.0f, 1.6);
  BOOST_CHECK(c.core->flushed());
  BOOST_CHECK_EQUAL(c.core->version(0), 2u);
  BOOST_CHECK_EQUAL(c.core->stats().merged_pushes, 3u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
