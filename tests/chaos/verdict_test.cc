// The chaos verdict from hand-written event lists: no actor system, no run.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "atoll/chaos_verdict.h"

namespace atl {
namespace {

TimedEvent kill(double t, int64_t learner, double recover_after, std::string plan = "random") {
  event::Injected e;
  e.kind = FaultKind::kKill;
  e.hit = true;
  e.learner = learner;
  e.recover_after = recover_after;
  e.plan = std::move(plan);
  return {t, e};
}
TimedEvent back(double t, uint32_t learner) { return {t, event::Registered{learner, 2, 1.0}}; }

// A clean 100-second run of 4 learners.
Report healthy() {
  Report r;
  r.learners = 4;
  r.wall_seconds = 100;
  r.goodput = 0.8;
  r.eval.loss = 2.0;
  r.final_versions = {10, 10};
  r.max_adopted_versions = {10, 9};
  return r;
}

FaultPlan plan_with(Invariants inv) {
  FaultPlan p;
  p.invariants = inv;
  return p;
}

const std::vector<float> kTheta = {1.0f, 2.0f};

}  // namespace

BOOST_AUTO_TEST_SUITE(verdict_test)

BOOST_AUTO_TEST_CASE(a_learner_back_in_time_passes_and_its_down_time_counts) {
  Invariants inv;
  inv.reintegrate_within_seconds = 5;
  const std::vector<TimedEvent> events = {kill(10, 1, 2), {10.1, event::Restarted{Child::of_learner(1), 2}},
                                          back(14, 1)};
  const ChaosVerdict v = judge(plan_with(inv), healthy(), kTheta, events);
  BOOST_CHECK_MESSAGE(v.violations.empty(), (v.violations.empty() ? std::string() : v.violations[0]));
  BOOST_CHECK_EQUAL(v.faults_injected, 1u);
  BOOST_CHECK_EQUAL(v.recoveries, 1u);
  BOOST_CHECK_CLOSE(v.alive_fraction, 1.0 - 4.0 / 400.0, 1e-9);  // 4 s of 400 learner-seconds
}

BOOST_AUTO_TEST_CASE(a_learner_back_late_breaks_the_bound_unless_the_run_ended_first) {
  Invariants inv;
  inv.reintegrate_within_seconds = 5;
  // Allowed back at 12, due by 17, back at 20: late.
  ChaosVerdict v = judge(plan_with(inv), healthy(), kTheta, {kill(10, 1, 2), back(20, 1)});
  BOOST_REQUIRE_EQUAL(v.violations.size(), 1u);
  BOOST_CHECK(v.violations[0].starts_with("reintegrate_within_seconds: learner 1 killed at 10.00 s"));
  // Killed at 97 of a 100-second run: its deadline is past the end, so it is excused.
  v = judge(plan_with(inv), healthy(), kTheta, {kill(97, 2, 0)});
  BOOST_CHECK(v.violations.empty());
  BOOST_CHECK_CLOSE(v.alive_fraction, 1.0 - 3.0 / 400.0, 1e-9);
  // A registration of another learner, or one before the kill, does not count.
  v = judge(plan_with(inv), healthy(), kTheta, {back(5, 1), kill(10, 1, 0), back(12, 3)});
  BOOST_CHECK_EQUAL(v.violations.size(), 1u);
}

// Learners that join and leave: the alive share is of the learner time
// allocated to the run, and a preemption (a departure) is no down time.
BOOST_AUTO_TEST_CASE(membership_counts_allocated_time_and_a_preemption_is_no_failure) {
  Invariants inv;
  inv.reintegrate_within_seconds = 5;
  inv.min_goodput = 0.9;
  Report r = healthy();
  r.learners = 3;                       // two fixed, one open slot used
  r.allocated_learner_seconds = 250.0;  // 2 x 100 s, and the joiner's 50 s
  r.goodput = 0.95;
  TimedEvent preempt = kill(60, 2, 1.0);
  std::get<event::Injected>(preempt.event).kind = FaultKind::kPreempt;
  const std::vector<TimedEvent> events = {{50, event::Joined{2, 1, 1.0, 8}}, preempt,
                                          {60, event::Departed{2, 1, true, "preempted"}}, kill(70, 0, 1), back(75, 0)};
  const ChaosVerdict v = judge(plan_with(inv), r, kTheta, events);
  BOOST_CHECK_MESSAGE(v.violations.empty(), (v.violations.empty() ? std::string() : v.violations[0]));
  BOOST_CHECK_CLOSE(v.alive_fraction, 1.0 - 5.0 / 250.0, 1e-9);  // the kill's 5 s; the preemption none
  BOOST_CHECK_EQUAL(v.faults_injected, 2u);
  // The same goodput against M x wall would have read a different share: the allocated time is what counts.
  r.goodput = 0.85;
  BOOST_CHECK_EQUAL(judge(plan_with(inv), r, kTheta, events).violations.size(), 1u);
}

BOOST_AUTO_TEST_CASE(a_miss_is_not_a_fault_and_needs_no_recovery) {
  Invariants inv;
  inv.reintegrate_within_seconds = 1;
  TimedEvent miss = kill(10, 1, 0);
  std::get<event::Injected>(miss.event).hit = false;
  const ChaosVerdict v = judge(plan_with(inv), healthy(), kTheta, {miss});
  BOOST_CHECK(v.violations.empty());
  BOOST_CHECK_EQUAL(v.faults_injected, 0u);
  BOOST_CHECK_EQUAL(v.alive_fraction, 1.0);
}

BOOST_AUTO_TEST_CASE(goodput_is_bounded_by_the_alive_share) {
  Invariants inv;
  inv.min_goodput = 0.9;
  Report r = healthy();
  r.goodput = 0.85;
  // Learner 0 down for 40 of 400 learner-seconds: alive 0.9, bound 0.81.
  ChaosVerdict v = judge(plan_with(inv), r, kTheta, {kill(10, 0, 0), back(50, 0)});
  BOOST_CHECK(v.violations.empty());
  v = judge(plan_with(inv), r, kTheta, {});
  BOOST_REQUIRE_EQUAL(v.violations.size(), 1u);
  BOOST_CHECK(v.violations[0].starts_with("min_goodput: 0.850 < 0.900"));
}

BOOST_AUTO_TEST_CASE(versions_lost_decreased_or_not_finite_are_named) {
  Invariants inv;
  inv.finite = inv.versions_never_decrease = inv.no_adopted_version_lost = true;
  Report r = healthy();
  r.version_decreases = 2;
  r.max_adopted_versions = {11, 9};
  ChaosVerdict v = judge(plan_with(inv), r, kTheta, {});
  BOOST_REQUIRE_EQUAL(v.violations.size(), 2u);
  BOOST_CHECK(v.violations[0].starts_with("versions_never_decrease: a global version went down 2 times"));
  BOOST_CHECK(v.violations[1].starts_with("no_adopted_version_lost: fragment 0 ends at version 10"));
  const std::vector<float> bad = {1.0f, std::nanf("")};
  v = judge(plan_with(inv), healthy(), bad, {});
  BOOST_REQUIRE_EQUAL(v.violations.size(), 1u);
  BOOST_CHECK_EQUAL(v.violations[0], "finite: 1 global parameters are not finite");
  v = judge(plan_with(inv), healthy(), {}, {});
  BOOST_CHECK_EQUAL(v.violations.at(0), "finite: no global parameters at the end (the syncer was not there)");
}

BOOST_AUTO_TEST_CASE(a_planned_fault_that_never_fired_fails_or_is_noted) {
  Invariants inv;
  inv.all_faults_injected = true;
  FaultPlan plan = plan_with(inv);
  Fault planned;
  planned.kind = FaultKind::kKill;
  planned.at = 50;
  planned.learner = 1;
  planned.where = "plan.toml:7";
  plan.faults = {planned};
  ChaosVerdict v = judge(plan, healthy(), kTheta, {kill(50, 1, 0, "plan.toml:7"), back(51, 1)});
  BOOST_CHECK(v.violations.empty());
  v = judge(plan, healthy(), kTheta, {kill(50, 1, 0, "random")});
  BOOST_REQUIRE_EQUAL(v.violations.size(), 1u);
  BOOST_CHECK(v.violations[0].starts_with("all_faults_injected: kill of plan.toml:7 was never injected: planned at 50.00 s"));
  plan.invariants.all_faults_injected = false;
  v = judge(plan, healthy(), kTheta, {});
  BOOST_CHECK(v.violations.empty());
  BOOST_CHECK_EQUAL(v.notes.size(), 1u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
