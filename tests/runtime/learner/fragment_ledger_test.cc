// FragmentLedger alone, in virtual time (the learner's steps): when a
// fragment falls due (DyLU: H scaled by the learner's speed), what a push
// books, what a new version carries or drops, which pushes a welcome lets go
// again, and the stale-refusal policy. The expected figures are worked out
// from the rules in the comments, not read back from the ledger.
#include <boost/test/unit_test.hpp>

#include <optional>

#include "atoll/fragment_ledger.h"
#include "test_support.h"

namespace atl {
namespace {

// Two fragments, H = 8, learners at speeds 1 and 0.5, progress carried.
Topology ledger_topology(bool by_speed = false) {
  Topology t = testing::exact_wire_topology();
  t.learners = {{1.0, 8}, {0.5, 8}};
  t.outer.fragments = 2;
  t.outer.stream = 1;
  t.outer.sync_every = 8;
  t.outer.sync_every_start = 0;
  t.outer.sync_by_speed = by_speed;
  t.outer.carry_progress = true;
  t.outer.barrier = false;
  return t;
}

constexpr uint64_t kNever = ~uint64_t{0};

// The learner's steps after which fragment p first falls due, within `steps` (kNever: not).
uint64_t first_due(FragmentLedger& l, uint32_t p, int steps) {
  for (int s = 0; s < steps; ++s) {
    if (l.due(p)) return l.steps();
    l.finish_step(8, 0.5);
  }
  return kNever;
}

void welcome_all(FragmentLedger& l, uint64_t version = 0) {
  for (uint32_t p = 0; p < l.size(); ++p) BOOST_REQUIRE(l.welcome(p, version) == FragmentLedger::Welcomed::kFirst);
}

Push push(FragmentLedger& l, uint32_t p, uint64_t round = 0) { return l.push(p, round, 1, 1, Payload{}); }

// A broadcast of fragment p at `version` naming learner 1's push through `through` as merged.
Broadcast merging(uint32_t p, uint64_t version, std::optional<uint64_t> through) {
  Broadcast b;
  b.fragment = p;
  b.version = version;
  if (through) {
    b.merged = {1};
    b.merged_through = {*through};
  }
  return b;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fragment_ledger_test)

// Version 0 staggers the two groups (fragment g at (g + 1) * H / 2), later
// versions fall due H steps after adoption; with sync_by_speed (DyLU) the
// learner at half the fastest speed has H = 4.
BOOST_AUTO_TEST_CASE(a_fragment_falls_due_after_its_h_and_dylu_scales_h_by_speed) {
  for (const bool by_speed : {false, true}) {
    const Topology t = ledger_topology(by_speed);
    for (const double speed : {1.0, 0.5}) {
      const uint64_t h = by_speed && speed == 0.5 ? 4 : 8;
      FragmentLedger l(t, speed, 2);
      welcome_all(l);
      BOOST_TEST(first_due(l, 0, 40) == h / 2);
      FragmentLedger m(t, speed, 2);
      welcome_all(m);
      BOOST_TEST(first_due(m, 1, 40) == h);
      // Version 1 adopted at step s (nothing merged, nothing carried): due at s + H.
      const uint64_t adopted_at = m.steps();
      m.move(1, 1, m.plan_move(1, /*may_carry=*/false, std::nullopt));
      BOOST_TEST(first_due(m, 1, 40) == adopted_at + h);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_push_books_the_fragments_counts_and_is_due_once_per_version) {
  const Topology t = ledger_topology();
  FragmentLedger l(t, 1.0, 2);
  welcome_all(l, 3);
  for (int s = 0; s < 4; ++s) l.finish_step(10, 0.25);
  const Push p = push(l, 0);
  BOOST_TEST(p.base_version == 3u);
  BOOST_TEST(p.steps == 4u);
  BOOST_TEST(p.tokens == 40u);
  BOOST_TEST(p.seconds == 1.0);
  BOOST_TEST(p.since == 0u);
  BOOST_TEST(p.through == 4u);
  BOOST_TEST(!l.due(0));  // pushed at this version
  BOOST_TEST(l.push_in_flight(Pull{0, 7, false, 3}));   // its unasked push answers a pull of version 3
  BOOST_TEST(!l.push_in_flight(Pull{0, 7, false, 2}));  // not one of another version
  BOOST_TEST(!l.push_in_flight(Pull{0, 7, true, 3}));   // the last pull is answered
  const Progress g = l.progress(1, 1, 0.0f);
  BOOST_TEST(g.step == 4u);
  BOOST_TEST(g.fragments[0].steps == 4u);
}

// Learner 1 pushes at step 3 and trains on to step 5; version 1 merges that
// push: the 2 steps after it stay on top, and the fragment is due H steps
// after the push, as if adopted at once.
BOOST_AUTO_TEST_CASE(a_version_that_merged_a_push_carries_what_followed_it) {
  const Topology t = ledger_topology();
  FragmentLedger l(t, 1.0, 2);
  welcome_all(l);
  for (int s = 0; s < 3; ++s) l.finish_step(10, 1.0);
  push(l, 0);
  for (int s = 0; s < 2; ++s) l.finish_step(10, 1.0);
  const Broadcast b = merging(0, 1, 3);
  const auto plan = l.plan_move(0, true, l.credited_through(0, b, 1));
  BOOST_REQUIRE(plan.merged != nullptr);
  BOOST_TEST(plan.merged->through == 3u);
  BOOST_TEST(plan.carry);
  BOOST_TEST(l.move(0, 1, plan).empty());  // nothing left in flight
  const auto& tr = l.track(0);
  BOOST_TEST(tr.version == 1u);
  BOOST_TEST(tr.steps == 2u);
  BOOST_TEST(tr.tokens == 20u);
  BOOST_TEST(tr.since == 3u);
  BOOST_TEST(tr.due_from == 3u);
  BOOST_TEST(!tr.pushed);
}

// A version that merged none of its pushes carries every step since the
// base and keeps the pushes in flight (one of them may be merged next).
BOOST_AUTO_TEST_CASE(a_version_that_merged_none_of_it_carries_all_and_keeps_its_pushes_in_flight) {
  const Topology t = ledger_topology();
  FragmentLedger l(t, 1.0, 2);
  welcome_all(l);
  for (int s = 0; s < 3; ++s) l.finish_step(10, 1.0);
  push(l, 0);
  l.finish_step(10, 1.0);
  const Broadcast b = merging(0, 1, std::nullopt);
  BOOST_TEST(!l.credited_through(0, b, 1).has_value());
  const auto plan = l.plan_move(0, true, std::nullopt);
  BOOST_TEST(plan.carry);
  BOOST_TEST(l.move(0, 1, plan).size() == 1u);
  BOOST_TEST(l.track(0).steps == 4u);
  BOOST_TEST(l.track(0).since == 0u);
  BOOST_TEST(l.track(0).due_from == 4u);  // due H after this adoption
}

// At most four pushes are remembered, the oldest kept; a credit for one no
// longer remembered cannot be told apart, and the progress is dropped.
BOOST_AUTO_TEST_CASE(a_credit_for_a_push_no_longer_remembered_drops_the_progress) {
  const Topology t = ledger_topology();
  FragmentLedger l(t, 1.0, 2);
  welcome_all(l);
  for (int s = 1; s <= 5; ++s) {
    l.finish_step(10, 1.0);
    push(l, 0, static_cast<uint64_t>(s));  // answers pulls of rounds 1..5, at steps 1..5
  }
  const auto& flight = l.track(0).in_flight;
  BOOST_REQUIRE(flight.size() == FragmentLedger::kMaxInFlight);
  BOOST_TEST(flight.front().through == 1u);  // the oldest kept
  BOOST_TEST(flight[1].through == 3u);       // the second (step 2) dropped
  const auto plan = l.plan_move(0, true, uint64_t{2});
  BOOST_TEST(plan.merged == nullptr);
  BOOST_TEST(!plan.carry);
  l.move(0, 1, plan);
  BOOST_TEST(l.track(0).steps == 0u);
  BOOST_TEST(l.track(0).since == 5u);
}

// Progress never merged is carried for at most kMaxCarriedIntervals sync
// intervals (no merge lag yet): then it is dropped.
BOOST_AUTO_TEST_CASE(progress_carried_too_long_is_dropped) {
  const Topology t = ledger_topology();
  FragmentLedger l(t, 1.0, 2);
  welcome_all(l);
  const uint64_t limit = FragmentLedger::kMaxCarriedIntervals * 8;
  for (uint64_t s = 0; s < limit; ++s) l.finish_step(1, 1.0);
  BOOST_TEST(l.plan_move(0, true, std::nullopt).carry);
  l.finish_step(1, 1.0);
  BOOST_TEST(!l.plan_move(0, true, std::nullopt).carry);
  BOOST_TEST(!l.plan_move(1, /*may_carry=*/false, std::nullopt).carry);
}

// After a reconnect the syncer may pull before it welcomes: the answer went
// after the Register on the same link, so a welcome at the version held does
// not let the fragment be pushed again. A push from before the Register may
// have been lost with the old link: that one may go again.
BOOST_AUTO_TEST_CASE(a_welcome_at_the_version_held_lets_only_a_push_from_before_the_register_go_again) {
  const Topology t = ledger_topology();
  FragmentLedger l(t, 1.0, 2);
  welcome_all(l, 2);
  for (int s = 0; s < 8; ++s) l.finish_step(1, 1.0);
  BOOST_REQUIRE(l.due(0) && l.due(1));
  push(l, 0);                 // before the link went
  l.registering(0);           // a new link: the Register goes
  push(l, 1, /*round=*/9);    // a pull of the new link answered
  BOOST_TEST((l.welcome(0, 2) == FragmentLedger::Welcomed::kHeld));
  BOOST_TEST((l.welcome(1, 2) == FragmentLedger::Welcomed::kHeld));
  BOOST_TEST(l.due(0));   // may have been lost: again
  BOOST_TEST(!l.due(1));  // the syncer that welcomes has it
  BOOST_TEST((l.welcome(0, 1) == FragmentLedger::Welcomed::kHeld));  // never back
  BOOST_TEST(l.regressions_refused() == 1u);
  BOOST_TEST(l.track(0).version == 2u);
  BOOST_TEST((l.welcome(0, 5) == FragmentLedger::Welcomed::kNewer));
}

// A stale push is not pushed again from the same base; the third stale
// refusal at one version (nothing newer arrived) resyncs; a broadcast held
// ahead means newer versions are on their way.
BOOST_AUTO_TEST_CASE(stale_refusals_resync_the_third_time_at_one_version_and_never_while_one_is_held) {
  using Action = LearnerReplica::RejectAction;
  const Topology t = ledger_topology();
  FragmentLedger l(t, 1.0, 2);
  welcome_all(l);
  Reject stale{RejectReason::kStale, 0, "stale"};
  BOOST_TEST((l.on_reject(stale, true) == Action::kGoOn));
  BOOST_TEST(l.track(0).pushed);  // the next version carries the progress
  BOOST_TEST((l.on_reject(stale, true, /*holds_newer=*/true) == Action::kGoOn));
  BOOST_TEST((l.on_reject(stale, true) == Action::kGoOn));
  BOOST_TEST((l.on_reject(stale, true) == Action::kResync));
  BOOST_TEST((l.on_reject(stale, true) == Action::kGoOn));  // counting again after the resync
  BOOST_TEST((l.on_reject(Reject{RejectReason::kBadToken, 0, ""}, true) == Action::kStop));
  BOOST_TEST((l.on_reject(Reject{RejectReason::kUnknownLearner, kNoFragment, ""}, true) == Action::kResync));
  BOOST_TEST((l.on_reject(Reject{RejectReason::kUnknownLearner, kNoFragment, ""}, false) == Action::kGoOn));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
