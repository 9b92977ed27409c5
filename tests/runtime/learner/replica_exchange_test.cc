// A learner trained outside atoll (atoll.Learner): the exchange composes what
// it adopts into one update per fragment, and its LearnerCore pushes and
// adopts exactly as an atoll learner's does, from the values the training
// thread read at its step boundaries.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>

#include "atoll/job.h"
#include "atoll/exchange_replica.h"
#include "atoll/model_replica.h"
#include "atoll/replica_exchange.h"
#include "test_support.h"

namespace atl {
namespace {

// values <- scale * values + offset, as the Python layer applies an update.
void apply_update(const FragmentUpdate& u, std::span<float> values) {
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = u.scale == 0.0f ? u.offset[i] : u.scale * values[i] + u.offset[i];
}

ReplicaExchange one_fragment_exchange(size_t n) {
  ParamLayout layout;
  layout.add("w", {static_cast<int64_t>(n)}, TensorRole::kBody, false);
  return ReplicaExchange(layout, *plan_fragments(layout, 1));
}

Topology small_topology() {
  Topology t = testing::exact_wire_topology();
  t.outer.fragments = 2;
  t.outer.sync_every = 4;
  return t;
}

// One atoll learner, and one trained "outside" by a loop that copies the
// atoll learner's parameters after each of its steps: same steps, so every
// push and every adoption must match.
struct Twins {
  Topology t = small_topology();
  std::unique_ptr<ModelReplica> inside;
  std::unique_ptr<ExchangeReplica> outside;
  std::vector<float> user;  // the outside learner's "tensors"

  Twins() {
    auto job = Job::load(t, "");
    BOOST_REQUIRE(job.ok());
    auto in = ModelReplica::create(0, 1, *job);
    BOOST_REQUIRE(in.ok());
    inside = std::move(*in);
    auto model = make_model(t);
    auto out = ExchangeReplica::create(0, 1, t, (*model)->layout(), 0.5, 12);
    BOOST_REQUIRE_MESSAGE(out.ok(), out.status().to_string());
    outside = std::move(*out);
    Welcome w;
    w.topology = t;
    const auto theta0 = initial_parameters(**model, t);
    for (uint32_t p = 0; p < inside->fragments().size(); ++p) {
      std::vector<float> v(inside->fragments()[p].size);
      gather(inside->fragments()[p], theta0, v);
      w.fragments.push_back({p, 0, encode_payload(Codec::kFp32, 0, v)});
    }
    BOOST_REQUIRE(inside->welcome(w).ok());
    BOOST_REQUIRE(outside->welcome(w).ok());
    user.assign(theta0.size(), 0.0f);
    take_updates();
  }
  void take_updates() {
    for (const auto& u : outside->take_updates()) {
      std::vector<float> v(outside->fragments()[u.fragment].size);
      gather(outside->fragments()[u.fragment], user, v);
      apply_update(u, v);
      scatter(outside->fragments()[u.fragment], v, user);
    }
  }
  // One step on the inside; the outside loop takes "the same" step, then reads `reads`.
  std::pair<std::vector<Push>, std::vector<Push>> step(const std::vector<uint32_t>& reads) {
    const auto r = inside->step();
    inside->finish_step(r, 0.01);
    user.assign(inside->parameters().begin(), inside->parameters().end());
    std::vector<std::vector<float>> values;
    for (uint32_t p : reads) {
      values.emplace_back(outside->fragments()[p].size);
      gather(outside->fragments()[p], user, values.back());
    }
    BOOST_REQUIRE(outside->read(reads, values, std::nullopt).ok());
    outside->finish_step(r, 0.01);
    auto pushes = std::make_pair(inside->due_pushes(), outside->due_pushes());
    outside->end_boundary();
    return pushes;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(replica_exchange_test)

BOOST_AUTO_TEST_CASE(updates_compose_into_one_per_fragment_as_if_applied_in_turn) {
  const auto x0 = testing::random_vector(32, 1);
  const std::vector<FragmentUpdate> sequences[] = {
      {{0, 1.0f, testing::random_vector(32, 2)}, {0, 1.0f, testing::random_vector(32, 3)}},   // carry, carry
      {{0, 0.0f, testing::random_vector(32, 4)}, {0, 1.0f, testing::random_vector(32, 5)}},   // adopt, carry
      {{0, 1.0f, testing::random_vector(32, 6)}, {0, 0.0f, testing::random_vector(32, 7)}},   // carry, adopt
      {{0, 0.5f, testing::random_vector(32, 8)}, {0, 0.25f, testing::random_vector(32, 9)},
       {0, 1.0f, testing::random_vector(32, 10)}},  // blends, then carry
  };
  for (const auto& sequence : sequences) {
    ReplicaExchange ex = one_fragment_exchange(32);
    std::vector<float> expected = x0;
    for (const auto& u : sequence) {
      apply_update(u, expected);
      ex.post({u}, std::nullopt);
    }
    const ReplicaRequest r = ex.request();
    BOOST_REQUIRE_EQUAL(r.updates.size(), 1u);
    std::vector<float> got = x0;
    apply_update(r.updates[0], got);
    for (size_t i = 0; i < got.size(); ++i) BOOST_CHECK_SMALL(got[i] - expected[i], 1e-5f);
    BOOST_CHECK(ex.request().updates.empty());  // taken
  }
}

BOOST_AUTO_TEST_CASE(an_assignment_heals_a_replica_that_is_not_finite) {
  ReplicaExchange ex = one_fragment_exchange(4);
  ex.post({{0, 1.0f, {1, 1, 1, 1}}, {0, 0.0f, {2, 2, 2, 2}}}, std::nullopt);
  std::vector<float> x = {std::nanf(""), 0, 0, INFINITY};
  apply_update(ex.request().updates[0], x);
  BOOST_CHECK(x == std::vector<float>(4, 2.0f));
}

BOOST_AUTO_TEST_CASE(the_training_thread_reads_what_is_wanted_and_everything_once_the_run_ends) {
  ParamLayout layout;
  for (int i = 0; i < 4; ++i) layout.add("t" + std::to_string(i), {8}, TensorRole::kBody, false);
  ReplicaExchange ex(layout, *plan_fragments(layout, 4));
  ex.want({2, 1}, true);
  ReplicaRequest r = ex.request();
  BOOST_CHECK(r.reads == (std::vector<uint32_t>{1, 2}));
  BOOST_CHECK(r.read_moments && !r.freeze);
  ex.set_stopping();
  r = ex.request();
  BOOST_CHECK(r.freeze);
  BOOST_CHECK(r.reads == (std::vector<uint32_t>{0, 1, 2, 3}));
  int notified = 0;
  ex.set_notify([&] { ++notified; });
  ex.hand(ReplicaStep{});
  ex.hand(ReplicaStep{});
  BOOST_CHECK_EQUAL(notified, 2);
  BOOST_CHECK_EQUAL(ex.steps().size(), 2u);
  BOOST_CHECK(ex.steps().empty());
}

BOOST_AUTO_TEST_CASE(values_read_before_an_adoption_the_core_made_are_not_handed_on) {
  ParamLayout layout;
  for (int i = 0; i < 2; ++i) layout.add("t" + std::to_string(i), {4}, TensorRole::kBody, false);
  ReplicaExchange ex(layout, *plan_fragments(layout, 2));
  ex.want({0, 1}, false);
  const auto read_both = [&] {
    ReplicaStep s;
    s.fragments = {0, 1};
    s.values = {std::vector<float>(4, 1.0f), std::vector<float>(4, 2.0f)};
    return s;
  };
  BOOST_REQUIRE(ex.request().reads.size() == 2);
  ex.post({{1, 1.0f, std::vector<float>(4, 0.5f)}}, std::nullopt);  // the actor adopted fragment 1 meanwhile
  ex.hand(read_both());
  auto steps = ex.steps();
  BOOST_REQUIRE_EQUAL(steps.size(), 1u);
  BOOST_CHECK(steps[0].fragments == std::vector<uint32_t>{0});  // fragment 1's values predate the adoption
  BOOST_CHECK(steps[0].values[0] == std::vector<float>(4, 1.0f));
  // The next request takes the update; what it reads is current.
  BOOST_CHECK_EQUAL(ex.request().updates.size(), 1u);
  ex.hand(read_both());
  BOOST_CHECK_EQUAL(ex.steps()[0].fragments.size(), 2u);
}

BOOST_AUTO_TEST_CASE(values_handed_a_boundary_late_are_judged_by_the_request_that_read_them) {
  ParamLayout layout;
  for (int i = 0; i < 2; ++i) layout.add("t" + std::to_string(i), {4}, TensorRole::kBody, false);
  ReplicaExchange ex(layout, *plan_fragments(layout, 2));
  ex.want({0, 1}, false);
  const auto late = [&](uint64_t read_at) {
    ReplicaStep s;
    s.fragments = {0, 1};
    s.values = {std::vector<float>(4, 1.0f), std::vector<float>(4, 2.0f)};
    s.read_at = read_at;
    return s;
  };
  // A device copies both fragments at one boundary; its values come with the next step.
  const uint64_t first = ex.request().sequence;
  ex.hand(ReplicaStep{});
  ex.post({{1, 1.0f, std::vector<float>(4, 0.5f)}}, std::nullopt);  // adopted after that read
  BOOST_CHECK_GT(ex.request().sequence, first);  // this boundary applies it
  ex.hand(late(first));
  auto steps = ex.steps();
  BOOST_REQUIRE_EQUAL(steps.size(), 2u);
  BOOST_CHECK(steps[0].fragments.empty());
  BOOST_CHECK(steps[1].fragments == std::vector<uint32_t>{0});  // fragment 1's values predate the adoption
  // Read after the adoption and handed late, both are current.
  const uint64_t second = ex.request().sequence;
  ex.hand(ReplicaStep{});
  ex.request();
  ex.hand(late(second));
  BOOST_CHECK_EQUAL(ex.steps()[1].fragments.size(), 2u);
  // A number no request had cannot make values look newer than they are.
  ex.post({{0, 1.0f, std::vector<float>(4, 0.5f)}}, std::nullopt);
  ex.hand(late(UINT64_MAX));
  BOOST_CHECK(ex.steps()[0].fragments == std::vector<uint32_t>{1});
}

BOOST_AUTO_TEST_CASE(lent_values_are_copied_by_the_actor_and_then_released) {
  ParamLayout layout;
  layout.add("a", {3}, TensorRole::kBody, false);
  layout.add("b", {2}, TensorRole::kBody, false);
  ReplicaExchange ex(layout, *plan_fragments(layout, 2));
  ex.want({0, 1}, false);
  ex.request();
  std::vector<float> memory = {1, 2, 3, 4, 5};  // the training thread's buffer: both fragments back to back
  ReplicaStep step;
  step.fragments = {0, 1};
  step.lent = memory;
  const uint64_t number = ex.hand(std::move(step));
  BOOST_CHECK(!ex.released(number));  // not yet copied: the memory must stay as it is
  auto steps = ex.steps();
  BOOST_CHECK(ex.released(number));
  std::fill(memory.begin(), memory.end(), -1.0f);  // reused once released: the step has its own copy
  BOOST_REQUIRE_EQUAL(steps.size(), 1u);
  BOOST_CHECK(steps[0].values == (std::vector<std::vector<float>>{{1, 2, 3}, {4, 5}}));
  BOOST_CHECK(steps[0].lent.empty());
  // Steps no actor will take release what they lent: a new incarnation, and the end.
  step = {};
  step.fragments = {0, 1};
  step.lent = memory;
  const uint64_t dropped = ex.hand(std::move(step));
  ex.begin_incarnation(2);
  BOOST_CHECK(ex.released(dropped));
  step = {};
  step.fragments = {0, 1};
  step.lent = memory;
  const uint64_t last = ex.hand(std::move(step));
  BOOST_CHECK(!ex.released(last));
  ex.set_over("the run is over", false);
  BOOST_CHECK(ex.released(last));
  BOOST_CHECK(ex.steps()[0].fragments.empty());
}

BOOST_AUTO_TEST_CASE(a_step_counts_once_it_trained_on_the_welcomes_values) {
  ReplicaExchange ex = one_fragment_exchange(4);
  ex.begin_incarnation(7);
  ex.request();
  ex.hand(ReplicaStep{});                                  // before any welcome
  ex.post({{0, 0.0f, std::vector<float>(4, 3.0f)}}, std::nullopt);  // the welcome: the global values
  ex.set_welcomed();
  ex.hand(ReplicaStep{});                                  // trained before the welcome was applied
  ex.request();                                            // takes (and applies) the welcome
  ex.hand(ReplicaStep{});                                  // still trained before it: overwritten
  ex.request();
  ex.hand(ReplicaStep{});                                  // trained on the global values
  std::vector<bool> counts;
  for (const auto& s : ex.steps()) counts.push_back(s.counts);
  BOOST_CHECK(counts == (std::vector<bool>{false, false, false, true}));
}

BOOST_AUTO_TEST_CASE(pushes_outside_atoll_match_an_atoll_learners_step_for_step) {
  Twins twins;
  const std::vector<uint32_t> all = {0, 1};
  size_t pushed = 0;
  for (int k = 0; k < 12; ++k) {
    auto [in, out] = twins.step(all);
    BOOST_REQUIRE_EQUAL(in.size(), out.size());
    for (size_t i = 0; i < in.size(); ++i) {
      BOOST_CHECK_EQUAL(in[i].fragment, out[i].fragment);
      BOOST_CHECK_EQUAL(in[i].steps, out[i].steps);
      BOOST_CHECK_EQUAL(in[i].tokens, out[i].tokens);
      BOOST_CHECK(in[i].delta == out[i].delta);
      ++pushed;
    }
  }
  BOOST_CHECK_GE(pushed, 2u);
}

BOOST_AUTO_TEST_CASE(a_fragment_not_read_at_this_boundary_waits_for_one_that_reads_it) {
  Twins twins;
  // Fragment 0 falls due after (0 + 1) * 4 / 2 = 2 steps: not read, not pushed.
  BOOST_CHECK(twins.step({}).second.empty());
  BOOST_CHECK(twins.outside->due_soon().count(0));  // wanted at the next boundary
  BOOST_CHECK(twins.step({}).second.empty());
  Pull pull{0, 7};
  BOOST_CHECK(twins.outside->answer(pull).status().code() == Status::Code::kUnavailable);
  auto [in, out] = twins.step({0});
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_CHECK_EQUAL(out[0].steps, 3u);  // all of its progress, one step late
}

BOOST_AUTO_TEST_CASE(adopting_a_version_outside_atoll_gives_the_same_parameters_as_inside) {
  for (bool merged : {true, false}) {
    Twins twins;
    for (int k = 0; k < 3; ++k) twins.step({0, 1});  // fragment 0 pushed at step 2, then one more step
    std::vector<float> global(twins.inside->fragments()[0].size);
    gather(twins.inside->fragments()[0], twins.inside->parameters(), global);
    for (float& x : global) x += 0.125f;
    const Broadcast b{0, 1, encode_payload(Codec::kFp32, 0, global), false, 0,
                      merged ? std::vector<uint32_t>{0} : std::vector<uint32_t>{}};
    BOOST_REQUIRE(twins.inside->apply(b).ok());
    BOOST_REQUIRE(twins.outside->apply(b).ok());
    twins.take_updates();
    const auto inside = twins.inside->parameters();
    for (size_t i = 0; i < inside.size(); ++i) BOOST_CHECK_SMALL(twins.user[i] - inside[i], 2e-6f);
    BOOST_CHECK(twins.inside->progress() == twins.outside->progress());
  }
}

BOOST_AUTO_TEST_CASE(moments_go_to_and_come_from_the_users_optimizer) {
  Twins twins;
  const size_t n = twins.inside->parameters().size();
  MomentsPull pull{4};
  BOOST_CHECK(!twins.outside->moments_for(pull).ok());  // not read at this boundary
  OptimizerMoments read{9, testing::random_vector(n, 1), testing::random_vector(n, 2)};
  for (float& v : read.v) v = std::abs(v);
  BOOST_REQUIRE(twins.outside->read({}, {}, read).ok());
  auto given = twins.outside->moments_for(pull);
  BOOST_REQUIRE(given.ok());
  BOOST_CHECK_EQUAL(given->state.step, 9);
  std::vector<float> m(n);
  BOOST_REQUIRE(decode_payload(given->state.m, m).ok());
  for (size_t i = 0; i < n; ++i) BOOST_CHECK_SMALL(m[i] - read.m[i], 0.01f * (1 + std::abs(read.m[i])));  // bf16
  BOOST_CHECK(!twins.outside->read({}, {}, OptimizerMoments{1, {1.0f}, {1.0f}}).ok());  // wrong size

  // A restarted learner's welcome brings a peer's moments: handed to the training thread.
  auto model = make_model(twins.t);
  auto fresh = ExchangeReplica::create(0, 2, twins.t, (*model)->layout(), 0, 0);
  Welcome w;
  w.topology = twins.t;
  for (uint32_t p = 0; p < 2; ++p)
    w.fragments.push_back({p, 3, encode_payload(Codec::kFp32, 0, std::vector<float>((*fresh)->fragments()[p].size))});
  w.moments = given->state;
  BOOST_REQUIRE((*fresh)->welcome(w).ok());
  auto moments = (*fresh)->take_moments();
  BOOST_REQUIRE(moments.has_value());
  BOOST_CHECK_EQUAL(moments->step, 9);
  BOOST_CHECK_EQUAL((*fresh)->take_updates().size(), 2u);  // and the global values of both fragments
  const Register r = (*fresh)->make_register("");
  BOOST_CHECK_EQUAL(r.initial_crc, 0u);  // its own initialization is not the seed's
  BOOST_CHECK_EQUAL(r.batch_size, 0u);
  BOOST_CHECK_EQUAL(twins.outside->make_register("").speed, 0.5);
}

BOOST_AUTO_TEST_CASE(a_learner_outside_atoll_needs_decoupled_mode) {
  Topology dp = small_topology();
  dp.mode = Mode::kDp;
  auto model = make_model(dp);
  auto refused = ExchangeReplica::create(0, 1, dp, (*model)->layout(), 0, 0);
  BOOST_CHECK(!refused.ok());
  BOOST_CHECK(refused.status().message().find("decoupled") != std::string_view::npos);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
