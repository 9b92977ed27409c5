// The report of shards that ran in processes of their own, from their
// figures: the same folds as a process holding every shard, on one clock.
#include <boost/test/unit_test.hpp>

#include "atoll/assembled_report.h"
#include "test_support.h"

namespace atl {

BOOST_AUTO_TEST_SUITE(assembled_report_test)

LearnerRecord learner(uint64_t tokens, uint64_t merged) {
  LearnerRecord l;
  l.registrations = 1;
  l.incarnation = 1;
  l.tokens = tokens;
  l.steps = tokens / 8;
  l.merged = merged;
  l.member = true;
  return l;
}

BOOST_AUTO_TEST_CASE(two_shards_figures_fold_into_one_run_on_the_earliest_shards_clock) {
  Topology t = testing::tiny_mlp_topology();
  t.outer.fragments = 2;
  t.syncer.shards = 2;
  const int64_t start = 1'800'000'000'000;
  // Shard 0 from the run's start; shard 1 started 5 s later (its seconds are its own).
  ShardFigures a{0, {}, {7, 0}, 40, 1};
  a.figures.started_unix_ms = start;
  a.figures.seconds = 100.0;
  a.figures.tokens = 2000;
  a.figures.allocated_seconds = 200.0;
  a.figures.cpu_seconds = 1.0;
  a.figures.stats.rounds = 7;
  a.figures.stats.merged_pushes = 12;
  a.figures.stats.good_seconds = 50.0;
  a.figures.stats.bytes_received = 1000;
  a.figures.stats.first_welcome = 2.0;
  a.figures.stats.final_seconds = 99.0;
  a.figures.stats.round_ends = {{10.0, 0}, {90.0, 0}};
  a.figures.learners = {learner(1000, 7), learner(1000, 5)};
  ShardFigures b{1, {}, {0, 4}, 31, 1};
  b.figures.started_unix_ms = start + 5000;
  b.figures.seconds = 95.5;  // 100.5 s of the run
  b.figures.tokens = 1990;   // it heard the last Progress a little earlier
  b.figures.allocated_seconds = 190.0;
  b.figures.cpu_seconds = 2.0;
  b.figures.stats.rounds = 4;
  b.figures.stats.merged_pushes = 6;
  b.figures.stats.good_seconds = 40.0;
  b.figures.stats.bytes_received = 500;
  b.figures.stats.first_welcome = 1.0;  // 6 s of the run
  b.figures.stats.final_seconds = 95.0;  // 100 s of the run
  b.figures.stats.round_ends = {{20.0, 1}};
  b.figures.learners = {learner(995, 4), learner(995, 2)};

  const Report r = assembled_report(t, {a, b});
  BOOST_CHECK_CLOSE(r.wall_seconds, 100.5, 1e-9);
  BOOST_CHECK_EQUAL(r.tokens, 2000u);  // every shard hears every Progress: the most any heard
  BOOST_CHECK_EQUAL(r.rounds, 11u);
  BOOST_CHECK_EQUAL(r.counts["merged_pushes"], 18u);
  BOOST_CHECK_EQUAL(r.bytes.learner_to_syncer, 1500u);
  BOOST_CHECK_CLOSE(r.goodput, (50.0 + 40.0) / 200.0, 1e-9);
  BOOST_CHECK_CLOSE(r.syncer_cpu_seconds, 3.0, 1e-9);
  BOOST_REQUIRE_EQUAL(r.per_learner.size(), 2u);
  BOOST_CHECK_EQUAL(r.per_learner[0].merged, 11u);
  BOOST_CHECK_EQUAL(r.per_learner[1].merged, 7u);
  BOOST_CHECK_EQUAL(r.per_learner[0].tokens, 1000u);
  BOOST_CHECK((r.final_versions == std::vector<uint64_t>{7, 4}));
  BOOST_REQUIRE_EQUAL(r.shards.size(), 2u);
  BOOST_CHECK_EQUAL(r.shards[1].shard, 1u);
  BOOST_CHECK_EQUAL(r.shards[1].counts["merged_pushes"], 6u);
  BOOST_CHECK_EQUAL(r.shards[1].parameters, 31u);
  BOOST_CHECK_EQUAL(r.shards[1].versions_max, 4u);
  // One clock: training spans shard 0's first welcome (2 s; shard 1's is at the run's 6 s) to shard 1's
  // end (the run's 100 s). Fragment 0's gaps of 8, 80 and 10 s count 8 + 30 + 10 (three times the median
  // at most); fragment 1 rounds on throughout. Unshifted, the span would be 1 to 99 s.
  BOOST_CHECK_CLOSE(r.uptime, (48.0 / 98.0 + 1.0) / 2.0, 1e-6);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
