// What a learner does with a broadcast (docs/design.md section 5): overwrite, or
// carry the progress the new version did not merge; adopt a difference only
// on top of the version it was made for. And what it does about a refusal.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <deque>

#include "atoll/job.h"
#include "atoll/exchange_replica.h"
#include "atoll/model_replica.h"
#include "atoll/learner_session.h"
#include "test_support.h"

namespace atl {
namespace {

// The smallest topology, fp32 on the wire.
Topology small_topology(bool carry) {
  Topology t = testing::exact_wire_topology();
  t.outer.carry_progress = carry;
  return t;
}

struct Learner {
  std::unique_ptr<ModelReplica> core;
  std::vector<float> theta0;

  explicit Learner(const Topology& t) {
    auto job = Job::load(t, "");
    BOOST_REQUIRE(job.ok());
    auto c = ModelReplica::create(0, 1, *job);
    BOOST_REQUIRE(c.ok());
    core = std::move(*c);
    theta0 = initial_parameters(**make_model(t), t);
    Welcome w;
    w.topology = t;
    w.fragments = {{0, 0, encode_payload(Codec::kFp32, 0, theta0)}};
    BOOST_REQUIRE(core->welcome(w).ok());
  }
  void steps(int n) {
    for (int i = 0; i < n; ++i) core->finish_step(core->step(), 0.01);
  }
  std::vector<float> params() const { return {core->parameters().begin(), core->parameters().end()}; }
  uint64_t fragment_steps() const { return core->unmerged_steps(0); }
};

// theta0 + shift everywhere.
std::vector<float> shifted(const std::vector<float>& theta0, float shift) {
  std::vector<float> v = theta0;
  for (float& x : v) x += shift;
  return v;
}

Broadcast absolute(uint64_t version, const std::vector<float>& values, std::vector<uint32_t> merged) {
  return Broadcast{0, version, encode_payload(Codec::kFp32, 0, values), false, 0, std::move(merged)};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(learner_core_test)

BOOST_AUTO_TEST_CASE(a_welcome_without_values_is_the_seeds_initialization) {
  const Topology t = small_topology(/*carry=*/false);
  auto job = Job::load(t, "");
  BOOST_REQUIRE(job.ok());
  auto core = ModelReplica::create(1, 1, *job);
  BOOST_REQUIRE(core.ok());
  const auto theta0 = initial_parameters(**make_model(t), t);
  BOOST_CHECK_EQUAL((*core)->make_register("").initial_crc, parameters_crc(theta0));
  Welcome w;
  w.topology = t;
  w.fragments = {{0, 1, Payload{}}};  // only version 0 may come without values
  BOOST_CHECK(!(*core)->welcome(w).ok());
  w.fragments = {{0, 0, Payload{}}};
  BOOST_REQUIRE((*core)->welcome(w).ok());
  BOOST_CHECK(std::vector<float>((*core)->parameters().begin(), (*core)->parameters().end()) == theta0);
}

// A restarted learner can receive what the syncer sent its earlier incarnation
// (a reordered or delayed pull, broadcast or moments request) before its own
// welcome. It has no base to answer against: it must refuse, not read one.
BOOST_AUTO_TEST_CASE(messages_before_the_first_welcome_are_refused_not_answered) {
  for (bool carry : {false, true}) {
    const Topology t = small_topology(carry);
    auto job = Job::load(t, "");
    BOOST_REQUIRE(job.ok());
    auto core = ModelReplica::create(0, 2, *job);
    BOOST_REQUIRE(core.ok());
    const auto theta0 = initial_parameters(**make_model(t), t);
    const auto pushed = (*core)->answer(Pull{0, 3, false});
    BOOST_CHECK(pushed.status().code() == Status::Code::kUnavailable);
    BOOST_CHECK((*core)->apply(absolute(1, theta0, {0})).code() == Status::Code::kUnavailable);
    BOOST_CHECK((*core)->moments_for(MomentsPull{4}).status().code() == Status::Code::kUnavailable);
    BOOST_CHECK((*core)->due_pushes().empty());
    BOOST_CHECK_EQUAL((*core)->version(0), 0u);
  }
}

BOOST_AUTO_TEST_CASE(overwrite_adopts_the_global_values_and_forgets_the_progress) {
  Learner l(small_topology(/*carry=*/false));
  l.steps(3);
  const auto global = shifted(l.theta0, 0.5f);
  BOOST_REQUIRE(l.core->apply(absolute(1, global, {0})).ok());
  BOOST_CHECK(l.params() == global);
  BOOST_CHECK_EQUAL(l.fragment_steps(), 0u);
}

BOOST_AUTO_TEST_CASE(a_merged_learner_carries_only_its_steps_since_the_push) {
  Learner l(small_topology(/*carry=*/true));
  l.steps(3);
  auto push = l.core->answer(Pull{0, 7, false});
  BOOST_REQUIRE(push.ok());
  const auto at_push = l.params();
  l.steps(2);  // while the round closes
  const auto before = l.params();
  const auto global = shifted(l.theta0, 0.5f);
  BOOST_REQUIRE(l.core->apply(absolute(1, global, {1, 0})).ok());
  const auto after = l.params();
  double worst = 0.0, moved = 0.0;
  for (size_t i = 0; i < after.size(); ++i) {
    worst = std::max(worst, std::fabs(double(after[i]) - (double(global[i]) + before[i] - at_push[i])));
    moved = std::max(moved, std::fabs(double(before[i]) - at_push[i]));
  }
  BOOST_CHECK_GT(moved, 1e-4);  // the two steps did move it
  BOOST_CHECK_LE(worst, 1e-6);
  BOOST_CHECK_EQUAL(l.fragment_steps(), 2u);
}

// Two pushes in flight (an unasked one, then an answer): the broadcast names
// the steps of the one it merged, and the learner keeps every step after those,
// not only the steps after its last push.
BOOST_AUTO_TEST_CASE(a_learner_with_two_pushes_in_flight_is_credited_with_the_one_merged) {
  Learner l(small_topology(/*carry=*/true));
  l.steps(3);
  auto first = l.core->answer(Pull{0, 7, false});
  BOOST_REQUIRE(first.ok());
  BOOST_CHECK_EQUAL(first->since, 0u);
  BOOST_CHECK_EQUAL(first->through, 3u);
  const auto at_first = l.params();
  l.steps(2);
  auto second = l.core->answer(Pull{0, 8, false});
  BOOST_REQUIRE(second.ok());
  BOOST_CHECK_EQUAL(second->since, 0u);  // nothing credited yet: all of it again
  BOOST_CHECK_EQUAL(second->through, 5u);
  l.steps(1);
  const auto before = l.params();
  const auto global = shifted(l.theta0, 0.5f);
  Broadcast b = absolute(1, global, {0});
  b.merged_through = {first->through};  // the first one was merged
  BOOST_REQUIRE(l.core->apply(b).ok());
  const auto after = l.params();
  double worst = 0.0;
  for (size_t i = 0; i < after.size(); ++i)
    worst = std::max(worst, std::fabs(double(after[i]) - (double(global[i]) + before[i] - at_first[i])));
  BOOST_CHECK_LE(worst, 1e-6);
  BOOST_CHECK_EQUAL(l.fragment_steps(), 3u);  // steps 4 to 6
  auto next = l.core->answer(Pull{0, 9, false});
  BOOST_REQUIRE(next.ok());
  BOOST_CHECK_EQUAL(next->since, 3u);
  BOOST_CHECK_EQUAL(next->through, 6u);
  BOOST_CHECK_EQUAL(next->steps, 3u);
}

// A version that did not merge it moves its pushes in flight along with its
// values: a later version that merges one of them takes off exactly that push.
BOOST_AUTO_TEST_CASE(pushes_in_flight_are_credited_across_versions_that_did_not_merge_them) {
  Learner l(small_topology(/*carry=*/true));
  l.steps(3);
  auto push = l.core->answer(Pull{0, 7, false});
  BOOST_REQUIRE(push.ok());
  const auto at_push = l.params();
  l.steps(1);
  const auto g1 = shifted(l.theta0, -0.25f);
  BOOST_REQUIRE(l.core->apply(absolute(1, g1, {1})).ok());  // not merged: carried
  l.steps(1);
  const auto before = l.params();
  const auto g2 = shifted(l.theta0, 0.5f);
  Broadcast b = absolute(2, g2, {0});
  b.merged_through = {push->through};  // merged late, from its older base
  BOOST_REQUIRE(l.core->apply(b).ok());
  const auto after = l.params();
  // What is left is the progress since the push: before - (at_push moved by g1 - theta0).
  double worst = 0.0;
  for (size_t i = 0; i < after.size(); ++i) {
    const double at_push_moved = double(at_push[i]) + g1[i] - l.theta0[i];
    worst = std::max(worst, std::fabs(double(after[i]) - (double(g2[i]) + before[i] - at_push_moved)));
  }
  BOOST_CHECK_LE(worst, 1e-5);
  BOOST_CHECK_EQUAL(l.fragment_steps(), 2u);
}

// A learner that missed broadcasts registers again; the welcome says how far
// the syncer merged its progress, so it keeps what followed (and drops all of
// it when the syncer cannot say, after a restart).
BOOST_AUTO_TEST_CASE(a_welcome_to_a_newer_version_keeps_the_progress_it_did_not_merge) {
  for (const bool known : {true, false}) {
    Learner l(small_topology(/*carry=*/true));
    l.steps(3);
    auto push = l.core->answer(Pull{0, 7, false});
    BOOST_REQUIRE(push.ok());
    const auto at_push = l.params();
    l.steps(2);
    const auto before = l.params();
    const auto global = shifted(l.theta0, 0.5f);
    Welcome w;
    w.topology = l.core->topology();
    w.fragments = {{0, 3, encode_payload(Codec::kFp32, 0, global)}};
    w.fragments[0].merged_through = known ? push->through : FragmentValues::kUnknownMerged;
    BOOST_REQUIRE(l.core->welcome(w).ok());
    BOOST_CHECK_EQUAL(l.core->version(0), 3u);
    const auto after = l.params();
    double worst = 0.0;
    for (size_t i = 0; i < after.size(); ++i) {
      const double expected = known ? double(global[i]) + before[i] - at_push[i] : double(global[i]);
      worst = std::max(worst, std::fabs(double(after[i]) - expected));
    }
    BOOST_CHECK_LE(worst, 1e-6);
    BOOST_CHECK_EQUAL(l.fragment_steps(), known ? 2u : 0u);
  }
}

BOOST_AUTO_TEST_CASE(a_learner_left_out_of_the_merge_carries_all_its_progress) {
  Learner l(small_topology(/*carry=*/true));
  l.steps(3);
  BOOST_REQUIRE(l.core->answer(Pull{0, 7, false}).ok());  // pushed, but late: not merged
  l.steps(2);
  const auto before = l.params();
  const auto global = shifted(l.theta0, -0.25f);
  BOOST_REQUIRE(l.core->apply(absolute(1, global, {1})).ok());
  const auto after = l.params();
  double worst = 0.0;
  for (size_t i = 0; i < after.size(); ++i)
    worst = std::max(worst, std::fabs(double(after[i]) - (double(global[i]) + before[i] - l.theta0[i])));
  BOOST_CHECK_LE(worst, 1e-6);
  BOOST_CHECK_EQUAL(l.fragment_steps(), 5u);  // every step since the base is still unmerged
}

BOOST_AUTO_TEST_CASE(a_difference_applies_only_to_the_version_it_was_made_for) {
  Learner l(small_topology(/*carry=*/false));
  const std::vector<float> diff(l.theta0.size(), 0.125f);
  Broadcast b{0, 1, encode_payload(Codec::kFp32, 0, diff), true, 0, {}};
  BOOST_REQUIRE(l.core->apply(b).ok());
  BOOST_CHECK(l.params() == shifted(l.theta0, 0.125f));
  BOOST_CHECK_EQUAL(l.core->version(0), 1u);

  // Versions 2 and 3 are late, or were missed: held until too many are.
  Status s;
  uint64_t v = 4;
  for (; s.ok() && v <= 4 + LearnerCore::kMaxHeldBroadcasts; ++v)
    s = l.core->apply(Broadcast{0, v, encode_payload(Codec::kFp32, 0, diff), true, v - 1, {}});
  BOOST_CHECK_EQUAL(v, 5 + LearnerCore::kMaxHeldBroadcasts);
  BOOST_CHECK(s.code() == Status::Code::kUnavailable);
  BOOST_CHECK_MESSAGE(s.message().find("difference to version " + std::to_string(v - 2)) != std::string_view::npos,
                      s.to_string());
  BOOST_CHECK(l.params() == shifted(l.theta0, 0.125f));  // nothing changed
  BOOST_CHECK_EQUAL(l.core->version(0), 1u);
}

// The reject policy: what a learner does about each refusal.
BOOST_AUTO_TEST_CASE(a_refusal_stops_resyncs_restarts_or_lets_the_learner_go_on) {
  Learner l(small_topology(false));
  using Action = LearnerCore::RejectAction;
  BOOST_CHECK(l.core->on_reject({RejectReason::kBadToken, 0, ""}, true) == Action::kStop);
  BOOST_CHECK(l.core->on_reject({RejectReason::kFingerprintMismatch, 0, ""}, false) == Action::kStop);
  // Stale: newer versions are on their way (kGoOn) until several come while nothing newer arrived.
  for (int i = 1; i < LearnerCore::kStaleRefusalsBeforeResync; ++i)
    BOOST_CHECK(l.core->on_reject({RejectReason::kStale, 0, ""}, true) == Action::kGoOn);
  BOOST_CHECK(l.core->on_reject({RejectReason::kStale, 0, ""}, true) == Action::kResync);
  // Not known to a syncer that had welcomed us: it restarted. Before a welcome: our Register is on its way.
  BOOST_CHECK(l.core->on_reject({RejectReason::kUnknownLearner, 0, ""}, true) == Action::kResync);
  BOOST_CHECK(l.core->on_reject({RejectReason::kUnknownLearner, 0, ""}, false) == Action::kGoOn);
  BOOST_CHECK(l.core->on_reject({RejectReason::kDuplicateLearner, 0, ""}, true) == Action::kGoOn);
  BOOST_CHECK(l.core->on_reject({RejectReason::kMalformed, 0, ""}, true) == Action::kGoOn);
  // A refused push whose fragment has diverged here (a Python learner's replica
  // read back as NaN): only a fresh start helps.
  const Topology t = small_topology(false);
  auto diverged = ExchangeReplica::create(0, 1, t, (*make_model(t))->layout(), 1.0, 8);
  BOOST_REQUIRE(diverged.ok());
  Welcome w;
  w.topology = t;
  w.fragments = {{0, 0, encode_payload(Codec::kFp32, 0, l.theta0)}};
  BOOST_REQUIRE((*diverged)->welcome(w).ok());
  std::vector<float> bad = l.theta0;
  bad[0] = std::nanf("");
  BOOST_REQUIRE((*diverged)->read({0}, {bad}, std::nullopt).ok());
  BOOST_CHECK((*diverged)->on_reject({RejectReason::kMalformed, 0, ""}, true) == Action::kRestart);
}

// A reordered link: version 2 overtakes version 1. The learner holds it, then
// adopts both in order, and carries its unmerged progress through both (issue
// 25: adopting 2 at once threw the progress away, and a difference to 1
// made it register again, whose welcome came late too).
BOOST_AUTO_TEST_CASE(a_broadcast_that_overtook_the_next_version_waits_for_it) {
  Learner l(small_topology(/*carry=*/true));
  l.steps(3);
  const auto before = l.params();
  const auto g1 = shifted(l.theta0, 0.25f), g2 = shifted(l.theta0, 0.5f);
  BOOST_REQUIRE(l.core->apply(absolute(2, g2, {1})).ok());
  BOOST_CHECK_EQUAL(l.core->version(0), 0u);  // held
  BOOST_CHECK(l.params() == before);
  BOOST_CHECK_EQUAL(l.core->broadcasts_held(), 1u);
  BOOST_REQUIRE(l.core->apply(absolute(1, g1, {1})).ok());
  BOOST_CHECK_EQUAL(l.core->version(0), 2u);  // 1, then the held 2
  BOOST_CHECK_EQUAL(l.fragment_steps(), 3u);   // neither merged it: all of it carried
  const auto after = l.params();
  double worst = 0.0;
  for (size_t i = 0; i < after.size(); ++i)
    worst = std::max(worst, std::fabs(double(after[i]) - (double(g2[i]) + before[i] - l.theta0[i])));
  BOOST_CHECK_LE(worst, 1e-6);

  // Differences: the one to version 3 arrives before 3 itself, and is no reason to resync.
  const std::vector<float> diff(l.theta0.size(), 0.125f);
  BOOST_REQUIRE(l.core->apply(Broadcast{0, 4, encode_payload(Codec::kFp32, 0, diff), true, 3, {}}).ok());
  BOOST_REQUIRE(l.core->apply(Broadcast{0, 3, encode_payload(Codec::kFp32, 0, diff), true, 2, {}}).ok());
  BOOST_CHECK_EQUAL(l.core->version(0), 4u);
}

// Held broadcasts whose gap never fills (a lost one): after kMaxHeldBroadcasts
// a difference says to resync, and values are adopted at once.
BOOST_AUTO_TEST_CASE(a_gap_that_does_not_fill_is_a_lost_broadcast) {
  Learner l(small_topology(/*carry=*/false));
  const std::vector<float> diff(l.theta0.size(), 0.125f);
  Status s;
  uint64_t v = 2;  // version 1 never comes
  for (; v < 2 + LearnerCore::kMaxHeldBroadcasts; ++v) {
    s = l.core->apply(Broadcast{0, v, encode_payload(Codec::kFp32, 0, diff), true, v - 1, {}});
    BOOST_CHECK(s.ok());
  }
  s = l.core->apply(Broadcast{0, v, encode_payload(Codec::kFp32, 0, diff), true, v - 1, {}});
  BOOST_CHECK(s.code() == Status::Code::kUnavailable);  // the actor resyncs
  BOOST_CHECK_EQUAL(l.core->version(0), 0u);
  const auto g = shifted(l.theta0, 1.0f);
  for (uint64_t w = v + 2; w <= v + 2 + LearnerCore::kMaxHeldBroadcasts; ++w)
    BOOST_REQUIRE(l.core->apply(absolute(w, g, {})).ok());
  BOOST_CHECK_EQUAL(l.core->version(0), v + 2 + LearnerCore::kMaxHeldBroadcasts);  // the newest values, at once
  BOOST_CHECK(l.params() == g);
}

// A version lost on its way (the gap held for it would not fill) comes back
// as a repair: whole values for this learner, adopted at once past the gap,
// keeping what the syncer did not merge of its progress; the differences held
// after it follow.
BOOST_AUTO_TEST_CASE(a_repair_fills_a_lost_version_at_once) {
  Learner l(small_topology(/*carry=*/true));
  l.steps(3);
  auto push = l.core->answer(Pull{0, 7, false});
  BOOST_REQUIRE(push.ok());
  const auto at_push = l.params();
  l.steps(2);
  const auto before = l.params();
  const std::vector<float> diff(l.theta0.size(), 0.125f);
  BOOST_REQUIRE(l.core->apply(Broadcast{0, 3, encode_payload(Codec::kFp32, 0, diff), true, 2, {}}).ok());
  BOOST_CHECK_EQUAL(l.core->version(0), 0u);  // held: versions 1 and 2 were lost

  const auto g2 = shifted(l.theta0, 0.5f);
  const Broadcast for_another{0, 2, encode_payload(Codec::kFp32, 0, g2), false, 0, {3}, {push->through}, true};
  BOOST_CHECK(l.core->apply(for_another).code() == Status::Code::kInvalidArgument);
  BOOST_CHECK_EQUAL(l.core->version(0), 0u);
  const Broadcast repair{0, 2, encode_payload(Codec::kFp32, 0, g2), false, 0, {0}, {push->through}, true};
  BOOST_REQUIRE(l.core->apply(repair).ok());
  BOOST_CHECK_EQUAL(l.core->version(0), 3u);  // 2 whole, then the difference held for 3
  BOOST_CHECK_EQUAL(l.core->repairs_adopted(), 1u);
  BOOST_CHECK_EQUAL(l.fragment_steps(), 2u);  // the merged push's 3 steps are not carried
  const auto after = l.params();
  double worst = 0.0;
  for (size_t i = 0; i < after.size(); ++i)
    worst = std::max(worst, std::fabs(double(after[i]) - (double(g2[i]) + 0.125 + before[i] - at_push[i])));
  BOOST_CHECK_LE(worst, 1e-5);
  BOOST_REQUIRE(l.core->apply(repair).ok());  // a repair that comes twice (duplicated) changes nothing
  BOOST_CHECK_EQUAL(l.core->repairs_adopted(), 1u);
  BOOST_CHECK(l.params() == after);
}

// With error feedback a merged learner carries from what the syncer got: what
// its push left out (here half of each block, SparseLoCo's top-k) stays in
// its values, on top of the new version, for its next push.
BOOST_AUTO_TEST_CASE(error_feedback_keeps_what_a_push_left_out) {
  Topology t = small_topology(/*carry=*/true);
  t.outer.push_density = 0.5f;
  t.outer.push_block = 8;
  t.outer.push_error_feedback = true;
  Learner l(t);
  l.steps(3);
  auto push = l.core->answer(Pull{0, 7, false});
  BOOST_REQUIRE(push.ok());
  std::vector<float> sent(l.theta0.size());
  BOOST_REQUIRE(decode_payload(push->delta, sent).ok());
  const auto at_push = l.params();
  size_t left_out = 0;
  for (size_t i = 0; i < sent.size(); ++i) left_out += sent[i] == 0.0f && at_push[i] != l.theta0[i] ? 1 : 0;
  BOOST_CHECK_GT(left_out, sent.size() / 4);  // about half of what moved
  l.steps(2);
  const auto before = l.params();
  const auto global = shifted(l.theta0, 0.5f);
  BOOST_REQUIRE(l.core->apply(absolute(1, global, {0})).ok());
  const auto after = l.params();
  double worst = 0.0;
  for (size_t i = 0; i < after.size(); ++i)
    worst = std::max(worst, std::fabs(double(after[i]) - (double(global[i]) + before[i] - (l.theta0[i] + sent[i]))));
  BOOST_CHECK_LE(worst, 1e-5);
}

// Eager updates: the progress since the merged push is kept at the share the
// syncer's step will give it, and the next push still sends it whole, also
// after a version that did not merge the learner.
BOOST_AUTO_TEST_CASE(eager_updates_keep_a_share_of_the_progress_and_push_it_whole) {
  Topology t = small_topology(/*carry=*/true);
  t.outer.eager_updates = true;
  t.outer.nesterov = {0.5f, 0.6f};
  Learner l(t);
  l.steps(3);
  BOOST_REQUIRE(l.core->answer(Pull{0, 7, false}).ok());
  const auto at_push = l.params();
  l.steps(2);
  const auto before = l.params();
  const auto global = shifted(l.theta0, 0.5f);
  BOOST_REQUIRE(l.core->apply(absolute(1, global, {1, 0})).ok());
  const float share = 0.5f * (1.0f + 0.6f) / 2.0f;  // lr x (1 + momentum) / the 2 learners merged
  const auto after = l.params();
  double worst = 0.0, moved = 0.0;
  for (size_t i = 0; i < after.size(); ++i) {
    worst = std::max(worst, std::fabs(double(after[i]) - (global[i] + share * (double(before[i]) - at_push[i]))));
    moved = std::max(moved, std::fabs(double(before[i]) - at_push[i]));
  }
  BOOST_CHECK_GT(moved, 1e-4);
  BOOST_CHECK_LE(worst, 1e-6);
  // A version that merged someone else: everything is carried, the push's reference moves along.
  const auto global2 = shifted(l.theta0, -0.25f);
  BOOST_REQUIRE(l.core->apply(absolute(2, global2, {1})).ok());
  auto push = l.core->answer(Pull{0, 8, false});
  BOOST_REQUIRE(push.ok());
  std::vector<float> sent(l.theta0.size());
  BOOST_REQUIRE(decode_payload(push->delta, sent).ok());
  double off = 0.0;
  for (size_t i = 0; i < sent.size(); ++i) off = std::max(off, std::fabs(double(sent[i]) - (double(before[i]) - at_push[i])));
  BOOST_CHECK_LE(off, 1e-5);
  BOOST_CHECK_EQUAL(l.fragment_steps(), 2u);
}

// A Python loop steps on between the read a broadcast is adopted from and
// applying the update: an eager adoption is a translation, so those steps
// stay whole, in the replica and in its next push.
BOOST_AUTO_TEST_CASE(an_eager_update_keeps_whole_the_steps_a_python_loop_took_since_its_read) {
  Topology t = small_topology(/*carry=*/true);
  t.outer.eager_updates = true;
  t.outer.nesterov = {0.5f, 0.6f};
  auto r = ExchangeReplica::create(0, 1, t, (*make_model(t))->layout(), 1.0, 8);
  BOOST_REQUIRE(r.ok());
  const auto theta0 = initial_parameters(**make_model(t), t);
  Welcome w;
  w.topology = t;
  w.fragments = {{0, 0, encode_payload(Codec::kFp32, 0, theta0)}};
  BOOST_REQUIRE((*r)->welcome(w).ok());
  BOOST_REQUIRE_EQUAL((*r)->take_updates().size(), 1u);  // the welcome's
  BOOST_REQUIRE((*r)->read({0}, {shifted(theta0, 0.1f)}, std::nullopt).ok());
  BOOST_REQUIRE((*r)->answer(Pull{0, 7, false}).ok());
  (*r)->end_boundary();
  BOOST_REQUIRE((*r)->read({0}, {shifted(theta0, 0.3f)}, std::nullopt).ok());  // 0.2 since the push
  const auto global = shifted(theta0, 0.5f);
  BOOST_REQUIRE((*r)->apply(absolute(1, global, {1, 0})).ok());
  (*r)->end_boundary();
  const auto updates = (*r)->take_updates();
  BOOST_REQUIRE_EQUAL(updates.size(), 1u);
  std::vector<float> replica = shifted(theta0, 0.35f);  // 0.05 more since the read
  for (size_t i = 0; i < replica.size(); ++i) replica[i] = updates[0].scale * replica[i] + updates[0].offset[i];
  const float share = 0.5f * (1.0f + 0.6f) / 2.0f;
  double worst = 0.0;
  for (size_t i = 0; i < replica.size(); ++i)
    worst = std::max(worst, std::fabs(double(replica[i]) - (global[i] + share * 0.2 + 0.05)));
  BOOST_CHECK_LE(worst, 1e-5);
  BOOST_REQUIRE((*r)->read({0}, {replica}, std::nullopt).ok());
  auto push = (*r)->answer(Pull{0, 8, false});
  BOOST_REQUIRE(push.ok());
  std::vector<float> sent(theta0.size());
  BOOST_REQUIRE(decode_payload(push->delta, sent).ok());
  double off = 0.0;
  for (float x : sent) off = std::max(off, std::fabs(double(x) - 0.25));  // the 0.2 and the 0.05, whole
  BOOST_CHECK_LE(off, 1e-5);
}

// A stale push is not pushed again from the same base: the next version carries its progress.
BOOST_AUTO_TEST_CASE(a_stale_push_waits_for_the_next_version) {
  Topology t = small_topology(/*carry=*/true);
  t.outer.sync_every = 2;
  Learner l(t);
  l.steps(3);
  BOOST_REQUIRE_EQUAL(l.core->due_pushes().size(), 1u);
  BOOST_CHECK(l.core->on_reject({RejectReason::kStale, 0, ""}, true) == LearnerCore::RejectAction::kGoOn);
  l.steps(1);
  BOOST_CHECK(l.core->due_pushes().empty());
  BOOST_REQUIRE(l.core->apply(absolute(1, shifted(l.theta0, 0.5f), {1})).ok());
  BOOST_CHECK_EQUAL(l.fragment_steps(), 4u);
  // Carried progress waits for the next regular push, H steps after the adoption, never at once.
  BOOST_CHECK(l.core->due_pushes().empty());
  BOOST_CHECK_EQUAL(l.core->progress().fragments[0].steps, 0u);  // due counts from the adoption
  l.steps(2);
  const auto due = l.core->due_pushes();
  BOOST_REQUIRE_EQUAL(due.size(), 1u);
  BOOST_CHECK_EQUAL(due.front().steps, 6u);  // from the new base, all six steps
  // The fragment moved on: the next stale refusal starts a new count.
  BOOST_CHECK(l.core->on_reject({RejectReason::kStale, 0, ""}, true) == LearnerCore::RejectAction::kGoOn);
}

// A pull that finds the learner's unasked push from the same version on its
// way is answered by that push: a second one would cross the same link
// behind it for nothing. A pull for another version, or the run's last one,
// is answered; so is every pull once the learner adopted a newer version.
BOOST_AUTO_TEST_CASE(a_pull_is_answered_by_the_unasked_push_on_its_way) {
  Topology t = small_topology(/*carry=*/true);
  t.outer.sync_every = 2;
  Learner l(t);
  BOOST_CHECK(!l.core->push_in_flight(Pull{0, 7, false, 0}));  // nothing pushed yet
  l.steps(2);
  BOOST_REQUIRE_EQUAL(l.core->due_pushes().size(), 1u);
  BOOST_CHECK(l.core->push_in_flight(Pull{0, 7, false, 0}));
  BOOST_CHECK(!l.core->push_in_flight(Pull{0, 7, false, 1}));
  BOOST_CHECK(!l.core->push_in_flight(Pull{0, 7, false, Pull::kUnsaid}));  // a syncer that does not say
  BOOST_CHECK(!l.core->push_in_flight(Pull{0, 7, true, 0}));
  BOOST_REQUIRE(l.core->apply(absolute(1, shifted(l.theta0, 0.5f), {0})).ok());
  BOOST_CHECK(!l.core->push_in_flight(Pull{0, 8, false, 1}));
  // An answered pull is no unasked push: a later pull of the same version is answered again.
  l.steps(1);
  BOOST_REQUIRE(l.core->answer(Pull{0, 8, false, 1}).ok());
  BOOST_CHECK(!l.core->push_in_flight(Pull{0, 9, false, 1}));
}

// Progress carried for more than kMaxCarriedIntervals sync intervals is dropped.
BOOST_AUTO_TEST_CASE(progress_is_not_carried_without_bound) {
  Topology t = small_topology(/*carry=*/true);
  t.outer.sync_every = 1;
  Learner l(t);
  l.steps(static_cast<int>(FragmentLedger::kMaxCarriedIntervals));
  BOOST_REQUIRE(l.core->apply(absolute(1, shifted(l.theta0, 0.5f), {1})).ok());
  BOOST_CHECK_EQUAL(l.fragment_steps(), FragmentLedger::kMaxCarriedIntervals);  // at the limit: carried
  l.steps(1);
  const auto g = shifted(l.theta0, 0.75f);
  BOOST_REQUIRE(l.core->apply(absolute(2, g, {1})).ok());
  BOOST_CHECK_EQUAL(l.fragment_steps(), 0u);  // beyond it: the global values, nothing carried
  BOOST_CHECK(l.params() == g);
}

// Pulls whose round a later broadcast of their fragment closed are dropped; others stay, in order.
std::deque<std::shared_ptr<const Message>> queued(std::initializer_list<Message> messages) {
  std::deque<std::shared_ptr<const Message>> q;
  for (const auto& m : messages) q.push_back(std::make_shared<const Message>(m));
  return q;
}

BOOST_AUTO_TEST_CASE(queued_pulls_of_closed_rounds_are_dropped) {
  auto queue = queued({Pull{0, 1, false}, Pull{1, 1, false}, Broadcast{0, 2, {}, false, 0, {}}, Pull{0, 2, false}});
  BOOST_CHECK_EQUAL(LearnerSession::drop_closed_pulls(queue), 1u);
  BOOST_REQUIRE_EQUAL(queue.size(), 3u);
  BOOST_CHECK(std::get<Pull>(*queue[0]).fragment == 1);
  BOOST_CHECK(std::holds_alternative<Broadcast>(*queue[1]));
  BOOST_CHECK(std::get<Pull>(*queue[2]).round == 2);  // after the broadcast: a round still open
  const Message next = Broadcast{1, 2, {}, false, 0, {}};
  BOOST_CHECK_EQUAL(LearnerSession::drop_closed_pulls(queue, &next), 1u);  // a broadcast arriving next closes fragment 1's
  BOOST_CHECK_EQUAL(queue.size(), 2u);
  // Tags beside the queue (the syncer shard each came from) lose the same entries.
  auto tagged = queued({Pull{0, 1, false}, MomentsPull{7}, Broadcast{0, 2, {}, false, 0, {}}});
  std::deque<uint32_t> shards = {0, 1, 0};
  BOOST_CHECK_EQUAL(LearnerSession::drop_closed_pulls(tagged, nullptr, &shards), 1u);
  BOOST_CHECK(shards == (std::deque<uint32_t>{1, 0}));
  BOOST_CHECK(std::holds_alternative<MomentsPull>(*tagged[0]));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
