// SyncerCore without CAF: admission as a decision, each mode's round
// protocol, one learner record. Time is an argument, so every test runs in
// virtual time (`at(s)`), message by message.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "atoll/syncer_core.h"
#include "test_support.h"

namespace atl {
namespace {

using testing::at;
using testing::kStart;

// A core over testing::tiny_mlp_topology (two learners, one fragment) with
// H = 4 and fp32 codecs, and what its learners would say.
using Core = testing::SyncerCoreDriver;

template <class T>
const T* sent_to(const SyncerEffects& fx, uint32_t learner) {
  for (const auto& s : fx.sends)
    if (s.learner == learner && std::holds_alternative<T>(s.message)) return &std::get<T>(s.message);
  return nullptr;
}

const SyncerEffects::Timer* timer(const SyncerEffects& fx, SyncerEffects::TimerKind kind) {
  for (const auto& t : fx.timers)
    if (t.kind == kind) return &t;
  return nullptr;
}

bool broadcasts(const SyncerEffects& fx) {
  for (const auto& m : fx.to_all)
    if (std::holds_alternative<Broadcast>(m)) return true;
  return false;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(syncer_core_test)

BOOST_AUTO_TEST_CASE(admission_is_a_decision_on_the_learner_records) {
  using V = Admission::Verdict;
  Core c(testing::tiny_mlp_topology());
  const Sender first{1, 10}, same_process{1, 11}, other_process{2, 20};
  BOOST_CHECK(c.core->admit(c.reg(0, 1), first).verdict == V::kAccept);
  BOOST_CHECK(c.core->admit(c.reg(7, 1), first).reason == RejectReason::kUnknownLearner);
  Register other_model = c.reg(0, 1);
  other_model.fingerprint ^= 1;
  BOOST_CHECK(c.core->admit(other_model, first).reason == RejectReason::kFingerprintMismatch);

  SyncerEffects fx;
  BOOST_REQUIRE(c.core->on_register(c.reg(0, 1), first, at(0), fx).accepted());
  BOOST_CHECK(c.core->learners()[0].sender == first);
  // The bound sender again: a resync. An older or equal incarnation from
  // elsewhere in its process: refused while it is connected.
  BOOST_CHECK(c.core->admit(c.reg(0, 1), first).verdict == V::kResync);
  BOOST_CHECK(c.core->admit(c.reg(0, 1), same_process).reason == RejectReason::kDuplicateLearner);
  // A new incarnation in the same process replaces it (a supervisor's restart).
  BOOST_CHECK(c.core->admit(c.reg(0, 2), same_process).verdict == V::kAccept);
  // Another process may not take an id whose sender is alive, whatever its incarnation ...
  const Admission taken = c.core->admit(c.reg(0, 5), other_process);
  BOOST_CHECK(taken.reason == RejectReason::kDuplicateLearner);
  BOOST_CHECK(taken.detail.find("already connected from another process") != std::string::npos);
  // ... and once it is down, a replay of its incarnation from elsewhere is refused, a newer one is not.
  c.core->on_learner_down(0, at(1), fx);
  BOOST_CHECK(c.core->learners()[0].sender.actor == 0);
  const Admission replay = c.core->admit(c.reg(0, 1), other_process);
  BOOST_CHECK(replay.reason == RejectReason::kDuplicateLearner);
  BOOST_CHECK(replay.detail.find("registered from another process") != std::string::npos);
  BOOST_CHECK(c.core->admit(c.reg(0, 2), other_process).verdict == V::kAccept);

  // The token comes before everything else.
  c.core->require_token("a cluster token of enough length");
  BOOST_CHECK(c.core->admit(c.reg(9, 1), first).reason == RejectReason::kBadToken);
}

// Learner 0 fails and registers again at 1.2 s while learner 1 trains: its
// welcome waits for learner 1's moments. Returns the effects of the register.
static SyncerEffects restart_waiting_for_moments(Core& c) {
  c.must_join(0);
  c.must_join(1);
  c.progress(1, 3, 0.5);
  SyncerEffects fx;
  c.core->on_learner_down(0, at(1.0), fx);
  fx = {};
  BOOST_CHECK(c.core->on_register(c.reg(0, 2), Sender{1, 30}, at(1.2), fx).accepted());
  BOOST_REQUIRE(sent_to<MomentsPull>(fx, 1));
  return fx;
}

BOOST_AUTO_TEST_CASE(a_restarted_learner_waits_for_a_peers_moments_and_its_retries_wait_too) {
  Core c(testing::tiny_mlp_topology());
  SyncerEffects fx = restart_waiting_for_moments(c);
  const uint64_t request = sent_to<MomentsPull>(fx, 1)->request;
  BOOST_CHECK(!sent_to<Welcome>(fx, 0));
  // The wait allows the peer two of its steps and its moments' bytes at 100 MB/s.
  BOOST_REQUIRE(timer(fx, SyncerEffects::TimerKind::kMoments));
  BOOST_CHECK_CLOSE(timer(fx, SyncerEffects::TimerKind::kMoments)->seconds,
                    2.0 + 2.0 * c.core->learners()[1].step_seconds + 8.0 * static_cast<double>(c.n) / 1e8, 1e-9);
  BOOST_CHECK_CLOSE(SyncerCore::moments_wait_seconds(1.9, 86'235'648), 2.0 + 3.8 + 6.898851840, 1e-6);
  BOOST_CHECK_CLOSE(SyncerCore::moments_wait_seconds(0.0, 10), 2.0, 1e-3);
  BOOST_CHECK_EQUAL(SyncerCore::moments_wait_seconds(100.0, 10), 60.0);
  BOOST_CHECK_EQUAL(c.core->learners()[0].moments_request, request);
  // Its register retry while the peer answers is neither refused nor welcomed.
  BOOST_CHECK(c.core->admit(c.reg(0, 2), Sender{1, 30}).verdict == Admission::Verdict::kWait);
  fx = {};
  const std::vector<float> m(c.n, 0.5f);
  c.core->on_moments(1, Moments{request, OptimizerState{3, encode_payload(Codec::kBf16, 0, m),
                                                               encode_payload(Codec::kBf16, 0, m)}},
                     at(1.3), fx);
  const Welcome* w = sent_to<Welcome>(fx, 0);
  BOOST_REQUIRE(w);
  BOOST_CHECK(w->moments.has_value());
  BOOST_CHECK_EQUAL(w->incarnation, 2u);
  BOOST_CHECK_EQUAL(c.core->learners()[0].moments_request, 0u);
  BOOST_REQUIRE_EQUAL(c.core->stats().recovery_seconds.size(), 1u);
  BOOST_CHECK_CLOSE(c.core->stats().recovery_seconds[0], 0.3, 1e-6);
}

BOOST_AUTO_TEST_CASE(a_welcome_waiting_for_a_peers_moments_goes_without_them_when_the_peer_goes) {
  Core c(testing::tiny_mlp_topology());
  restart_waiting_for_moments(c);
  SyncerEffects fx;
  c.core->on_learner_down(1, at(1.4), fx);  // the peer asked dies: it will never answer
  const Welcome* w = sent_to<Welcome>(fx, 0);
  BOOST_REQUIRE(w);
  BOOST_CHECK(!w->moments.has_value());
  BOOST_CHECK_EQUAL(c.core->learners()[0].moments_request, 0u);
}

BOOST_AUTO_TEST_CASE(decoupled_due_pull_quorum_grace_merge_in_virtual_time) {
  Topology t = testing::tiny_mlp_topology();
  t.outer.quorum = 1;
  Core c(t);
  c.must_join(0);
  c.must_join(1);
  c.progress(1, 1, 0.1, 0.2);  // learner 1 steps in 0.2 s: the grace window is sized from it
  // Learner 0 did H = 4 steps: due; both are pulled.
  SyncerEffects fx = c.progress(0, 4, 0.4);
  BOOST_REQUIRE(sent_to<Pull>(fx, 0));
  BOOST_REQUIRE(sent_to<Pull>(fx, 1));
  const uint64_t round = sent_to<Pull>(fx, 0)->round;
  BOOST_REQUIRE(timer(fx, SyncerEffects::TimerKind::kQuorum));
  // Learner 0 answers: quorum (K = 1); the grace window waits for learner 1:
  // gamma * (tau * T - to_quorum) = 1 * (2 * 0.2 - 0.1) = 0.3 s.
  fx = c.push(0, round, 4, 0.1f, 0.5);
  BOOST_REQUIRE(timer(fx, SyncerEffects::TimerKind::kGrace));
  const SyncerEffects::Timer grace = *timer(fx, SyncerEffects::TimerKind::kGrace);
  BOOST_CHECK_CLOSE(grace.seconds, 0.3, 1e-6);
  BOOST_CHECK(!broadcasts(fx));
  // Learner 1 answers inside the window: the round closes at once with both.
  fx = c.push(1, round, 2, 0.4f, 0.6);
  BOOST_REQUIRE(broadcasts(fx));
  BOOST_CHECK_EQUAL(c.core->version(0), 1u);
  BOOST_CHECK_EQUAL(c.core->stats().rounds, 1u);
  BOOST_CHECK_EQUAL(c.core->stats().merged_pushes, 2u);
  BOOST_CHECK_EQUAL(c.core->learners()[0].merged, 1u);
  BOOST_CHECK_EQUAL(c.core->learners()[1].merged, 1u);
  BOOST_CHECK_CLOSE(c.core->stats().round_seconds_mean(), 0.2, 1e-6);  // pulled at 0.4, broadcast at 0.6
  // The grace timer fires later: the round it was for is gone, nothing happens.
  fx = {};
  c.core->on_timer(grace, at(0.8), fx);
  BOOST_CHECK(fx.empty());
  // The broadcast counts as adopted once both learners report version 1.
  c.progress(0, 1, 0.7);
  BOOST_CHECK_EQUAL(c.core->stats().adopted_broadcasts, 0u);
  c.progress(1, 1, 0.9);
  BOOST_CHECK_EQUAL(c.core->stats().adopted_broadcasts, 1u);
  BOOST_CHECK_CLOSE(c.core->stats().adopted_seconds_max, 0.3, 1e-6);  // 0.6 to 0.9
}

// The grace window also covers the time a learner's answers take over its
// link: learner 1 answered its last pull 1.5 s after it went out (a slow
// link), so the next round waits for it beyond its step-sized window.
BOOST_AUTO_TEST_CASE(decoupled_grace_waits_as_long_as_answers_lately_took) {
  Topology t = testing::tiny_mlp_topology();
  t.outer.quorum = 1;
  Core c(t);
  c.must_join(0);
  c.must_join(1);
  c.progress(1, 1, 0.1, 0.2);
  SyncerEffects fx = c.progress(0, 4, 0.4);
  const uint64_t first = sent_to<Pull>(fx, 0)->round;
  fx = c.push(0, first, 4, 0.1f, 0.5);
  const SyncerEffects::Timer grace = *timer(fx, SyncerEffects::TimerKind::kGrace);
  BOOST_CHECK_CLOSE(grace.seconds, 0.3, 1e-6);  // no answer timed yet: the steps' window
  fx = {};
  c.core->on_timer(grace, at(0.8), fx);  // closes without learner 1
  BOOST_REQUIRE(broadcasts(fx));
  c.push(1, first, 2, 0.4f, 1.9);  // its answer, 1.5 s after the pull: late
  BOOST_CHECK_EQUAL(c.core->stats().late, 1u);
  c.progress(1, 1, 2.0, 0.2);
  fx = c.progress(0, 4, 2.1);  // the next round
  const uint64_t second = sent_to<Pull>(fx, 0)->round;
  fx = c.push(0, second, 4, 0.1f, 2.2);
  BOOST_REQUIRE(timer(fx, SyncerEffects::TimerKind::kGrace));
  BOOST_CHECK_CLOSE(timer(fx, SyncerEffects::TimerKind::kGrace)->seconds, 1.5 - 0.1, 1e-6);
}

// A learner that reports an older version than the current one for longer
// than a broadcast takes to reach it (4 of its steps, or twice its answer
// time) lost one: it gets the current version whole, it alone, with what was
// merged of its progress, and again if that is lost too, after twice as long
// (still behind after a repair, it is more likely behind a queue).
BOOST_AUTO_TEST_CASE(decoupled_a_learner_left_on_an_older_version_gets_it_again_whole) {
  Topology t = testing::tiny_mlp_topology();
  t.outer.quorum = 1;
  Core c(t);
  c.must_join(0);
  c.must_join(1);
  c.progress(1, 1, 0.1, 0.2);
  SyncerEffects fx = c.progress(0, 4, 0.4);
  const uint64_t round = sent_to<Pull>(fx, 0)->round;
  c.push(0, round, 4, 0.1f, 0.5);
  BOOST_REQUIRE(broadcasts(c.push(1, round, 2, 0.4f, 0.6)));  // learner 1 answered in 0.2 s
  BOOST_REQUIRE_EQUAL(c.core->version(0), 1u);

  // Learner 1 stays on version 0: the wait is max(4 x 0.1 s, 2 x 0.2 s) = 0.4 s.
  const auto behind = [&](double s) {
    SyncerEffects out;
    c.core->on_progress(Progress{1, 1, 3, 24, 0.1, {{0, 3}}, 1.0f}, at(s), out);
    return out;
  };
  BOOST_CHECK(!sent_to<Broadcast>(behind(0.7), 1));
  BOOST_CHECK(!sent_to<Broadcast>(behind(1.0), 1));
  BOOST_CHECK(!sent_to<Broadcast>(c.progress(0, 1, 1.05), 0));  // learner 0 holds version 1
  fx = behind(1.2);
  const Broadcast* repair = sent_to<Broadcast>(fx, 1);
  BOOST_REQUIRE(repair);
  BOOST_CHECK(repair->repair);
  BOOST_CHECK(!repair->delta);
  BOOST_CHECK_EQUAL(repair->version, 1u);
  BOOST_CHECK(repair->merged == std::vector<uint32_t>{1});
  BOOST_CHECK(repair->merged_through == std::vector<uint64_t>{c.pushed_through[1]});
  BOOST_CHECK(fx.to_all.empty());
  std::vector<float> values(repair->values.count);
  BOOST_REQUIRE(decode_payload(repair->values, values).ok());
  BOOST_CHECK(values == c.core->parameters());  // one fragment: the whole model
  BOOST_CHECK_EQUAL(c.core->stats().repairs, 1u);
  BOOST_CHECK(!sent_to<Broadcast>(behind(1.3), 1));  // that one may still be on its way
  BOOST_CHECK(!sent_to<Broadcast>(behind(1.7), 1));  // the wait doubled: 0.8 s from the repair
  BOOST_CHECK(sent_to<Broadcast>(behind(2.1), 1));   // lost too: again
  BOOST_CHECK_EQUAL(c.core->stats().repairs, 2u);
  // Caught up 1.5 s after it first fell behind: its broadcasts take that
  // long to be adopted, so the wait is now 2 x 1.5 s, and no longer doubled.
  c.progress(1, 1, 2.2);
  BOOST_CHECK(!sent_to<Broadcast>(behind(2.9), 1));  // behind again from here: a fresh wait
  BOOST_CHECK(!sent_to<Broadcast>(behind(5.8), 1));
  BOOST_CHECK(sent_to<Broadcast>(behind(6.0), 1));
  BOOST_CHECK_EQUAL(c.core->stats().repairs, 3u);
}

BOOST_AUTO_TEST_CASE(decoupled_a_dead_learner_leaves_the_round_it_was_pulled_for) {
  Topology t = testing::tiny_mlp_topology();
  t.outer.quorum = 2;
  Core c(t);
  c.must_join(0);
  c.must_join(1);
  c.progress(1, 4, 0.3);
  SyncerEffects fx = c.progress(0, 4, 0.4);
  BOOST_REQUIRE(sent_to<Pull>(fx, 0));
  const uint64_t round = sent_to<Pull>(fx, 0)->round;
  fx = c.push(0, round, 4, 0.1f, 0.5);
  BOOST_CHECK(!broadcasts(fx));  // K = 2: waits for learner 1
  fx = {};
  c.core->on_learner_down(1, at(0.6), fx);  // K falls to the one live learner: the round closes
  BOOST_CHECK(broadcasts(fx));
  BOOST_CHECK_EQUAL(c.core->version(0), 1u);
}

BOOST_AUTO_TEST_CASE(dp_steps_when_every_learner_sent_its_gradient_also_a_dead_one) {
  Core c(testing::tiny_mlp_topology(Mode::kDp));
  c.must_join(0);
  c.must_join(1);
  SyncerEffects fx = c.push(0, 0, 1, 0.5f, 0.1);
  BOOST_CHECK(!broadcasts(fx));
  BOOST_CHECK_EQUAL(c.core->version(0), 0u);
  fx = c.push(1, 0, 1, 0.5f, 0.2);
  BOOST_CHECK(broadcasts(fx));
  BOOST_CHECK_EQUAL(c.core->version(0), 1u);
  // Learner 1 dies: dp waits for it however long it takes.
  fx = {};
  c.core->on_learner_down(1, at(0.3), fx);
  BOOST_CHECK(!timer(fx, SyncerEffects::TimerKind::kReconfigure));
  fx = c.push(0, 0, 1, 0.5f, 0.4);
  BOOST_CHECK(!broadcasts(fx));
  BOOST_CHECK_EQUAL(c.core->version(0), 1u);
}

BOOST_AUTO_TEST_CASE(elastic_dp_drops_a_dead_learner_after_the_reconfiguration_delay) {
  Topology t = testing::tiny_mlp_topology(Mode::kElasticDp);
  t.outer.reconfigure_seconds = 2.0;
  Core c(t);
  c.must_join(0);
  c.must_join(1);
  SyncerEffects fx;
  c.core->on_learner_down(1, at(1.0), fx);
  BOOST_REQUIRE(timer(fx, SyncerEffects::TimerKind::kReconfigure));
  const SyncerEffects::Timer reconfigure = *timer(fx, SyncerEffects::TimerKind::kReconfigure);
  BOOST_CHECK_EQUAL(reconfigure.seconds, 2.0);
  fx = c.push(0, 0, 1, 0.5f, 1.5);
  BOOST_CHECK(!broadcasts(fx));  // still in the group: the step waits
  fx = {};
  c.core->on_timer(reconfigure, at(3.0), fx);
  BOOST_CHECK(c.core->learners()[1].dropped);
  BOOST_CHECK(broadcasts(fx));  // the group is learner 0 alone: its gradient makes the step
  BOOST_CHECK_EQUAL(c.core->version(0), 1u);
  // Back: in the group again, its record no longer dropped.
  c.must_join(1, 4.0, 2);
  BOOST_CHECK(!c.core->learners()[1].dropped);
  fx = c.push(0, 0, 1, 0.5f, 4.1);
  BOOST_CHECK(!broadcasts(fx));
}

BOOST_AUTO_TEST_CASE(a_learners_evaluation_is_kept_when_it_names_versions_the_syncer_made) {
  Core c(testing::tiny_mlp_topology());
  c.must_join(0);
  c.must_join(1);
  SyncerEffects fx;
  c.core->on_evaluation(Evaluation{0, 1, {0}, 1.5, 2.16, std::nan(""), 512}, at(1.0), fx);
  BOOST_REQUIRE_EQUAL(c.core->stats().evaluations.size(), 1u);
  const auto& e = c.core->stats().evaluations.back();
  BOOST_CHECK_EQUAL(e.learner, 0u);
  BOOST_CHECK_CLOSE(e.seconds, 1.0, 1e-9);
  BOOST_CHECK_CLOSE(e.loss, 1.5, 1e-9);
  BOOST_CHECK(std::isnan(e.accuracy));
  BOOST_CHECK(sent_to<Reject>(fx, 0) == nullptr);

  // Refused, and not kept: a version the syncer has not made, another fragment
  // count, a loss that is not a loss, nothing evaluated.
  const Evaluation bad[] = {{0, 1, {5}, 1.0, 1.0, 0.5, 10},   {0, 1, {0, 0}, 1.0, 1.0, 0.5, 10},
                            {0, 1, {0}, -1.0, 1.0, 0.5, 10},  {0, 1, {0}, std::nan(""), 1.0, 0.5, 10},
                            {0, 1, {0}, 1.0, INFINITY, 0.5, 10}, {0, 1, {0}, 1.0, 1.0, 1.5, 10},
                            {0, 1, {0}, 1.0, 1.0, 0.5, 0}};
  for (const auto& b : bad) {
    SyncerEffects refused;
    c.core->on_evaluation(b, at(2.0), refused);
    const Reject* r = sent_to<Reject>(refused, 0);
    BOOST_REQUIRE(r != nullptr);
    BOOST_CHECK(r->detail.starts_with("evaluation: "));
  }
  BOOST_CHECK_EQUAL(c.core->stats().evaluations.size(), 1u);
  // An old incarnation's last words are dropped without a word.
  SyncerEffects old;
  c.core->on_evaluation(Evaluation{1, 7, {0}, 1.0, 1.0, 0.5, 10}, at(3.0), old);
  BOOST_CHECK(old.empty());
}

BOOST_AUTO_TEST_CASE(the_end_waits_for_the_evaluators_figures_of_the_final_model) {
  Topology t = testing::tiny_mlp_topology();
  t.outer.final_flush = false;  // the model is final as soon as the end begins
  Core c(t);
  c.must_join(0);
  c.must_join(1);
  SyncerEffects fx;
  // Learner 0 evaluates during the run; learner 1 never does.
  c.core->on_evaluation(Evaluation{0, 1, {0}, 2.0, 2.9, std::nan(""), 64}, at(1.0), fx);
  BOOST_CHECK(c.core->final_evaluations_awaited().empty());  // not before the end
  BOOST_CHECK(!c.core->stats().evaluations.back().final);
  c.core->begin_flush(at(2.0), fx);
  BOOST_REQUIRE(c.core->flushed());
  BOOST_CHECK(c.core->final_evaluations_awaited() == std::vector<uint32_t>{0});
  // Its figure of the final versions ends the wait, and is marked final.
  c.core->on_evaluation(Evaluation{0, 1, {c.core->version(0)}, 1.5, 2.2, std::nan(""), 64}, at(2.5), fx);
  BOOST_CHECK(c.core->final_evaluations_awaited().empty());
  BOOST_CHECK(c.core->stats().evaluations.back().final);

  // A learner that goes is not waited for, and its leaving at the end is not a failure.
  Core d(t);
  d.must_join(0);
  d.core->on_evaluation(Evaluation{0, 1, {0}, 2.0, 2.9, std::nan(""), 64}, at(1.0), fx);
  d.core->begin_flush(at(2.0), fx);
  BOOST_CHECK(d.core->final_evaluations_awaited() == std::vector<uint32_t>{0});
  SyncerEffects down;
  d.core->on_learner_down(0, at(3.0), down);
  BOOST_CHECK(d.core->final_evaluations_awaited().empty());
  BOOST_CHECK(down.notes == std::vector<std::string>{"learner 0 left: the run is over"});
  BOOST_CHECK_EQUAL(d.core->learners()[0].failures, 0u);
}

BOOST_AUTO_TEST_CASE(a_learner_process_started_again_is_a_restart_with_its_reintegration) {
  // Across processes no supervisor sees a learner restart: the syncer counts
  // a new incarnation of a known id, from a sender in another process.
  Core c(testing::tiny_mlp_topology());
  const Sender remote{7, 70, true};
  SyncerEffects fx;
  BOOST_REQUIRE(c.core->on_register(c.reg(0, 111), remote, at(0), fx).accepted());
  c.must_join(1);
  const auto restarts = [](const SyncerEffects& e) {
    return std::count_if(e.events.begin(), e.events.end(),
                         [](const RunEvent& ev) { return std::holds_alternative<event::Restarted>(ev); });
  };
  BOOST_CHECK_EQUAL(restarts(fx), 0);  // its first start
  SyncerEffects down, again;
  c.core->on_learner_down(0, at(1.0), down);
  BOOST_REQUIRE(c.core->on_register(c.reg(0, 222), Sender{8, 80, true}, at(2.0), again).accepted());
  BOOST_CHECK_EQUAL(restarts(again), 1);
  const event::Reintegrated* back = nullptr;
  for (const auto& e : again.events)
    if (const auto* r = std::get_if<event::Reintegrated>(&e)) back = r;
  BOOST_REQUIRE(back != nullptr);
  BOOST_CHECK_EQUAL(back->learner, 0u);
  BOOST_CHECK(back->seconds >= 0.0 && back->seconds < 1e-6);  // welcomed at once (no peer had trained)
  // The same incarnation reconnecting (a partition) is no restart; nor is a
  // learner of this process, whose supervisor reports its restarts itself.
  SyncerEffects blip, local;
  c.core->on_learner_down(0, at(3.0), blip);
  BOOST_REQUIRE(c.core->on_register(c.reg(0, 222), Sender{8, 81, true}, at(4.0), blip).accepted());
  BOOST_CHECK_EQUAL(restarts(blip), 0);
  c.core->on_learner_down(1, at(5.0), local);
  BOOST_REQUIRE(c.core->on_register(c.reg(1, 2), Sender{1, 12}, at(6.0), local).accepted());
  BOOST_CHECK_EQUAL(restarts(local), 0);
}

BOOST_AUTO_TEST_CASE(a_learners_own_labels_replace_the_topologys_for_the_report) {
  Core c(testing::tiny_mlp_topology());
  Register r = c.reg(1, 1);
  r.speed = 0.4;
  r.batch_size = 64;
  SyncerEffects fx;
  BOOST_REQUIRE(c.core->on_register(r, Sender{1, 11}, at(0), fx).accepted());
  BOOST_CHECK_EQUAL(c.core->learners()[1].speed, 0.4);
  BOOST_CHECK_EQUAL(c.core->learners()[1].batch_size, 64u);
  BOOST_CHECK_EQUAL(c.core->learners()[0].speed, 0.0);  // not registered: the topology's
}

// A syncer restarted in a new process has no predecessor in memory: it goes
// on with the figures its checkpoint carries, and counts its seconds from the
// run's start, not its own.
BOOST_AUTO_TEST_CASE(a_syncer_restarted_in_a_new_process_goes_on_with_its_checkpoints_figures) {
  Topology t = testing::tiny_mlp_topology();
  t.outer.quorum = 1;
  Core c(t);
  c.must_join(0);
  c.must_join(1);
  const uint64_t round = sent_to<Pull>(c.progress(0, 4, 0.4), 0)->round;
  c.push(0, round, 4, 0.1f, 0.5);
  c.push(1, round, 2, 0.4f, 0.6);
  BOOST_REQUIRE_EQUAL(c.core->stats().merged_pushes, 2u);
  c.core->count_bytes(1000, 300);
  const int64_t wall_ms = 1'800'000'000'000;  // the wall clock at 0.9 s of the run
  CheckpointView view = c.core->checkpoint(wall_ms);
  view.figures = encode_figures(c.core->figures(at(0.9), wall_ms, 0.25));
  auto saved = decode_checkpoint(encode_checkpoint(view));  // through the file format
  BOOST_REQUIRE_MESSAGE(saved.ok(), saved.status().to_string());

  // 30 s later, in another process (its own clock starts at 500 s).
  auto next = SyncerCore::create(c.topology, at(500.0));
  BOOST_REQUIRE(next.ok());
  SyncerCore& core = **next;
  BOOST_REQUIRE(core.restore(*saved, at(500.0)).ok());
  auto figures = decode_figures(saved->figures);
  BOOST_REQUIRE_MESSAGE(figures.ok(), figures.status().to_string());
  BOOST_CHECK_EQUAL(figures->started_unix_ms, wall_ms - 900);
  core.continue_from(*figures, at(500.0), wall_ms + 30'000);
  BOOST_CHECK_CLOSE(core.elapsed(at(500.0)), 30.9, 1e-6);  // seconds since the run started
  BOOST_CHECK_EQUAL(core.stats().rounds, 1u);
  BOOST_CHECK_EQUAL(core.stats().merged_pushes, 2u);
  BOOST_CHECK_EQUAL(core.stats().bytes_received, 1000u);
  BOOST_CHECK_EQUAL(core.stats().bytes_sent, 300u);
  BOOST_CHECK_EQUAL(core.stats().round_ends.size(), 1u);
  BOOST_CHECK_CLOSE(core.stats().good_seconds, c.core->stats().good_seconds, 1e-9);
  BOOST_CHECK_EQUAL(core.learners()[0].merged, 1u);
  BOOST_CHECK_EQUAL(core.learners()[1].merged, 1u);
  BOOST_CHECK_EQUAL(core.total_tokens(), c.core->total_tokens());
  BOOST_CHECK_CLOSE(core.allocated_seconds(at(500.0)), 2 * 30.9, 1e-6);  // both members all along
  // Its own figures keep the run's start.
  BOOST_CHECK_EQUAL(core.figures(at(501.0), wall_ms + 31'000, 0.0).started_unix_ms, wall_ms - 900);
  // Replaced in that process (its process started at 500 s), its successor keeps the run's clock.
  auto successor = SyncerCore::create(c.topology, at(510.0), at(500.0));
  BOOST_REQUIRE(successor.ok());
  (*successor)->continue_from(core.stats(), core.learners(), core.run_start());
  BOOST_CHECK_CLOSE((*successor)->elapsed(at(510.0)), 40.9, 1e-6);

  // A wall clock behind the writer's (another host) does not run the run's time backwards.
  auto behind = SyncerCore::create(c.topology, at(700.0));
  BOOST_REQUIRE(behind.ok());
  BOOST_REQUIRE((*behind)->restore(*saved, at(700.0)).ok());
  (*behind)->continue_from(*figures, at(700.0), wall_ms - 60'000);
  BOOST_CHECK_GE((*behind)->elapsed(at(700.0)), 0.9);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
