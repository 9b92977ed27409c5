// Chaos runs end to end, quickly: every learner killed at once comes back;
// step-triggered faults fire; the tape records injections and recoveries;
// broken invariants are reported, not hidden.
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <iterator>

#include "atoll/chaos.h"
#include "atoll/run_event.h"
#include "test_support.h"

namespace atl {
namespace {

FaultPlan small_plan(double seconds) {
  FaultPlan p;
  p.name = "test";
  p.path = "test.toml";
  p.seconds = seconds;
  p.topology.model.kind = ModelKind::kMlp;
  p.topology.data.kind = DataKind::kSynthetic;
  p.topology.data.examples = 50000;
  p.topology.model.hidden = {32};
  p.topology.learners.assign(3, LearnerSpec{1.0, 32});
  p.topology.outer.fragments = 2;
  p.topology.outer.sync_every = 20;
  p.topology.checkpoint.dir = "";
  p.modes = {Mode::kDecoupled};
  return p;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(chaos_run_test)

BOOST_AUTO_TEST_CASE(every_learner_killed_at_once_is_reintegrated) {
  // The bound's deadline (2.8 s) must fall before the last half second, or the verdict cannot check it.
  FaultPlan plan = small_plan(4.0);
  Fault kill;
  kill.kind = FaultKind::kKill;
  kill.at = 1.0;
  kill.learner = -1;
  kill.recover_after = 0.3;
  plan.faults = {kill};
  plan.invariants.reintegrate_within_seconds = 1.5;
  auto r = run_with_faults(plan.topology, plan, {});
  BOOST_REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  BOOST_TEST_MESSAGE(chaos_table({*r}));
  BOOST_CHECK_MESSAGE(r->ok(), chaos_table({*r}));
  BOOST_CHECK_EQUAL(r->faults_injected, 3u);
  BOOST_CHECK_EQUAL(r->recoveries, 3u);
  BOOST_CHECK_EQUAL(r->report.reintegration_seconds.size(), 3u);
  for (const auto& l : r->report.per_learner) {
    BOOST_CHECK_EQUAL(l.incarnation, 2u);
    BOOST_CHECK_GT(l.last_incarnation_tokens, 0u);
  }
  BOOST_CHECK_EQUAL(r->report.version_decreases, 0u);
}

BOOST_AUTO_TEST_CASE(a_step_triggered_crash_fires_and_is_recorded) {
  // A low step and a long run: under CI's parallel tests a learner may be
  // slow, and this test is about the trigger, not about throughput.
  FaultPlan plan = small_plan(4.0);
  Fault crash;
  crash.kind = FaultKind::kCrash;
  crash.at_step = 50;
  crash.learner = 1;
  plan.faults = {crash};
  testing::TempDir tapes;
  ChaosOptions options;
  options.tape_dir = tapes.path();
  auto r = run_with_faults(plan.topology, plan, options);
  BOOST_REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  BOOST_REQUIRE_MESSAGE(r->report.per_learner[1].steps >= 60,
                        "premise: learner 1 reached only " << r->report.per_learner[1].steps << " steps");
  BOOST_CHECK_EQUAL(r->faults_injected, 1u);
  BOOST_CHECK_EQUAL(r->report.per_learner[1].restarts, 1u);
  // The tape, read back as events: the crash, learner 1's restart and its registration.
  std::ifstream in(r->tape_path);
  bool crashed = false, restarted = false, registered = false;
  for (std::string line; std::getline(in, line);) {
    auto e = decode_event_line(line);
    BOOST_REQUIRE_MESSAGE(e.ok() && e->has_value(), line);
    const RunEvent& ev = (**e).event;
    if (const auto* x = std::get_if<event::Injected>(&ev))
      crashed |= x->kind == FaultKind::kCrash && x->hit && x->learner == 1;
    if (const auto* x = std::get_if<event::Restarted>(&ev)) restarted |= x->child == Child::of_learner(1);
    if (const auto* x = std::get_if<event::Registered>(&ev)) registered |= x->learner == 1;
  }
  BOOST_CHECK(crashed && restarted && registered);
}

// A learner restarted while its messages are reordered and corrupted gets
// pulls and broadcasts meant for its earlier incarnation before its welcome
// (they once crashed the process). It must come back and train, and a
// fault planned after the end fails the verdict (it tested nothing), alone.
BOOST_AUTO_TEST_CASE(a_learner_restarted_under_message_faults_comes_back_and_an_unfired_fault_fails_the_verdict) {
  // The last kill leaves 3.6 s to come back and train: a loaded CI machine took more than the 1 s it once had.
  FaultPlan plan = small_plan(5.0);
  Fault reorder;
  reorder.kind = FaultKind::kReorder;
  reorder.at = 0.1;
  reorder.learner = 1;
  reorder.duration = 4.8;
  reorder.seconds = 0.05;
  reorder.where = "test.toml:1";
  Fault corrupt = reorder;
  corrupt.kind = FaultKind::kCorrupt;
  corrupt.probability = 0.2;  // a Register goes out every 0.5 s: at 0.3, too many were lost to come back in 2 s
  corrupt.where = "test.toml:2";
  Fault kill;
  kill.kind = FaultKind::kKill;
  kill.learner = 1;
  kill.recover_after = 0.1;
  std::vector<Fault> faults = {reorder, corrupt};
  for (double at : {0.6, 1.0, 1.4}) {
    kill.at = at;
    kill.where = "test.toml:" + std::to_string(faults.size() + 1);
    faults.push_back(kill);
  }
  kill.at = 7.0;  // after the end (a plan file with it is refused; --seconds can cut a run short)
  kill.where = "test.toml:9";
  faults.push_back(kill);
  plan.faults = faults;
  plan.invariants.reintegrate_within_seconds = 2.0;
  auto r = run_with_faults(plan.topology, plan, {});
  BOOST_REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  BOOST_CHECK(!r->ok());
  BOOST_REQUIRE_MESSAGE(r->violations.size() == 1u, chaos_table({*r}));  // every other invariant holds
  BOOST_CHECK_MESSAGE(r->violations[0].find("all_faults_injected: kill of test.toml:9 was never injected") !=
                          std::string::npos,
                      r->violations[0]);
  BOOST_CHECK_GE(r->report.per_learner[1].restarts, 2u);  // a kill that finds it still down does not count
  BOOST_CHECK_GT(r->report.per_learner[1].last_incarnation_tokens, 0u);
}

BOOST_AUTO_TEST_CASE(an_invariant_that_cannot_hold_is_reported_broken) {
  FaultPlan plan = small_plan(1.5);
  plan.invariants.min_goodput = 1.5;  // no run can reach it
  auto r = run_with_faults(plan.topology, plan, {});
  BOOST_REQUIRE(r.ok());
  BOOST_REQUIRE_EQUAL(r->violations.size(), 1u);
  BOOST_CHECK(r->violations[0].find("min_goodput") != std::string::npos);
  BOOST_CHECK(chaos_table({*r}).find("FAILED") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
