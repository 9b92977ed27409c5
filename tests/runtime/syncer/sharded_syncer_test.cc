// A sharded syncer (syncer.shards = 2) without CAF: two SyncerCores, each
// owning half the fragments, and two learner replicas (ModelReplica) that register with both,
// push each fragment to its owner and tell both their progress. Messages go
// by hand in virtual time, so a shard can die and come back between any two.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <deque>
#include <memory>

#include "atoll/fragments.h"
#include "atoll/job.h"
#include "atoll/model_replica.h"
#include "atoll/syncer_core.h"
#include "test_support.h"

namespace atl {
namespace {

using testing::at;

constexpr uint32_t kShards = 2;

Topology sharded_topology() {
  Topology t = testing::exact_wire_topology();  // 4 tensors: 4 fragments at most
  t.outer.fragments = 4;
  t.syncer.shards = kShards;
  t.outer.sync_every = 4;
  return t;
}

// Two shards and two learners, wired by fragment owner. A shard that is
// down (null) loses what is sent to it, as a killed process would.
struct Cluster {
  Topology topology = sharded_topology();
  std::shared_ptr<const Job> job;
  std::vector<std::unique_ptr<SyncerCore>> shards;
  std::vector<std::unique_ptr<ModelReplica>> learners;
  std::vector<Reject> rejects;
  double now = 0.0;

  Cluster() {
    auto j = Job::load(topology, "");
    BOOST_REQUIRE(j.ok());
    job = std::move(*j);
    for (uint32_t s = 0; s < kShards; ++s) shards.push_back(make_shard(s));
    for (uint32_t m = 0; m < 2; ++m) {
      auto c = ModelReplica::create(m, 1, job);
      BOOST_REQUIRE(c.ok());
      learners.push_back(std::move(*c));
    }
  }
  std::unique_ptr<SyncerCore> make_shard(uint32_t s) const {
    auto c = SyncerCore::create(topology, at(now), at(0.0), s);
    BOOST_REQUIRE(c.ok());
    return std::move(*c);
  }
  uint32_t owner(uint32_t fragment) const { return shard_of(fragment, kShards); }

  void register_with(uint32_t s, uint32_t m) {
    if (!shards[s]) return;
    SyncerEffects fx;
    BOOST_REQUIRE(shards[s]->on_register(learners[m]->make_register(""), Sender{1, 10 + m}, at(now), fx).accepted());
    deliver(fx);
  }
  void to_shard(uint32_t s, const Message& m) {
    if (!shards[s]) return;
    SyncerEffects fx;
    if (const auto* push = std::get_if<Push>(&m)) shards[s]->on_push(*push, at(now), fx);
    else shards[s]->on_progress(std::get<Progress>(m), at(now), fx);
    deliver(fx);
  }
  void push(const Push& p) { to_shard(owner(p.fragment), p); }
  void to_learner(uint32_t m, const Message& msg) {
    ModelReplica& l = *learners[m];
    if (const auto* w = std::get_if<Welcome>(&msg)) BOOST_REQUIRE_MESSAGE(l.welcome(*w).ok(), "welcome");
    else if (const auto* b = std::get_if<Broadcast>(&msg)) BOOST_REQUIRE(l.apply(*b).ok());
    else if (const auto* pull = std::get_if<Pull>(&msg)) {
      if (auto answer = l.answer(*pull); answer.ok()) push(*answer);
    } else if (const auto* r = std::get_if<Reject>(&msg)) {
      rejects.push_back(*r);
      l.on_reject(*r, true);
    }
  }
  void deliver(const SyncerEffects& fx) {
    for (const auto& s : fx.sends) to_learner(s.learner, s.message);
    for (const auto& msg : fx.to_all)
      for (uint32_t m = 0; m < learners.size(); ++m) to_learner(m, msg);
  }
  // Every learner takes `n` steps of 0.1 s; at each boundary it pushes what
  // fell due to the owners and tells every shard its progress.
  void train(int n) {
    for (int i = 0; i < n; ++i) {
      now += 0.1;
      for (uint32_t m = 0; m < learners.size(); ++m) {
        ModelReplica& l = *learners[m];
        l.finish_step(l.step(), 0.1);
        for (const auto& p : l.due_pushes()) push(p);
        const Progress progress = l.progress();
        for (uint32_t s = 0; s < kShards; ++s) to_shard(s, progress);
      }
    }
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(sharded_syncer_test)

BOOST_AUTO_TEST_CASE(a_learner_trains_once_every_shard_welcomed_it) {
  Cluster c;
  c.register_with(0, 0);
  BOOST_CHECK(!c.learners[0]->welcomed());  // fragments 1 and 3 have no base yet
  c.register_with(1, 0);
  BOOST_CHECK(c.learners[0]->welcomed());
  // A welcome that mixes two shards' fragments is refused, and changes nothing.
  Welcome mixed;
  mixed.topology = c.topology;
  mixed.fragments = {{0, 0, Payload{}}, {1, 0, Payload{}}};
  BOOST_CHECK(!c.learners[1]->welcome(mixed).ok());
  BOOST_CHECK(!c.learners[1]->welcomed());
}

BOOST_AUTO_TEST_CASE(each_shard_merges_and_checkpoints_only_its_own_fragments) {
  Cluster c;
  for (uint32_t m = 0; m < 2; ++m)
    for (uint32_t s = 0; s < kShards; ++s) c.register_with(s, m);
  c.train(40);
  for (uint32_t p = 0; p < 4; ++p) {
    BOOST_TEST_CONTEXT("fragment " << p) {
      BOOST_CHECK_GT(c.shards[c.owner(p)]->version(p), 0u);
      BOOST_CHECK_EQUAL(c.shards[1 - c.owner(p)]->version(p), 0u);  // never merged where it does not belong
      BOOST_CHECK(c.shards[c.owner(p)]->owns(p) && !c.shards[1 - c.owner(p)]->owns(p));
    }
  }
  BOOST_CHECK(c.rejects.empty());
  // The model is the shards' parts put together: disjoint, and covering it.
  const auto a = c.shards[0]->parameters(), b = c.shards[1]->parameters();
  size_t from_both = 0, from_none = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    from_both += (a[i] != 0.0f && b[i] != 0.0f) ? 1 : 0;
    from_none += (a[i] == 0.0f && b[i] == 0.0f) ? 1 : 0;
  }
  BOOST_CHECK_EQUAL(from_both, 0u);
  BOOST_CHECK_LT(from_none, a.size() / 10);  // a few parameters may be exactly 0 (biases)

  // A push to the wrong shard is refused by name.
  Push wrong = c.learners[0]->answer(Pull{1, 0}).value();
  SyncerEffects fx;
  c.shards[0]->on_push(wrong, at(c.now), fx);
  BOOST_REQUIRE_EQUAL(fx.sends.size(), 1u);
  const auto& r = std::get<Reject>(fx.sends[0].message);
  BOOST_CHECK(r.reason == RejectReason::kUnknownFragment);
  BOOST_CHECK(r.detail.find("belongs to syncer shard 1") != std::string::npos);

  // Checkpoints hold only their own fragments, and go back only where they belong.
  const CheckpointState zero = copy_of(c.shards[0]->checkpoint(0)), one = copy_of(c.shards[1]->checkpoint(0));
  BOOST_REQUIRE_EQUAL(zero.fragments.size(), 2u);
  BOOST_CHECK(zero.fragments[0].fragment == 0 && zero.fragments[1].fragment == 2);
  auto fresh = c.make_shard(0);
  BOOST_CHECK(fresh->restore(zero).ok());
  BOOST_CHECK_EQUAL(fresh->version(2), c.shards[0]->version(2));
  const Status crossed = c.make_shard(0)->restore(one);
  BOOST_CHECK(!crossed.ok());
}

BOOST_AUTO_TEST_CASE(each_shard_keeps_and_hands_only_its_own_fragments_moments) {
  Cluster c;  // checkpoint.moments is on by default
  BOOST_REQUIRE(c.topology.checkpoint.moments);
  for (uint32_t m = 0; m < 2; ++m)
    for (uint32_t s = 0; s < kShards; ++s) c.register_with(s, m);
  c.train(8);
  // Before a checkpoint each shard asks for its part, and keeps that.
  for (uint32_t s = 0; s < kShards; ++s) {
    BOOST_TEST_CONTEXT("shard " << s) {
      SyncerEffects fx;
      c.shards[s]->request_checkpoint_moments(fx);
      BOOST_REQUIRE_EQUAL(fx.sends.size(), 1u);
      const auto& pull = std::get<MomentsPull>(fx.sends[0].message);
      BOOST_CHECK_EQUAL(pull.shard, s);
      auto moments = c.learners[fx.sends[0].learner]->moments_for(pull);
      BOOST_REQUIRE(moments.ok());
      BOOST_CHECK_EQUAL(moments->state.m.count, c.shards[s]->owned_parameters());
      SyncerEffects none;
      c.shards[s]->on_moments(fx.sends[0].learner, *moments, at(c.now), none);
      const CheckpointState saved = copy_of(c.shards[s]->checkpoint(0));
      BOOST_REQUIRE(saved.optimizer.has_value());
      BOOST_CHECK_EQUAL(saved.optimizer->m.size(), c.shards[s]->owned_parameters());
      BOOST_CHECK(c.make_shard(s)->restore(saved).ok());  // and restores it
    }
  }
  BOOST_CHECK_EQUAL(c.shards[0]->owned_parameters() + c.shards[1]->owned_parameters(),
                    c.learners[0]->parameter_count());

  // Learner 1 restarts: each shard asks learner 0 for its part and welcomes
  // with it; learner 1 takes them once both have.
  auto fresh = ModelReplica::create(1, 2, c.job);
  BOOST_REQUIRE(fresh.ok());
  c.learners[1] = std::move(*fresh);
  for (uint32_t s = 0; s < kShards; ++s) {
    SyncerEffects fx;
    BOOST_REQUIRE(c.shards[s]->on_register(c.learners[1]->make_register(""), Sender{1, 20}, at(c.now), fx).accepted());
    BOOST_REQUIRE_EQUAL(fx.sends.size(), 1u);  // the pull to the peer; the welcome waits for it
    const auto& pull = std::get<MomentsPull>(fx.sends[0].message);
    BOOST_CHECK_EQUAL(fx.sends[0].learner, 0u);
    BOOST_CHECK_EQUAL(pull.shard, s);
    auto part = c.learners[0]->moments_for(pull);
    BOOST_REQUIRE(part.ok());
    SyncerEffects welcome;
    c.shards[s]->on_moments(0, *part, at(c.now), welcome);
    BOOST_REQUIRE_EQUAL(welcome.sends.size(), 1u);
    const auto& w = std::get<Welcome>(welcome.sends[0].message);
    BOOST_REQUIRE(w.moments.has_value());
    BOOST_CHECK_EQUAL(w.moments->m.count, c.shards[s]->owned_parameters());
    BOOST_REQUIRE(c.learners[1]->welcome(w).ok());
    BOOST_CHECK_EQUAL(c.learners[1]->welcomed(), s + 1 == kShards);
  }
  // Its AdamW state is now the peer's, part for part.
  for (uint32_t s = 0; s < kShards; ++s) {
    auto mine = c.learners[1]->moments_for(MomentsPull{9, s});
    auto peer = c.learners[0]->moments_for(MomentsPull{9, s});
    BOOST_REQUIRE(mine.ok() && peer.ok());
    BOOST_CHECK(mine->state == peer->state);
    BOOST_CHECK_GT(mine->state.step, 0);
  }
}

BOOST_AUTO_TEST_CASE(a_killed_shard_pauses_only_its_fragments_and_catches_up) {
  Cluster c;
  for (uint32_t m = 0; m < 2; ++m)
    for (uint32_t s = 0; s < kShards; ++s) c.register_with(s, m);
  c.train(24);
  const CheckpointState saved = copy_of(c.shards[0]->checkpoint(0));
  std::vector<uint64_t> adopted;  // the newest versions any learner adopted before the kill
  for (uint32_t p = 0; p < 4; ++p) adopted.push_back(c.learners[0]->progress().fragments[p].version);
  const uint64_t other_before = c.shards[1]->version(1);

  c.shards[0] = nullptr;  // SIGKILL: what is sent to it is lost
  c.train(24);
  BOOST_CHECK_GT(c.shards[1]->version(1), other_before);  // the other shard kept merging
  BOOST_CHECK_EQUAL(c.learners[0]->progress().fragments[0].version, adopted[0]);  // fragment 0 paused

  c.shards[0] = c.make_shard(0);  // restarted: the checkpoint, then the learners' bases
  BOOST_REQUIRE(c.shards[0]->restore(saved).ok());
  for (uint32_t m = 0; m < 2; ++m) c.register_with(0, m);
  for (uint32_t p : {0u, 2u}) BOOST_CHECK_GE(c.shards[0]->version(p), adopted[p]);  // no adopted version lost
  const uint64_t back_at = c.shards[0]->version(0);
  c.train(24);
  BOOST_CHECK_GT(c.shards[0]->version(0), back_at);  // merging again
  BOOST_CHECK_EQUAL(c.shards[1]->version(0), 0u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
