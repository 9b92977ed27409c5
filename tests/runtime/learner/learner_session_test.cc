// LearnerSession with SyncerCore, without CAF, in virtual time: the learner's
// protocol driven through joins, pulls that overtake steps, broadcasts out of
// order, a shard lost and back, a syncer restart, leaving with unmerged
// progress, and a thousand random events with the protocol's invariants
// checked after each.
#include <boost/test/unit_test.hpp>

#include <functional>
#include <map>
#include <memory>
#include <queue>

#include "atoll/fragments.h"
#include "atoll/job.h"
#include "atoll/model_replica.h"
#include "atoll/learner_session.h"
#include "atoll/rng.h"
#include "atoll/syncer_core.h"
#include "test_support.h"

namespace atl {
namespace {

using testing::at;

constexpr uint32_t kShards = 2;
constexpr uint32_t kLearners = 3;

Topology world_topology() {
  Topology t = testing::exact_wire_topology();  // 4 tensors: 4 fragments
  t.learners = {{1.0, 8}, {1.0, 8}, {1.0, 8}};
  t.outer.fragments = 4;
  t.outer.sync_every = 4;
  t.outer.quorum = 1;
  t.syncer.shards = kShards;
  return t;
}

// Shards and learners joined by links of random latency (so messages
// overtake one another), in virtual time. Each learner incarnation is a
// LearnerSession over atoll's own replica; its steps take 1 s. A shard can
// be cut off (its links drop, both sides see it go) and come back, or
// restart empty. After every event, check() holds the invariants.
struct World {
  Topology topology = world_topology();
  std::shared_ptr<const Job> job;
  Rng rng{7};
  double now = 0.0;
  double max_latency = 0.05;  // seconds; a link's latency is uniform in [0.001, max]
  // Extra seconds a message from a shard to learner m takes (null: none).
  std::function<double(uint32_t m, const Message&)> held_back;

  struct Shard {
    std::unique_ptr<SyncerCore> core;
    bool up = true;
    bool finished = false;      // said Done, as the actor does once flushed()
    uint64_t told_over = 0;     // Done passed on by learners (another shard ended the run)
    uint64_t link = 0;  // grows when the shard is cut off: messages on an older link are lost
  };
  std::vector<Shard> shards;
  struct Learner {
    uint64_t incarnation = 0;
    std::shared_ptr<ModelReplica> core;
    std::unique_ptr<LearnerSession> session;  // null: its process ended
    LearnerEffects::End end = LearnerEffects::End::kNone;
    std::vector<uint64_t> versions;  // the versions adopted as last seen
  };
  std::vector<Learner> learners;

  struct Event {
    double t;
    uint64_t seq;
    std::function<void()> run;
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<>> queue;
  uint64_t seq = 0;

  // Invariant bookkeeping.
  double trained_seconds = 0.0;   // booked by every incarnation
  uint64_t pushes_to_wrong_shard = 0, pushes = 0, steps_before_welcome = 0;
  std::vector<std::string> failures;

  World() {
    auto j = Job::load(topology, "");
    BOOST_REQUIRE(j.ok());
    job = std::move(*j);
    for (uint32_t s = 0; s < kShards; ++s) shards.push_back({make_core(s)});
    learners.resize(kLearners);
  }
  std::unique_ptr<SyncerCore> make_core(uint32_t s) const {
    auto c = SyncerCore::create(topology, at(now), at(0.0), s);
    BOOST_REQUIRE(c.ok());
    return std::move(*c);
  }

  void at_time(double t, std::function<void()> run) { queue.push({t, seq++, std::move(run)}); }
  double latency() { return 0.001 + rng.uniform() * (max_latency - 0.001); }
  bool step() {  // runs the next event; false when there is none
    if (queue.empty()) return false;
    Event e = queue.top();
    queue.pop();
    now = e.t;
    e.run();
    check();
    return true;
  }
  void run_until(double t) {
    while (!queue.empty() && queue.top().t <= t) step();
    now = t;
  }

  // ---- learners

  void start(uint32_t m) {
    Learner& l = learners[m];
    ++l.incarnation;
    auto core = ModelReplica::create(m, l.incarnation, job);
    BOOST_REQUIRE(core.ok());
    l.core = std::move(*core);
    LearnerSession::Options options;
    options.shards = static_cast<int>(kShards);
    options.restarted = l.incarnation > 1;
    l.session = std::make_unique<LearnerSession>(l.core, options, now);
    l.end = LearnerEffects::End::kNone;
    l.versions.assign(l.core->fragment_count(), 0);
    in_session(m, [&](LearnerSession& s, LearnerEffects& fx) { s.lookup(reachable(), now, fx); });
  }
  std::vector<bool> reachable() const {
    std::vector<bool> r;
    for (const auto& s : shards) r.push_back(s.up);
    return r;
  }
  void kill(uint32_t m) {  // its process ends: both shards see it go
    Learner& l = learners[m];
    if (!l.session) return;
    l.session.reset();
    for (uint32_t s = 0; s < kShards; ++s)
      if (shards[s].up) to_core(s, [&](SyncerCore& c, SyncerEffects& fx) { c.on_learner_down(m, at(now), fx); });
  }
  // Not templates: a timer's lambda calling back in would instantiate them without end.
  void in_session(uint32_t m, const std::function<void(LearnerSession&, LearnerEffects&)>& event) {
    Learner& l = learners[m];
    if (!l.session) return;
    LearnerEffects fx;
    event(*l.session, fx);
    if (fx.start_step && !l.core->welcomed()) ++steps_before_welcome;
    carry_out(m, fx);
  }
  void carry_out(uint32_t m, LearnerEffects& fx) {
    Learner& l = learners[m];
    const uint64_t incarnation = l.incarnation;
    for (auto& send : fx.sends) {
      if (const auto* p = std::get_if<Push>(&send.message)) {
        ++pushes;
        if (send.shard != shard_of(p->fragment, static_cast<int>(kShards))) ++pushes_to_wrong_shard;
      }
      const uint32_t s = send.shard;
      if (!shards[s].up) continue;  // no way to it: lost
      const uint64_t link = shards[s].link;
      at_time(now + latency(), [this, s, m, link, msg = std::move(send.message)] {
        if (!shards[s].up || shards[s].link != link) return;
        to_core(s, [&](SyncerCore& c, SyncerEffects& sfx) {
          if (const auto* r = std::get_if<Register>(&msg)) c.on_register(*r, Sender{1, 10 + m}, at(now), sfx);
          else if (const auto* p = std::get_if<Push>(&msg)) c.on_push(*p, at(now), sfx);
          else if (const auto* g = std::get_if<Progress>(&msg)) c.on_progress(*g, at(now), sfx);
          else if (const auto* mo = std::get_if<Moments>(&msg)) c.on_moments(m, *mo, at(now), sfx);
          else if (const auto* lv = std::get_if<Leave>(&msg)) c.on_leave(*lv, at(now), sfx);
          else if (std::holds_alternative<Done>(msg)) {  // the actor ends the run here too
            ++shards[s].told_over;
            if (!c.flushing() && !shards[s].finished) c.begin_flush(at(now), sfx);
          }
        });
      });
    }
    for (const auto& t : fx.timers)
      at_time(now + t.seconds, [this, m, incarnation, t] {
        if (learners[m].incarnation != incarnation) return;
        if (t.kind == LearnerTimer::kLookup) {  // the driver finds the shards again
          in_session(m, [&](LearnerSession& s, LearnerEffects& f) {
            if (!s.all_welcomed()) s.lookup(reachable(), now, f);
          });
          return;
        }
        in_session(m, [&](LearnerSession& s, LearnerEffects& f) { s.on_timer(t.kind, t.tag, now, f); });
      });
    if (fx.start_step)
      at_time(now + 1.0, [this, m, incarnation] {
        Learner& ln = learners[m];
        if (ln.incarnation != incarnation || !ln.session) return;
        const auto r = ln.core->step();
        trained_seconds += 1.0;
        in_session(m, [&](LearnerSession& s, LearnerEffects& f) { s.on_step_done(r, now, f, 1.0); });
      });
    if (fx.end != LearnerEffects::End::kNone) {
      l.end = fx.end;
      if (fx.end != LearnerEffects::End::kStopped) failures.push_back(fx.end_reason);
      kill(m);
    }
  }

  // ---- shards

  void to_core(uint32_t s, const std::function<void(SyncerCore&, SyncerEffects&)>& event) {
    SyncerEffects fx;
    event(*shards[s].core, fx);
    const uint64_t link = shards[s].link;
    const auto deliver = [this, s, link](uint32_t m, Message msg) {
      const double delay = latency() + (held_back ? held_back(m, msg) : 0.0);
      at_time(now + delay, [this, s, m, link, msg = std::move(msg)]() mutable {
        if (!shards[s].up || shards[s].link != link) return;
        in_session(m, [&](LearnerSession& session, LearnerEffects& f) { session.on_message(s, std::move(msg), now, f); });
      });
    };
    for (auto& send : fx.sends) deliver(send.learner, std::move(send.message));
    for (auto& msg : fx.to_all)
      for (uint32_t m = 0; m < kLearners; ++m)
        if (shards[s].core->learners()[m].connected) deliver(m, msg);
    if (!shards[s].finished && shards[s].core->flushing() && shards[s].core->flushed()) {  // the actor's finish()
      shards[s].finished = true;
      shards[s].core->on_finished(at(now));
      for (uint32_t m = 0; m < kLearners; ++m)
        if (shards[s].core->learners()[m].connected) deliver(m, Done{"shard " + std::to_string(s) + " is done"});
    }
    for (const auto& t : fx.timers)
      at_time(now + std::max(0.0, t.seconds), [this, s, link, t] {
        if (!shards[s].up || shards[s].link != link) return;
        to_core(s, [&](SyncerCore& c, SyncerEffects& f) { c.on_timer(t, at(now), f); });
      });
  }
  // Shard s is cut off: what is in flight is lost, and each side sees the other go.
  void cut(uint32_t s) {
    if (!shards[s].up) return;
    for (uint32_t m = 0; m < kLearners; ++m)
      to_core(s, [&](SyncerCore& c, SyncerEffects& fx) { c.on_learner_down(m, at(now), fx); });
    shards[s].up = false;
    ++shards[s].link;
    for (uint32_t m = 0; m < kLearners; ++m)
      in_session(m, [&](LearnerSession& session, LearnerEffects& fx) { session.on_shard_lost(s, "cut off", now, fx); });
  }
  // Back: the same core (a link that healed), or a new one (a restart without checkpoints).
  void back(uint32_t s, bool restarted) {
    if (restarted) shards[s].core = make_core(s);
    shards[s].up = true;
  }

  // ---- invariants

  void check() {
    for (uint32_t m = 0; m < kLearners; ++m) {
      Learner& l = learners[m];
      if (!l.session) continue;
      for (uint32_t p = 0; p < l.versions.size(); ++p) {
        const uint64_t v = l.core->version(p);
        if (v < l.versions[p])
          failures.push_back("learner " + std::to_string(m) + " went back on fragment " + std::to_string(p) +
                             ": " + std::to_string(l.versions[p]) + " -> " + std::to_string(v));
        l.versions[p] = v;
      }
    }
    // Step time merged (each round's share of its fragment) never exceeds
    // the step time trained: no step's progress is counted twice.
    double merged = 0.0;
    for (const auto& s : shards) merged += s.core->stats().good_seconds;
    if (merged > trained_seconds * (1.0 + 1e-9) + 1e-9)
      failures.push_back("merged " + std::to_string(merged) + " s of steps, trained " +
                         std::to_string(trained_seconds));
    if (pushes_to_wrong_shard > 0) failures.push_back("a push went to a shard that does not own its fragment");
  }
  uint64_t rounds() const {
    uint64_t n = 0;
    for (const auto& s : shards) n += s.core->stats().rounds;
    return n;
  }
  void require_no_failures() {
    for (const auto& f : failures) BOOST_ERROR(f);
    BOOST_REQUIRE(failures.empty());
  }
};

BOOST_AUTO_TEST_SUITE(learner_session_test)

BOOST_AUTO_TEST_CASE(a_learner_trains_only_once_every_shard_welcomed_it) {
  World w;
  w.shards[1].up = false;  // shard 1 not there yet
  w.start(0);
  w.run_until(5.0);
  BOOST_CHECK(w.learners[0].session->welcomed_by(0));
  BOOST_CHECK(!w.learners[0].session->all_welcomed());
  BOOST_CHECK_EQUAL(w.learners[0].core->steps(), 0u);
  w.shards[1].up = true;  // it comes up: the next lookup registers
  w.run_until(10.0);
  BOOST_CHECK(w.learners[0].session->all_welcomed());
  BOOST_CHECK_GT(w.learners[0].core->steps(), 0u);
  BOOST_CHECK_EQUAL(w.steps_before_welcome, 0u);
  w.require_no_failures();
}

BOOST_AUTO_TEST_CASE(learners_train_and_rounds_merge_on_both_shards) {
  World w;
  for (uint32_t m = 0; m < kLearners; ++m) w.start(m);
  w.run_until(60.0);
  BOOST_CHECK_GT(w.shards[0].core->stats().rounds, 0u);
  BOOST_CHECK_GT(w.shards[1].core->stats().rounds, 0u);
  for (uint32_t m = 0; m < kLearners; ++m)
    for (uint32_t p = 0; p < 4; ++p) BOOST_CHECK_GT(w.learners[m].core->version(p), 0u);
  BOOST_CHECK_GT(w.pushes, 0u);
  w.require_no_failures();
}

// Over a corrupting link the syncer may refuse every Progress and many
// messages may not decode: a learner logs each kind once per interval, and
// the next line says how many it left out.
BOOST_AUTO_TEST_CASE(refusals_are_logged_once_per_interval_with_a_count) {
  World w;
  w.shards[0].up = w.shards[1].up = false;  // no welcome: every refusal is handled at once
  w.start(0);
  LearnerSession& s = *w.learners[0].session;
  auto refused_lines = [](const LearnerEffects& fx) {
    std::vector<std::string> lines;
    for (const auto& log : fx.logs)
      if (log.text.find("refused (malformed)") != std::string::npos) lines.push_back(log.text);
    return lines;
  };
  LearnerEffects burst;
  for (int i = 0; i < 1000; ++i)
    s.on_message(0, Reject{RejectReason::kMalformed, kNoFragment, "checksum mismatch"}, w.now + 0.001 * i, burst);
  BOOST_CHECK_EQUAL(refused_lines(burst).size(), 1u);
  LearnerEffects later;
  s.on_message(0, Reject{RejectReason::kMalformed, kNoFragment, "checksum mismatch"},
               w.now + LearnerSession::kRepeatLogSeconds + 1.0, later);
  const auto lines = refused_lines(later);
  BOOST_REQUIRE_EQUAL(lines.size(), 1u);
  BOOST_CHECK_MESSAGE(lines.front().find("999 more") != std::string::npos, lines.front());
  // Messages that do not decode, likewise, counted apart from the refusals.
  LearnerEffects garbled;
  for (int i = 0; i < 500; ++i)
    s.on_malformed(0, Status::corruption("checksum mismatch"), w.now + 20.0 + 0.001 * i, garbled);
  s.on_malformed(0, Status::corruption("checksum mismatch"), w.now + 40.0, garbled);
  BOOST_REQUIRE_EQUAL(garbled.logs.size(), 2u);
  BOOST_CHECK(garbled.logs[0].text.find("dropped a malformed message from syncer shard 0") != std::string::npos);
  BOOST_CHECK_MESSAGE(garbled.logs[1].text.find("499 more") != std::string::npos, garbled.logs[1].text);
}

// A pull that arrives during a step is answered at its boundary; one whose
// round closed meanwhile (a broadcast of its fragment followed) is dropped.
BOOST_AUTO_TEST_CASE(a_pull_during_a_step_waits_for_the_boundary_and_a_closed_one_is_dropped) {
  World w;
  w.start(0);
  w.run_until(0.5);  // welcomed by both, first step under way
  LearnerSession& s = *w.learners[0].session;
  BOOST_REQUIRE(s.computing());
  LearnerEffects fx;
  s.on_message(0, Pull{0, 7, false}, w.now, fx);
  s.on_message(1, Pull{1, 8, false}, w.now, fx);
  BOOST_CHECK(fx.sends.empty());  // the step is under way
  Broadcast closes{};
  closes.fragment = 1;
  closes.version = 0;  // not newer: nothing adopted, but the round it answers has closed
  s.on_message(1, closes, w.now, fx);
  BOOST_CHECK(fx.sends.empty());
  s.on_step_done(w.learners[0].core->step(), w.now + 1.0, fx, 1.0);
  std::vector<uint64_t> rounds;
  for (const auto& send : fx.sends)
    if (const auto* p = std::get_if<Push>(&send.message)) {
      BOOST_CHECK_EQUAL(send.shard, shard_of(p->fragment, kShards));
      if (p->round != 0) rounds.push_back(p->round);
    }
  BOOST_CHECK_EQUAL(rounds.size(), 1u);
  BOOST_CHECK_EQUAL(rounds.front(), 7u);  // fragment 0's pull answered; fragment 1's dropped
}

// Broadcasts that overtake one another are held and adopted in order:
// versions never go back, and the learner trains on.
// After a reconnect the syncer may pull before it welcomes (a welcome waits
// for a peer's moments): the learner answers the pull over the new link, and
// the welcome at the version it holds must not make it push that fragment
// again from the same base (the syncer would refuse the second push).
BOOST_AUTO_TEST_CASE(a_pull_answered_before_a_same_version_welcome_is_not_pushed_again) {
  Topology t = world_topology();
  t.syncer.shards = 1;
  auto job = Job::load(t, "");
  BOOST_REQUIRE(job.ok());
  auto core = ModelReplica::create(0, 1, *job);
  BOOST_REQUIRE(core.ok());
  std::shared_ptr<ModelReplica> replica = std::move(*core);
  LearnerSession session(replica, {}, 0.0);
  double now = 0.0;
  uint64_t pushes_of_3 = 0;  // fragment 3 falls due last: after H = 4 steps at version 0
  const auto count = [&](const LearnerEffects& fx) {
    for (const auto& send : fx.sends)
      if (const auto* p = std::get_if<Push>(&send.message); p && p->fragment == 3) ++pushes_of_3;
  };
  Welcome welcome{0, 1, t, {}, std::nullopt, {}};
  for (uint32_t p = 0; p < 4; ++p) welcome.fragments.push_back({p, 0, Payload{}});  // the seed's values
  LearnerEffects fx;
  session.lookup({true}, now, fx);
  session.on_message(0, welcome, now, fx);
  BOOST_REQUIRE(fx.start_step);
  const auto step = [&] {
    LearnerEffects f;
    now += 1.0;
    session.on_step_done(replica->step(), now, f, 1.0);
    count(f);
    return f.start_step;
  };
  BOOST_REQUIRE(step());
  // The link goes and comes back during step 2: a Register, then the pull and the welcome arrive.
  LearnerEffects lost;
  session.on_shard_lost(0, "cut off", now, lost);
  session.lookup({true}, now, lost);
  session.on_message(0, Pull{3, 7, false, 0}, now, lost);
  session.on_message(0, welcome, now, lost);
  count(lost);
  for (int s = 0; s < 6; ++s) BOOST_REQUIRE(step());
  BOOST_TEST(replica->version(3) == 0u);
  BOOST_TEST(pushes_of_3 == 1u);  // the answer to the pull, not a second push
}

BOOST_AUTO_TEST_CASE(broadcasts_out_of_order_are_adopted_in_order) {
  World w;
  // Learner 0 gets every odd version of fragment 0 six seconds late: the next one overtakes it.
  w.held_back = [](uint32_t m, const Message& msg) {
    const auto* b = std::get_if<Broadcast>(&msg);
    return m == 0 && b && b->fragment == 0 && b->version % 2 == 1 ? 6.0 : 0.0;
  };
  for (uint32_t m = 0; m < kLearners; ++m) w.start(m);
  w.run_until(120.0);
  BOOST_CHECK_GT(w.learners[0].core->broadcasts_held(), 0u);
  BOOST_CHECK_GT(w.learners[0].core->version(0), 5u);
  BOOST_CHECK_GT(w.learners[0].core->steps(), 60u);
  w.require_no_failures();  // among them: no version went back
}

BOOST_AUTO_TEST_CASE(a_shard_lost_and_back_resumes_its_fragments) {
  World w;
  for (uint32_t m = 0; m < kLearners; ++m) w.start(m);
  w.run_until(30.0);
  const uint64_t before = w.shards[1].core->stats().rounds;
  w.cut(1);
  w.run_until(40.0);
  for (uint32_t m = 0; m < kLearners; ++m) BOOST_CHECK(!w.learners[m].session->welcomed_by(1));
  w.back(1, false);
  w.run_until(80.0);
  for (uint32_t m = 0; m < kLearners; ++m) BOOST_CHECK(w.learners[m].session->all_welcomed());
  BOOST_CHECK_GT(w.shards[1].core->stats().rounds, before);
  w.require_no_failures();
}

// A shard restarted without checkpoints recovers its fragments from the
// learners' bases (their Registers carry them) and merges on from there.
BOOST_AUTO_TEST_CASE(a_restarted_shard_recovers_from_the_learners_bases) {
  World w;
  for (uint32_t m = 0; m < kLearners; ++m) w.start(m);
  w.run_until(30.0);
  uint64_t version = 0;
  for (uint32_t p = 1; p < 4; p += 2) version = std::max(version, w.learners[0].core->version(p));
  BOOST_REQUIRE_GT(version, 0u);
  w.cut(1);
  w.back(1, true);
  w.run_until(80.0);
  BOOST_CHECK_GT(w.shards[1].core->stats().recovered_fragments, 0u);
  BOOST_CHECK_GT(w.shards[1].core->stats().rounds, 0u);
  for (uint32_t m = 0; m < kLearners; ++m) BOOST_CHECK(w.learners[m].session->all_welcomed());
  w.require_no_failures();  // and no learner went back to an older version
}

// The run ends once, everywhere: shard 0 ends it (its budget) while shard 1
// is cut off; the learners pass its Done on to shard 1 once it is back, a
// restart that knows nothing of the end, which ends the run too, and every
// learner ends in order after Done from both.
BOOST_AUTO_TEST_CASE(a_shard_back_after_the_end_learns_it_from_the_learners) {
  World w;
  for (uint32_t m = 0; m < kLearners; ++m) w.start(m);
  w.run_until(20.0);
  w.cut(1);
  w.to_core(0, [&](SyncerCore& c, SyncerEffects& fx) { c.begin_flush(at(w.now), fx); });
  w.run_until(22.0);
  BOOST_REQUIRE(w.shards[0].finished);
  BOOST_CHECK(!w.shards[1].finished);
  for (uint32_t m = 0; m < kLearners; ++m) BOOST_REQUIRE(w.learners[m].session);  // waiting for shard 1
  w.back(1, true);
  w.run_until(40.0);
  BOOST_CHECK(w.shards[1].finished);
  BOOST_CHECK_GT(w.shards[1].told_over, 0u);
  BOOST_CHECK_EQUAL(w.shards[0].told_over, 0u);  // nobody tells the shard that ended it
  for (uint32_t m = 0; m < kLearners; ++m) {
    BOOST_CHECK(!w.learners[m].session);
    BOOST_CHECK(w.learners[m].end == LearnerEffects::End::kStopped);
  }
  w.require_no_failures();
}

// Leaving with progress not yet merged: it goes as unasked pushes, then
// Leave; Done from both shards ends the learner in order.
BOOST_AUTO_TEST_CASE(leaving_hands_over_unmerged_progress_then_stops_in_order) {
  World w;
  for (uint32_t m = 0; m < kLearners; ++m) w.start(m);
  w.run_until(21.5);
  const auto progress = w.learners[2].core->progress();
  uint64_t unmerged = 0;
  for (const auto& f : progress.fragments) unmerged += f.steps;
  BOOST_REQUIRE_GT(unmerged, 0u);
  const uint64_t pushes_before = w.pushes;
  w.in_session(2, [&](LearnerSession& s, LearnerEffects& fx) { s.leave("test", 30.0, w.now, fx); });
  BOOST_CHECK(w.learners[2].session && w.learners[2].session->leaving());
  w.run_until(60.0);
  BOOST_CHECK_GT(w.pushes, pushes_before);
  BOOST_CHECK(!w.learners[2].session);  // ended...
  BOOST_CHECK(w.learners[2].end == LearnerEffects::End::kStopped);  // ...in order, not restarted
  BOOST_CHECK_GT(w.learners[0].core->steps(), 25u);  // the others trained on
  w.require_no_failures();
}

// A thousand random events: links of random latency, learners killed and
// restarted, leaving and rejoining, shards cut off, healed and restarted.
// After every event: adopted versions never go back, no step's time is
// merged twice, no push goes to a shard that does not own its fragment.
BOOST_AUTO_TEST_CASE(a_thousand_random_events_keep_the_invariants) {
  for (uint64_t seed : {1, 2, 3}) {
    World w;
    w.rng = Rng(seed);
    w.max_latency = 1.5;
    for (uint32_t m = 0; m < kLearners; ++m) w.start(m);
    Rng chaos(seed * 1000 + 1);
    for (int i = 0; i < 1000; ++i) {
      const double u = chaos.uniform();
      const auto m = static_cast<uint32_t>(chaos.uniform() * kLearners) % kLearners;
      const auto s = static_cast<uint32_t>(chaos.uniform() * kShards) % kShards;
      if (u < 0.90) {
        if (!w.step()) w.run_until(w.now + 1.0);
      } else if (u < 0.93) {
        w.kill(m);
        w.start(m);  // its supervisor starts a new incarnation
      } else if (u < 0.95) {
        if (w.learners[m].session)
          w.in_session(m, [&](LearnerSession& ls, LearnerEffects& fx) { ls.leave("random", 5.0, w.now, fx); });
        else
          w.start(m);  // a learner that left comes back
      } else if (u < 0.97) {
        w.cut(s);
      } else if (u < 0.99) {
        w.back(s, false);
      } else {
        w.cut(s);
        w.back(s, true);
      }
      w.check();
    }
    // Then calm: every shard up, every learner back, and training resumes.
    for (uint32_t s = 0; s < kShards; ++s) w.back(s, false);
    for (uint32_t m = 0; m < kLearners; ++m)
      if (!w.learners[m].session) w.start(m);
    const uint64_t rounds = w.rounds();
    w.run_until(w.now + 120.0);
    BOOST_TEST_CONTEXT("seed " << seed) {
      BOOST_CHECK_GT(w.rounds(), rounds);
      BOOST_CHECK_GT(w.pushes, 0u);
      BOOST_CHECK_EQUAL(w.pushes_to_wrong_shard, 0u);
      w.require_no_failures();
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace atl
