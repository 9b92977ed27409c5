// Open membership against SyncerCore alone, in virtual time (docs/design.md
// section 6, "Membership"): claims of open slots, newcomers and the quorum,
// orderly departures, holds on a failed member's slot, syncer restarts, and
// a thousand joins and leaves with the invariants checked after every event.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "atoll/rng.h"
#include "atoll/syncer_core.h"
#include "test_support.h"

namespace atl {
namespace {

using testing::at;
using testing::kStart;

using Core = testing::SyncerCoreDriver;

// Two fixed learners (0, 1) and `open` open slots above them, one fragment,
// H = 4, fp32 codecs; learners of process p have actor ids p * 100 + slot.
Core membership_core(int open = 2, int quorum = 1, Mode mode = Mode::kDecoupled) {
  Topology t = testing::tiny_mlp_topology(mode);
  t.membership.max_learners = 2 + open;
  t.outer.quorum = quorum;
  return Core(t);
}

template <class T>
const T* sent_to(const SyncerEffects& fx, uint32_t learner) {
  for (const auto& s : fx.sends)
    if (s.learner == learner && std::holds_alternative<T>(s.message)) return &std::get<T>(s.message);
  return nullptr;
}

template <class E>
const E* event_in(const SyncerEffects& fx) {
  for (const auto& e : fx.events)
    if (const auto* x = std::get_if<E>(&e)) return x;
  return nullptr;
}

const SyncerEffects::Timer* timer(const SyncerEffects& fx, SyncerEffects::TimerKind kind) {
  for (const auto& t : fx.timers)
    if (t.kind == kind) return &t;
  return nullptr;
}

bool broadcasts(const SyncerEffects& fx) {
  return std::any_of(fx.to_all.begin(), fx.to_all.end(), [](const Message& m) { return std::holds_alternative<Broadcast>(m); });
}

}  // namespace

BOOST_AUTO_TEST_SUITE(membership_test)

BOOST_AUTO_TEST_CASE(claims_give_the_lowest_free_open_slot_and_refuse_when_full) {
  auto c = membership_core(2);
  SyncerEffects fx;
  const Admission a = c.core->claim(7, at(0), fx), b = c.core->claim(8, at(0), fx);
  BOOST_REQUIRE(a.accepted() && b.accepted());
  BOOST_CHECK_EQUAL(a.learner, 2u);
  BOOST_CHECK_EQUAL(b.learner, 3u);
  const Admission full = c.core->claim(9, at(0), fx);
  BOOST_CHECK(full.refused());
  BOOST_CHECK(full.reason == RejectReason::kFull);
  BOOST_CHECK(full.detail.find("all 2 open slots are taken") != std::string::npos);
  // A claimed slot is its claimant's: another process is refused it, saying why.
  const Admission other = c.core->admit(c.reg(2), Core::sender(9, 2));
  BOOST_CHECK(other.reason == RejectReason::kDuplicateLearner);
  BOOST_CHECK(other.detail.find("claimed by another learner") != std::string::npos);
  BOOST_CHECK(c.join(2, 1.0, 7).accepted());
  // A claim nobody registers for lapses after kLeaseSeconds: the slot is free again.
  const double lapse = SyncerCore::kLeaseSeconds + 0.1;
  const Admission again = c.core->claim(9, at(lapse), fx);
  BOOST_REQUIRE(again.accepted());
  BOOST_CHECK_EQUAL(again.learner, 3u);

  Core none = membership_core(0);
  const Admission closed = none.core->claim(1, at(0), fx);
  BOOST_CHECK(closed.reason == RejectReason::kFull);
  BOOST_CHECK(closed.detail.find("no open slots") != std::string::npos);
  // An id outside every slot is unknown, as before.
  BOOST_CHECK(none.core->admit(none.reg(2), Core::sender(1, 2)).reason == RejectReason::kUnknownLearner);
}

BOOST_AUTO_TEST_CASE(a_free_open_slot_may_be_named_and_a_newcomer_joins_warm) {
  auto c = membership_core(2);
  BOOST_REQUIRE(c.join(0, 0).accepted());
  BOOST_REQUIRE(c.join(1, 0).accepted());
  c.progress(1, 3, 0.3);
  // The global model has not moved: a newcomer starts like everyone else.
  SyncerEffects fx;
  BOOST_REQUIRE(c.join(3, 0.4, 2, 1, &fx).accepted());  // slot 3 named by id, unclaimed: taken
  BOOST_REQUIRE(sent_to<Welcome>(fx, 3));
  const event::Joined* joined = event_in<event::Joined>(fx);
  BOOST_REQUIRE(joined);
  BOOST_CHECK_EQUAL(joined->learner, 3u);
  BOOST_CHECK(!event_in<event::Registered>(fx));  // a newcomer, not a recovery
  BOOST_CHECK(c.rec(3).member);
  // Once the model moved on, a newcomer gets a peer's AdamW moments first.
  c.progress(0, 4, 0.5);
  const uint64_t round = 1;
  c.push(0, round, 4, 0.01f, 0.6);
  c.push(1, round, 3, 0.01f, 0.6);
  c.push(3, round, 1, 0.01f, 0.6);
  BOOST_REQUIRE_EQUAL(c.core->version(0), 1u);
  fx = {};
  const uint32_t slot = c.claim_and_join(1.0, 4, &fx);
  BOOST_CHECK_EQUAL(slot, 2u);
  BOOST_CHECK(sent_to<MomentsPull>(fx, 0) || sent_to<MomentsPull>(fx, 1));
  BOOST_CHECK(!sent_to<Welcome>(fx, slot));
}

BOOST_AUTO_TEST_CASE(a_newcomer_never_disturbs_a_round_under_way_and_counts_toward_k_after_h_steps) {
  auto c = membership_core(1, /*quorum=*/3);
  BOOST_REQUIRE(c.join(0, 0).accepted());
  BOOST_REQUIRE(c.join(1, 0).accepted());
  BOOST_CHECK_EQUAL(c.core->learners().size(), 3u);
  // K = 3 with two fixed learners: capped at the 2 that count.
  c.progress(1, 4, 0.3);
  SyncerEffects fx = c.progress(0, 4, 0.4);
  BOOST_REQUIRE(sent_to<Pull>(fx, 0) && sent_to<Pull>(fx, 1));
  const uint64_t round = sent_to<Pull>(fx, 0)->round;
  // A newcomer joins while the round waits: it is not pulled into it.
  const uint32_t slot = c.claim_and_join(0.45, 3, &fx);
  BOOST_CHECK(!sent_to<Pull>(fx, slot));
  BOOST_CHECK(!c.rec(slot).qualified);
  c.push(0, round, 4, 0.01f, 0.5);
  fx = c.push(1, round, 4, 0.01f, 0.55);
  BOOST_CHECK(broadcasts(fx));  // the round closed with the 2 it opened with
  BOOST_CHECK_EQUAL(c.core->version(0), 1u);
  // H steps on a version it adopted: it counts toward K from now on, so the
  // next round needs three answers.
  c.progress(slot, 4, 0.8);
  BOOST_CHECK(c.rec(slot).qualified);
  c.progress(1, 4, 0.85);
  fx = c.progress(0, 4, 0.9);  // three due of the three that count: the round opens
  BOOST_REQUIRE(sent_to<Pull>(fx, slot));
  const uint64_t next = sent_to<Pull>(fx, slot)->round;
  c.push(0, next, 4, 0.01f, 1.0);
  fx = c.push(1, next, 4, 0.01f, 1.0);
  BOOST_CHECK(!broadcasts(fx));
  fx = c.push(slot, next, 4, 0.01f, 1.1);
  BOOST_CHECK(broadcasts(fx));
  BOOST_CHECK_EQUAL(c.core->version(0), 2u);
}

BOOST_AUTO_TEST_CASE(a_leaver_is_merged_then_told_done_and_its_going_is_no_failure) {
  auto c = membership_core(1, /*quorum=*/3);
  BOOST_REQUIRE(c.join(0, 0).accepted());
  BOOST_REQUIRE(c.join(1, 0).accepted());
  const uint32_t slot = c.claim_and_join(0.0, 3);
  c.progress(slot, 4, 0.2);  // qualified: K = 3 counts it
  c.progress(1, 4, 0.3);
  SyncerEffects fx = c.progress(0, 4, 0.4);
  const uint64_t round = sent_to<Pull>(fx, 0)->round;
  c.push(0, round, 4, 0.01f, 0.5);
  c.push(1, round, 4, 0.01f, 0.5);
  // It leaves during the round: its last progress goes ahead, then Leave.
  fx = c.push(slot, 0, 5, 0.01f, 0.6);
  BOOST_CHECK(broadcasts(fx));  // its unasked push answered the round: all three are in
  BOOST_CHECK(!sent_to<Done>(fx, slot));
  fx = c.leave(slot, 0.65);
  const event::Departed* d = event_in<event::Departed>(fx);
  BOOST_REQUIRE(d);
  BOOST_CHECK(d->orderly);
  BOOST_CHECK_EQUAL(d->reason, "asked to stop");
  BOOST_REQUIRE(sent_to<Done>(fx, slot));  // nothing of it is waiting: done at once
  BOOST_CHECK(!c.rec(slot).member);
  // It goes: no failure, no hold on its slot, free for the next.
  fx = {};
  c.core->on_learner_down(slot, at(0.7), fx);
  BOOST_CHECK_EQUAL(c.rec(slot).failures, 0u);
  BOOST_CHECK(!c.rec(slot).down_at);
  BOOST_CHECK(!timer(fx, SyncerEffects::TimerKind::kRelease));
  BOOST_CHECK_EQUAL(c.rec(slot).departures, 1u);
  BOOST_CHECK_EQUAL(c.core->claim(5, at(0.8), fx).learner, slot);
}

BOOST_AUTO_TEST_CASE(a_leavers_last_push_makes_its_fragment_due_and_done_waits_for_the_merge) {
  auto c = membership_core(1, /*quorum=*/2);
  BOOST_REQUIRE(c.join(0, 0).accepted());
  BOOST_REQUIRE(c.join(1, 0).accepted());
  c.progress(0, 1, 0.1, 0.2);  // learner 0 steps in 0.2 s: a round's grace waits for it
  c.progress(1, 1, 0.1, 5.0);  // the leaver's steps are slow: once it leaves, they size nothing
  // Learner 1 leaves after 2 steps: not due by itself (H = 4).
  SyncerEffects fx = c.push(1, 0, 2, 0.01f, 0.3);
  BOOST_CHECK(!sent_to<Pull>(fx, 0));
  fx = c.leave(1, 0.35);
  BOOST_REQUIRE(sent_to<Pull>(fx, 0));  // its answer opens the round; the others are pulled
  BOOST_CHECK(!sent_to<Pull>(fx, 1));   // a leaver is pulled no more
  BOOST_CHECK(!sent_to<Done>(fx, 1));   // its progress is not merged yet
  // Its answer is a quorum of one (K = 2 capped at the 1 present); the grace
  // window is sized from learner 0's 0.2 s steps, not the leaver's 5 s:
  // gamma * tau * 0.2 = 0.4 s.
  const SyncerEffects::Timer* grace = timer(fx, SyncerEffects::TimerKind::kGrace);
  BOOST_REQUIRE(grace);
  BOOST_CHECK_CLOSE(grace->seconds, 0.4, 1e-6);
  const uint64_t round = sent_to<Pull>(fx, 0)->round;
  fx = c.push(0, round, 1, 0.01f, 0.4);
  BOOST_REQUIRE(broadcasts(fx));
  const Broadcast& b = std::get<Broadcast>(fx.to_all.back());
  BOOST_CHECK(std::find(b.merged.begin(), b.merged.end(), 1u) != b.merged.end());
  BOOST_CHECK(sent_to<Done>(fx, 1));
  BOOST_CHECK(c.rec(1).leaving == LearnerRecord::Leaving::kDone);
}

BOOST_AUTO_TEST_CASE(a_failed_member_keeps_its_open_slot_for_the_hold_then_is_released) {
  auto c = membership_core(1);
  BOOST_REQUIRE(c.join(0, 0).accepted());
  const uint32_t slot = c.claim_and_join(0.0, 3);
  SyncerEffects fx;
  c.core->on_learner_down(slot, at(1.0), fx);
  BOOST_CHECK_EQUAL(c.rec(slot).failures, 1u);  // vanished: a failure, as ever
  BOOST_REQUIRE(timer(fx, SyncerEffects::TimerKind::kRelease));
  const SyncerEffects::Timer release = *timer(fx, SyncerEffects::TimerKind::kRelease);  // a copy: fx is reused
  BOOST_CHECK_EQUAL(release.seconds, SyncerCore::kHoldSeconds);
  // Meanwhile the slot is its own: no claim gets it, another process may not take it.
  BOOST_CHECK(c.core->claim(4, at(2.0), fx).reason == RejectReason::kFull);
  const Admission held = c.core->admit(c.reg(slot, 2), Core::sender(4, slot));
  BOOST_CHECK(held.detail.find("held for its member") != std::string::npos);
  // Its own process comes back with a new incarnation: back, not new.
  fx = {};
  BOOST_REQUIRE(c.join(slot, 3.0, 3, 2, &fx).accepted());
  BOOST_CHECK(event_in<event::Registered>(fx));
  BOOST_CHECK(!event_in<event::Joined>(fx));
  // It fails again and stays away: released after the hold, the slot free.
  fx = {};
  c.core->on_learner_down(slot, at(4.0), fx);
  const SyncerEffects::Timer second = *timer(fx, SyncerEffects::TimerKind::kRelease);
  fx = {};
  c.core->on_timer(release, at(61.0), fx);  // the first failure's timer: stale, nothing happens
  BOOST_CHECK(c.rec(slot).member);
  c.core->on_timer(second, at(64.0), fx);
  const event::Departed* d = event_in<event::Departed>(fx);
  BOOST_REQUIRE(d);
  BOOST_CHECK(!d->orderly);
  BOOST_CHECK(!c.rec(slot).member);
  BOOST_CHECK_EQUAL(c.core->claim(4, at(65.0), fx).learner, slot);
}

BOOST_AUTO_TEST_CASE(allocated_time_counts_each_member_while_a_member) {
  auto c = membership_core(2);
  BOOST_REQUIRE(c.join(0, 0).accepted());
  BOOST_REQUIRE(c.join(1, 0).accepted());
  // Two fixed members from 0; a joiner from 10 s to 30 s.
  const uint32_t slot = c.claim_and_join(10.0, 3);
  c.leave(slot, 30.0);
  BOOST_CHECK_CLOSE(c.core->allocated_seconds(at(40.0)), 2 * 40.0 + 20.0, 1e-9);
}

BOOST_AUTO_TEST_CASE(dp_groups_are_members_a_leaver_shrinks_and_an_unused_slot_never_blocks) {
  auto c = membership_core(2, 1, Mode::kDp);
  BOOST_REQUIRE(c.join(0, 0).accepted());
  BOOST_REQUIRE(c.join(1, 0).accepted());
  c.push(0, 0, 1, 0.01f, 0.1);
  SyncerEffects fx = c.push(1, 0, 1, 0.01f, 0.2);
  BOOST_CHECK(broadcasts(fx));  // two open slots nobody holds are not in the group
  const uint32_t slot = c.claim_and_join(0.3, 3);
  c.push(0, 0, 1, 0.01f, 0.4);
  fx = c.push(1, 0, 1, 0.01f, 0.4);
  BOOST_CHECK(!broadcasts(fx));  // the newcomer is in the group now
  fx = c.leave(slot, 0.5);
  BOOST_CHECK(broadcasts(fx));  // it left: the step goes on without it
  BOOST_CHECK(sent_to<Done>(fx, slot));
}

BOOST_AUTO_TEST_CASE(joins_while_the_syncer_restarts_never_take_a_returning_members_slot) {
  // In one process: the next syncer continues the records, reservations included.
  auto c = membership_core(2);
  BOOST_REQUIRE(c.join(0, 0).accepted());
  const uint32_t slot = c.claim_and_join(0.0, 3);
  SyncerEffects fx;
  const Admission pending = c.core->claim(4, at(1.0), fx);  // claimed, not yet registered
  Topology t = c.core->topology();
  auto next = SyncerCore::create(t, at(2.0), kStart);
  BOOST_REQUIRE(next.ok());
  (*next)->continue_from(c.core->stats(), c.core->learners());
  BOOST_CHECK((*next)->learners()[slot].member);
  BOOST_CHECK((*next)->claim(5, at(2.1), fx).reason == RejectReason::kFull);  // slot 3 is process 4's claim
  BOOST_CHECK((*next)->on_register(c.reg(pending.learner), Core::sender(4, pending.learner), at(2.2), fx).accepted());
  fx = {};
  BOOST_REQUIRE((*next)->on_register(c.reg(slot), Core::sender(3, slot), at(2.3), fx).accepted());
  BOOST_CHECK(!event_in<event::Joined>(fx));  // it never left

  // In a new process: the checkpoint holds the slot for its member's process.
  const CheckpointState saved = copy_of(c.core->checkpoint(0));
  auto restored = SyncerCore::create(t, at(100.0));
  BOOST_REQUIRE(restored.ok());
  BOOST_REQUIRE((*restored)->restore(saved).ok());
  const Admission newcomer = (*restored)->claim(6, at(100.5), fx);
  BOOST_REQUIRE(newcomer.accepted());
  BOOST_CHECK_NE(newcomer.learner, slot);
  BOOST_CHECK((*restored)->admit(c.reg(slot, 2), Core::sender(6, slot)).refused());
  BOOST_CHECK((*restored)->on_register(c.reg(slot), Core::sender(3, slot), at(101.0), fx).accepted());
}

// Random joins, leaves, failures, progress and answers, with every timer
// fired in virtual time; after every event the invariants hold: a slot has one
// member at a time, K counts no one who is not a member, versions only grow,
// every leaver is told Done exactly once, and rounds keep completing.
struct Churn {
  Core c = membership_core(6, /*quorum=*/2);
  Rng rng{42};
  double t = 0.0;
  std::multimap<double, SyncerEffects::Timer> timers;
  std::map<uint32_t, uint64_t> incarnation;  // slot -> its current member's incarnation
  std::set<uint32_t> up;                      // members whose process runs (welcomed or not yet)
  std::set<uint32_t> leaving;                 // said Leave, Done not yet received
  uint64_t dones = 0;

  Push push(uint32_t m, uint64_t round, uint64_t steps) const {
    return Push{m, incarnation.at(m), 0, round, c.core->version(0), steps, steps * 8, 0.1 * double(steps),
                encode_payload(Codec::kFp32, 0, std::vector<float>(c.n, 0.01f))};
  }
  // Carries out effects as learners and a driver would: timers queued, pulls
  // answered at once by learners that run and are not leaving, Done booked.
  void apply(SyncerEffects fx) {
    for (const auto& tm : fx.timers) timers.emplace(t + tm.seconds, tm);
    for (const auto& s : fx.sends) {
      if (std::holds_alternative<Done>(s.message)) {
        BOOST_REQUIRE_MESSAGE(leaving.erase(s.learner) == 1, "Done to learner " << s.learner << ", not leaving");
        ++dones;
      } else if (const auto* p = std::get_if<Pull>(&s.message);
                 p && up.count(s.learner) && !leaving.count(s.learner) && c.rec(s.learner).connected) {
        SyncerEffects answer;
        c.core->on_push(push(s.learner, p->round, 1 + rng.next_u64() % 4), at(t), answer);
        apply(std::move(answer));
      }
    }
  }
  void fire_timers() {
    while (!timers.empty() && timers.begin()->first <= t) {
      const auto tm = timers.begin()->second;
      timers.erase(timers.begin());
      SyncerEffects fx;
      c.core->on_timer(tm, at(t), fx);
      apply(std::move(fx));
    }
  }
  uint32_t pick(const std::vector<uint32_t>& from) { return from[rng.next_u64() % from.size()]; }
  void check() {
    const auto& ls = c.core->learners();
    int members = 0;
    for (uint32_t m = 0; m < ls.size(); ++m) {
      const LearnerRecord& l = ls[m];
      BOOST_REQUIRE(!l.connected || up.count(m));
      BOOST_REQUIRE(!l.connected || l.member || l.leaving != LearnerRecord::Leaving::kNo);
      if (l.leaving == LearnerRecord::Leaving::kNo && !leaving.count(m)) continue;
      BOOST_REQUIRE(!l.member);  // a leaver is no member
    }
    for (const auto& l : ls) members += l.member ? 1 : 0;
    BOOST_REQUIRE_LE(members, 8);
  }
};

// A syncer in shards in processes of their own: shard 0 gives the ids. A
// member of an open slot fails while shard 1 is down; shard 1 comes back from
// its checkpoint later and holds the slot for the member's process for a hold
// from then. Shard 0's hold ends first and it gives the slot to a newcomer,
// which shard 1 refuses, naming the slot (the learner registers again: not a
// refusal for good), until its own hold ends: the slot is never held by two
// processes at one shard, and the newcomer waits one hold at most.
BOOST_AUTO_TEST_CASE(a_restarted_shard_holds_a_slot_shard_0_gave_again_for_one_hold_at_most) {
  Topology t = testing::tiny_mlp_topology();
  t.outer.fragments = 2;
  t.syncer.shards = 2;
  t.membership.max_learners = 3;  // fixed 0 and 1, open slot 2
  const auto shard = [&](uint32_t s, double now) {
    auto c = SyncerCore::create(t, at(now), kStart, s);
    BOOST_REQUIRE_MESSAGE(c.ok(), c.status().to_string());
    return std::move(*c);
  };
  auto s0 = shard(0, 0.0), s1 = shard(1, 0.0);
  // A learner process's incarnations start above any process started before it (incarnation_base()).
  const auto reg = [&](uint32_t m, uint64_t incarnation = 1) {
    return Register{m, incarnation, s0->layout().fingerprint(), "", {}};
  };
  SyncerEffects fx;
  const Admission claim = s0->claim(3, at(1.0), fx);
  BOOST_REQUIRE(claim.accepted());
  const uint32_t slot = claim.learner;
  BOOST_REQUIRE(s0->on_register(reg(slot), Core::sender(3, slot), at(1.0), fx).accepted());
  BOOST_REQUIRE(s1->on_register(reg(slot), Core::sender(3, slot), at(1.0), fx).accepted());
  const CheckpointState saved = copy_of(s1->checkpoint(0));  // shard 1's last checkpoint; then it is killed
  fx = {};
  s0->on_learner_down(slot, at(10.0), fx);  // the member's process dies
  const SyncerEffects::Timer release = *timer(fx, SyncerEffects::TimerKind::kRelease);
  auto s1b = shard(1, 20.0);
  BOOST_REQUIRE(s1b->restore(saved, at(20.0)).ok());
  const double released = 10.0 + SyncerCore::kHoldSeconds;
  fx = {};
  s0->on_timer(release, at(released), fx);
  const Admission again = s0->claim(4, at(released + 0.1), fx);
  BOOST_REQUIRE(again.accepted());
  BOOST_CHECK_EQUAL(again.learner, slot);
  BOOST_REQUIRE(s0->on_register(reg(slot, 2), Core::sender(4, slot), at(released + 0.1), fx).accepted());
  const Admission early = s1b->on_register(reg(slot, 2), Core::sender(4, slot), at(released + 0.2), fx);
  BOOST_REQUIRE(early.refused());
  BOOST_CHECK(early.reason == RejectReason::kDuplicateLearner);  // registers again, not refused for good
  // (A restored shard says the slot is "claimed by another learner": it restores the hold, not membership.)
  BOOST_CHECK_MESSAGE(early.detail.find("learner slot " + std::to_string(slot) + " is") != std::string::npos,
                      early.detail);
  BOOST_CHECK(s1b->on_register(reg(slot, 2), Core::sender(4, slot), at(20.0 + SyncerCore::kHoldSeconds + 0.1), fx)
                  .accepted());
}

BOOST_AUTO_TEST_CASE(a_thousand_joins_and_leaves_keep_every_invariant) {
  Churn w;
  for (uint32_t m : {0u, 1u}) {
    w.incarnation[m] = 1;
    w.up.insert(m);
    BOOST_REQUIRE(w.c.join(m, 0).accepted());
  }
  uint64_t joins = 0, leaves = 0, refused = 0, version = 0, rounds_at_half = 0, cut = 0;
  // Every leave follows a join: joins go on until a thousand of each happened.
  for (int events = 0; leaves < 1000; ++events) {
    BOOST_REQUIRE_LT(events, 200000);
    w.t += 0.05;
    w.fire_timers();
    SyncerEffects fx;
    const uint64_t action = w.rng.next_u64() % 10;
    std::vector<uint32_t> running(w.up.begin(), w.up.end()), open_welcomed;
    for (uint32_t m : running)
      if (m >= 2 && w.c.rec(m).connected && !w.leaving.count(m)) open_welcomed.push_back(m);
    if (action < 3) {  // a learner without an id asks for a slot, and registers
      const uint64_t process = 10 + joins + refused;
      const Admission a = w.c.core->claim(process, at(w.t), fx);
      if (a.refused()) {
        BOOST_REQUIRE(a.reason == RejectReason::kFull);
        ++refused;
      } else {
        BOOST_REQUIRE(!w.up.count(a.learner));
        w.up.insert(a.learner);
        w.incarnation[a.learner] += 1;
        w.apply(std::move(fx));
        fx = {};
        BOOST_REQUIRE(w.c.core->on_register(w.c.reg(a.learner, w.incarnation[a.learner]), Core::sender(process, a.learner),
                                           at(w.t), fx).accepted());
        ++joins;
      }
    } else if (action < 5 && !open_welcomed.empty()) {  // one leaves in order
      const uint32_t m = w.pick(open_welcomed);
      w.c.core->on_push(w.push(m, 0, 3), at(w.t), fx);
      w.apply(std::move(fx));
      fx = {};
      w.leaving.insert(m);
      w.c.core->on_leave(Leave{m, w.incarnation[m], "churn"}, at(w.t), fx);
      ++leaves;
    } else if (action == 5) {  // an open slot's process ends: a leaver after Done, or a member vanishing
      std::vector<uint32_t> open;
      for (uint32_t m : running)
        if (m >= 2) open.push_back(m);
      if (open.empty()) continue;
      const uint32_t m = w.pick(open);
      w.up.erase(m);
      cut += w.leaving.erase(m);  // gone before its Done: it timed out (--drain-seconds)
      w.c.core->on_learner_down(m, at(w.t), fx);
    } else {  // a running member trains a few steps and says so
      const uint32_t m = w.pick(running);
      if (w.leaving.count(m) || !w.c.rec(m).connected) continue;
      const uint64_t steps = 1 + w.rng.next_u64() % 6;
      w.c.core->on_progress(
          Progress{m, w.incarnation[m], steps, steps * 8, 0.1, {{w.c.core->version(0), steps}}, 1.0f}, at(w.t), fx);
    }
    w.apply(std::move(fx));
    w.check();
    BOOST_REQUIRE_GE(w.c.core->version(0), version);
    version = w.c.core->version(0);
    if (joins == 500 && rounds_at_half == 0) rounds_at_half = w.c.core->stats().rounds;
  }
  BOOST_CHECK_GE(joins, 1000u);
  BOOST_CHECK_EQUAL(leaves, 1000u);
  BOOST_CHECK_GT(refused, 0u);  // the slots did fill up at times
  // Every leave ended once: Done, or gone before it, or still settling.
  BOOST_CHECK_EQUAL(w.dones + cut + w.leaving.size(), leaves);
  BOOST_CHECK_GT(w.dones, cut);
  BOOST_CHECK_GT(w.c.core->stats().rounds, rounds_at_half + 100);  // rounds kept completing in the second half
  BOOST_CHECK_GE(w.c.core->allocated_seconds(at(w.t)), 2 * w.t);  // the fixed core at least
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
