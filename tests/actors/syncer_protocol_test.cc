// The syncer's round protocol (docs/design.md section 5), checked message by message
// on CAF's deterministic scheduler in virtual time. The syncer is the real
// actor; the learners are stand-ins that record what they receive, and the
// test speaks for them.
#include <map>

#include <boost/test/unit_test.hpp>

#include <caf/all.hpp>
#include <caf/test/unit_test.hpp>

// CAF's DSL reports through its own test engine; route it to Boost.Test. A
// failed requirement aborts, as in CAF's runner: some run in destructors.
#undef CAF_CHECK
#undef CAF_CHECK_EQUAL
#undef CAF_REQUIRE
#undef CAF_REQUIRE_EQUAL
#undef CAF_FAIL
#undef CAF_MESSAGE
#define CAF_CHECK(...) BOOST_CHECK(__VA_ARGS__)
#define CAF_CHECK_EQUAL(x, y) BOOST_CHECK((x) == (y))
#define ATOLL_CAF_ABORT(msg) \
  do {                       \
    BOOST_ERROR(msg);        \
    std::fflush(nullptr);    \
    std::abort();            \
  } while (false)
#define CAF_REQUIRE(...) \
  do {                   \
    if (!static_cast<bool>(__VA_ARGS__)) ATOLL_CAF_ABORT("CAF_REQUIRE(" #__VA_ARGS__ ") failed"); \
  } while (false)
#define CAF_REQUIRE_EQUAL(x, y) CAF_REQUIRE((x) == (y))
#define CAF_FAIL(msg) ATOLL_CAF_ABORT(msg)
#define CAF_MESSAGE(msg) BOOST_TEST_MESSAGE(msg)
#define FAIL(msg) CAF_FAIL(msg)  // CAF 0.17.6's dsl.hpp calls an undeclared FAIL()
#include <caf/test/dsl.hpp>

namespace caf::test {
// Normally defined by CAF's test runner, which Boost.Test replaces here.
int engine::argc() { return 0; }
char** engine::argv() { return nullptr; }
}  // namespace caf::test

#include <cmath>

#include "actors.h"
#include "atoll/atoms.h"
#include "atoll/job.h"
#include "atoll/messages.h"
#include "test_support.h"

namespace atl {
namespace {

using namespace std::chrono_literals;

struct TestConfig : caf::actor_system_config {
  TestConfig() { register_types(*this); }
};

constexpr float kEta = 0.7f, kMu = 0.8f;  // Nesterov from zero velocity moves 1.26 g

// mlp 4-5-3 (43 parameters) on synthetic data; one fragment (AVG: it holds
// the head); H = 4; K = 1; grace = gamma * tau * T = 0.2 s with T = 0.1 s.
Topology small_topology() {
  Topology t = testing::tiny_mlp_topology();
  t.data.examples = 64;
  t.learners.push_back({0.5, 8});  // a third, slower learner
  t.outer.sync_every = 4;
  t.outer.quorum = 1;
  t.outer.overlap = 2;
  t.outer.grace_gamma = 1.0;
  t.outer.grace_cap_steps = 2.0;
  t.outer.push_codec = Codec::kFp32;
  t.outer.broadcast_codec = Codec::kFp32;
  t.outer.nesterov = {kEta, kMu};
  t.outer.carry_progress = false;  // a broadcast overwrites: the values checked are the global ones
  t.tokens = 1'000'000'000;  // never reached
  return t;
}

constexpr double kStepSeconds = 0.1;

struct Fixture : test_coordinator_fixture<TestConfig> {
  Topology topology = small_topology();
  std::shared_ptr<Directory> directory = std::make_shared<Directory>();
  std::shared_ptr<RunRecords> records = make_records(16);
  caf::actor syncer;
  std::vector<caf::actor> learners;
  std::vector<std::shared_ptr<std::vector<Message>>> inbox;  // what each learner received
  std::vector<float> theta0;
  size_t params = 0;

  explicit Fixture(Topology t = small_topology()) : topology(std::move(t)) {
    SyncerArgs args;
    args.topology = topology;
    args.directory = directory;
    args.records = records;
    args.use_checkpointer = false;
    args.tick_seconds = 0.0;  // no periodic timer: the deterministic scheduler must run dry
    syncer = spawn_syncer(sys, args);
    for (size_t m = 0; m < topology.learners.size(); ++m) {
      auto box = std::make_shared<std::vector<Message>>();
      inbox.push_back(box);
      // The inbox is an argument, not a capture: CAF 0.17 spawns argument-less
      // function actors through a null reference (UBSan reports it).
      learners.push_back(sys.spawn(
          [](caf::event_based_actor*, std::shared_ptr<std::vector<Message>> inbox_of) -> caf::behavior {
            return {[inbox_of](Packet& p) {
              auto msg = decode_message(p.bytes);
              BOOST_REQUIRE_MESSAGE(msg.ok(), msg.status().to_string());
              inbox_of->push_back(std::move(*msg));
            }};
          },
          box));
    }
    auto model = make_model(topology);
    theta0 = initial_parameters(**model, topology);
    params = theta0.size();
    consume_messages();
  }

  ~Fixture() override {
    // The actor system waits for every actor on destruction: stop ours.
    for (auto& l : learners) caf::anon_send_exit(l, caf::exit_reason::kill);
    caf::anon_send_exit(syncer, caf::exit_reason::kill);
    run();
  }

  uint64_t fingerprint() const { return (*make_model(topology))->layout().fingerprint(); }

  void send(size_t m, const Message& msg) {
    caf::send_as(learners[m], syncer, Packet{encode_message(msg)});
    consume_messages();
  }
  void send_bytes(size_t m, std::vector<uint8_t> bytes) {
    caf::send_as(learners[m], syncer, Packet{std::move(bytes)});
    consume_messages();
  }
  void join(size_t m) { send(m, Register{uint32_t(m), 1, fingerprint(), "", {}}); }
  void progress(size_t m, uint64_t steps, uint64_t version = 0) {
    send(m, Progress{uint32_t(m), 1, steps, steps * 8, kStepSeconds, {{version, steps}}, 1.0f});
  }
  Payload constant(float v) const { return encode_payload(Codec::kFp32, 0, std::vector<float>(params, v)); }
  // A learner's push of the progress since its previous one (steps (since, through] of its own).
  Push push(size_t m, uint64_t round, uint64_t base, uint64_t steps, uint64_t tokens, float v) {
    Push p{uint32_t(m), 1, 0, round, base, steps, tokens, double(steps) * kStepSeconds, constant(v)};
    p.since = pushed_through[m];
    p.through = pushed_through[m] += steps;
    return p;
  }
  std::map<size_t, uint64_t> pushed_through;

  OptimizerState moments_of(float v) const {
    return OptimizerState{100, encode_payload(Codec::kBf16, 0, std::vector<float>(params, v)),
                          encode_payload(Codec::kBf16, 0, std::vector<float>(params, v * v))};
  }
  // A learner's base copy of the single fragment at `version`, all values `v`.
  std::vector<FragmentValues> base_of(uint64_t version, float v) const { return {{0, version, constant(v)}}; }

  template <class T>
  std::vector<T> received(size_t m) const {
    std::vector<T> out;
    for (const auto& msg : *inbox[m])
      if (auto* x = std::get_if<T>(&msg)) out.push_back(*x);
    return out;
  }
  void clear() {
    for (auto& box : inbox) box->clear();
  }
  SyncerStats stats() {
    self->send(syncer, snapshot_atom_v);
    consume_messages();
    self->receive([](FinalModel&) {});  // the snapshot's answer
    return records->syncer()->stats;
  }
  // Theta, as the syncer holds it (not as broadcast).
  std::vector<float> global() {
    self->send(syncer, snapshot_atom_v);
    consume_messages();
    std::vector<float> theta;
    self->receive([&](FinalModel& m) { theta = std::move(m.theta); });
    BOOST_REQUIRE_EQUAL(theta.size(), params);
    return theta;
  }
  // Theta as broadcast, checked against theta0 + shift for every parameter.
  void expect_theta(const Broadcast& b, float shift) {
    std::vector<float> values(params);
    BOOST_REQUIRE(decode_payload(b.values, values).ok());
    for (size_t i = 0; i < params; ++i) BOOST_CHECK_CLOSE(values[i], theta0[i] + shift, 1e-3);
  }
};

}  // namespace

// K = M = 3: a round must not hang on a dead learner.
namespace {
// A budget of 40 tokens (5 steps of 8 in all) ends the run.
struct Budget : Fixture {
  static Topology topology_with_budget() {
    Topology t = small_topology();
    t.tokens = 40;
    return t;
  }
  Budget() : Fixture(topology_with_budget()) {}
};
// int4 broadcasts in blocks of 8: differences to what the learners hold.
struct Int4Broadcasts : Fixture {
  static Topology topology_int4() {
    Topology t = small_topology();
    t.outer.broadcast_codec = Codec::kInt4;
    t.outer.broadcast_block = 8;
    return t;
  }
  Int4Broadcasts() : Fixture(topology_int4()) {}
};
struct QuorumOfAll : Fixture {
  static Topology topology_of_all() {
    Topology t = small_topology();
    t.outer.quorum = 3;
    return t;
  }
  QuorumOfAll() : Fixture(topology_of_all()) {}
};
}  // namespace

BOOST_FIXTURE_TEST_SUITE(syncer_protocol_test, Fixture)

BOOST_AUTO_TEST_CASE(registration_welcomes_with_the_global_model_and_refuses_strangers) {
  join(0);
  auto w = received<Welcome>(0);
  BOOST_REQUIRE_EQUAL(w.size(), 1u);
  BOOST_REQUIRE_EQUAL(w[0].fragments.size(), 1u);
  BOOST_CHECK_EQUAL(w[0].fragments[0].version, 0u);
  std::vector<float> values(params);
  BOOST_REQUIRE(decode_payload(w[0].fragments[0].values, values).ok());
  BOOST_CHECK(values == theta0);
  BOOST_CHECK(w[0].topology == topology);

  send(1, Register{7, 1, fingerprint(), "", {}});      // no learner 7 in this topology
  send(1, Register{1, 1, fingerprint() ^ 1, "", {}});  // another model
  send(1, Register{0, 1, fingerprint(), "", {}});      // another actor claims connected learner 0
  auto r1 = received<Reject>(1);
  BOOST_REQUIRE_EQUAL(r1.size(), 3u);
  BOOST_CHECK(r1[0].reason == RejectReason::kUnknownLearner);
  BOOST_CHECK(r1[1].reason == RejectReason::kFingerprintMismatch);
  BOOST_CHECK(r1[2].reason == RejectReason::kDuplicateLearner);
  send(0, Register{0, 1, fingerprint(), "", {}});  // learner 0 itself, again: a resync
  BOOST_CHECK(received<Reject>(0).empty());
  BOOST_CHECK_EQUAL(received<Welcome>(0).size(), 2u);
}

BOOST_AUTO_TEST_CASE(a_learner_with_the_same_initialization_is_welcomed_without_values) {
  const uint32_t crc = parameters_crc(theta0);
  send(0, Register{0, 1, fingerprint(), "", {}, crc});
  BOOST_CHECK_EQUAL(received<Welcome>(0).at(0).fragments.at(0).values.count, 0u);
  send(1, Register{1, 1, fingerprint(), "", {}, crc ^ 1});  // it would make other values
  BOOST_CHECK_EQUAL(received<Welcome>(1).at(0).fragments.at(0).values.count, params);
  progress(0, 4);
  send(0, push(0, received<Pull>(0).at(0).round, 0, 4, 32, 1.0f));
  send(1, push(1, received<Pull>(1).at(0).round, 0, 0, 0, 0.0f));
  BOOST_REQUIRE_EQUAL(received<Broadcast>(0).size(), 1u);
  send(2, Register{2, 1, fingerprint(), "", {}, crc});  // version 1 is no initialization
  BOOST_CHECK_EQUAL(received<Welcome>(2).at(0).fragments.at(0).values.count, params);
}

BOOST_AUTO_TEST_CASE(a_round_falls_due_when_k_learners_did_h_steps_and_every_live_learner_is_pulled) {
  for (size_t m = 0; m < 3; ++m) join(m);
  progress(0, 3);
  progress(1, 3);
  for (size_t m = 0; m < 3; ++m) BOOST_CHECK(received<Pull>(m).empty());  // H = 4 not reached
  progress(0, 4);
  for (size_t m = 0; m < 3; ++m) {
    auto pulls = received<Pull>(m);
    BOOST_REQUIRE_EQUAL(pulls.size(), 1u);
    BOOST_CHECK_EQUAL(pulls[0].fragment, 0u);
    BOOST_CHECK_EQUAL(pulls[0].round, received<Pull>(0)[0].round);
  }
  progress(1, 5);  // a second learner due does not open a second round
  BOOST_CHECK_EQUAL(received<Pull>(1).size(), 1u);
}

BOOST_AUTO_TEST_CASE(steps_before_adopting_the_current_version_do_not_count) {
  for (size_t m = 0; m < 2; ++m) join(m);
  // Learner 1 reports 9 steps, but on version 0 while the syncer is at 1 after a round.
  progress(0, 4);
  const uint64_t round = received<Pull>(0)[0].round;
  send(0, push(0, round, 0, 4, 32, 0.1f));
  send(1, push(1, round, 0, 0, 0, 0.0f));  // all answered: the round closes
  BOOST_REQUIRE_EQUAL(received<Broadcast>(0).size(), 1u);
  clear();
  progress(1, 9, /*version=*/0);
  BOOST_CHECK(received<Pull>(1).empty());
  progress(1, 4, /*version=*/1);
  BOOST_CHECK_EQUAL(received<Pull>(1).size(), 1u);
}

BOOST_AUTO_TEST_CASE(quorum_then_grace_then_merge_and_everyone_gets_the_broadcast) {
  for (size_t m = 0; m < 3; ++m) join(m);
  for (size_t m = 0; m < 3; ++m) progress(m, m == 0 ? 4 : 1);  // every learner's step time is known: T = 0.1 s
  const uint64_t round = received<Pull>(0)[0].round;
  send(0, push(0, round, 0, 4, 32, 1.0f));  // quorum (K = 1): the grace window starts
  BOOST_CHECK(received<Broadcast>(0).empty());
  send(1, push(1, round, 0, 4, 32, 1.0f));  // within grace: merged
  advance_time(150ms);
  consume_messages();
  BOOST_CHECK(received<Broadcast>(0).empty());  // learner 2 may still answer
  advance_time(100ms);                           // past 0.2 s: the grace window closes the round
  consume_messages();
  for (size_t m = 0; m < 3; ++m) {  // learner 2 did not answer and still gets it
    auto b = received<Broadcast>(m);
    BOOST_REQUIRE_EQUAL(b.size(), 1u);
    BOOST_CHECK_EQUAL(b[0].version, 1u);
    expect_theta(b[0], (1.0f + kMu) * kEta * 1.0f);
  }
  const auto s = stats();
  BOOST_CHECK_EQUAL(s.rounds, 1u);
  BOOST_CHECK_EQUAL(s.quorum_mean(), 2.0);
  BOOST_CHECK_GT(s.grace_wait_mean(), 0.19);
}

BOOST_AUTO_TEST_CASE(a_slow_learners_partial_progress_is_merged_with_its_token_weight) {
  for (size_t m = 0; m < 3; ++m) join(m);
  for (size_t m = 0; m < 3; ++m) progress(m, m == 0 ? 4 : 1);
  const uint64_t round = received<Pull>(0)[0].round;
  send(0, push(0, round, 0, 4, 32, 1.0f));   // weight 32^2 / 4 = 256
  send(2, push(2, round, 0, 2, 16, -0.5f));  // slow: half the steps, weight 16^2 / 2 = 128
  send(1, push(1, round, 0, 0, 0, 9.0f));    // no step since its base: weight 0
  // Everyone answered: the round closes at once, without waiting out the grace window.
  auto b = received<Broadcast>(0);
  BOOST_REQUIRE_EQUAL(b.size(), 1u);
  // merged progress (256 * 1 - 128 * 0.5) / 384 = 0.5; Nesterov from rest moves 1.26x that
  expect_theta(b[0], (1.0f + kMu) * kEta * 0.5f);
}

BOOST_AUTO_TEST_CASE(an_answer_after_its_round_closed_is_late_and_not_merged) {
  for (size_t m = 0; m < 3; ++m) join(m);
  for (size_t m = 0; m < 3; ++m) progress(m, m == 0 ? 4 : 1);
  const uint64_t round = received<Pull>(0)[0].round;
  send(0, push(0, round, 0, 4, 32, 1.0f));
  advance_time(250ms);
  consume_messages();
  BOOST_REQUIRE_EQUAL(received<Broadcast>(2).size(), 1u);
  send(2, push(2, round, 0, 3, 24, 5.0f));  // too late
  BOOST_CHECK_EQUAL(received<Broadcast>(2).size(), 1u);  // nothing merged, nothing sent
  BOOST_CHECK(received<Reject>(2).empty());              // late is not an offence
  const auto s = stats();
  BOOST_CHECK_EQUAL(s.late, 1u);
  BOOST_CHECK_EQUAL(s.rounds, 1u);
}

BOOST_AUTO_TEST_CASE(a_stale_push_is_refused) {
  for (size_t m = 0; m < 2; ++m) join(m);
  for (uint64_t v = 0; v < 2; ++v) {  // two rounds: the global version becomes 2
    progress(0, 4, v);
    const uint64_t round = received<Pull>(0).back().round;
    send(0, push(0, round, v, 4, 32, 0.1f));
    send(1, push(1, round, v, 0, 0, 0.0f));
  }
  BOOST_REQUIRE_EQUAL(received<Broadcast>(1).size(), 2u);
  send(1, push(1, 0, 0, 8, 64, 0.1f));  // based on version 0 < 2 - max_staleness
  auto r = received<Reject>(1);
  BOOST_REQUIRE_EQUAL(r.size(), 1u);
  BOOST_CHECK(r[0].reason == RejectReason::kStale);
  BOOST_CHECK_EQUAL(stats().stale_refused, 1u);
}

BOOST_AUTO_TEST_CASE(bad_pushes_are_refused_counted_and_never_reach_theta) {
  for (size_t m = 0; m < 2; ++m) join(m);
  progress(0, 4);
  const uint64_t round = received<Pull>(0)[0].round;
  send_bytes(1, {1, 2, 3, 4, 5, 6, 7});                      // not a message
  Push wrong_size = push(1, round, 0, 4, 32, 1.0f);
  wrong_size.delta = encode_payload(Codec::kFp32, 0, std::vector<float>(params + 1, 1.0f));
  send(1, wrong_size);
  Push nan = push(1, round, 0, 4, 32, std::numeric_limits<float>::quiet_NaN());
  send(1, nan);
  Push bad_fragment = push(1, round, 0, 4, 32, 1.0f);
  bad_fragment.fragment = 5;
  send(1, bad_fragment);
  send(1, push(0, round, 0, 4, 32, 1.0f));  // learner 1's actor claims to be learner 0
  Push truncated = push(1, round, 0, 4, 32, 1.0f);
  truncated.delta.bytes.resize(10);
  send(1, truncated);
  auto corrupted = encode_message(push(1, round, 0, 4, 32, 1.0f));
  corrupted[corrupted.size() / 2] ^= 0x10;  // a byte flipped in transit
  send_bytes(1, corrupted);
  send_bytes(1, std::vector<uint8_t>(64 << 20, 0));  // 64 MiB: far above what this model needs
  std::vector<RejectReason> reasons;
  for (const auto& r : received<Reject>(1)) reasons.push_back(r.reason);
  const std::vector<RejectReason> expected = {RejectReason::kMalformed,      RejectReason::kBadShape,
                                              RejectReason::kNonFinite,      RejectReason::kUnknownFragment,
                                              RejectReason::kUnknownLearner, RejectReason::kMalformed,
                                              RejectReason::kMalformed,      RejectReason::kTooLarge};
  BOOST_CHECK(reasons == expected);
  BOOST_CHECK_EQUAL(stats().rejected, 8u);
  // The round goes on with the good answers, and Theta stays finite.
  send(0, push(0, round, 0, 4, 32, 1.0f));
  send(1, push(1, round, 0, 4, 32, 1.0f));
  auto b = received<Broadcast>(0);
  BOOST_REQUIRE_EQUAL(b.size(), 1u);
  expect_theta(b[0], (1.0f + kMu) * kEta);
}

BOOST_AUTO_TEST_CASE(at_the_start_every_learner_is_welcomed_without_waiting_for_moments) {
  join(0);
  progress(0, 2);
  join(1);  // incarnation 1: fresh like everyone at the start
  BOOST_CHECK(received<MomentsPull>(0).empty());
  BOOST_CHECK_EQUAL(received<Welcome>(1).size(), 1u);
}

BOOST_AUTO_TEST_CASE(a_learner_that_joins_mid_round_is_not_pulled_but_gets_the_broadcast) {
  join(0);
  join(1);
  progress(0, 4);
  progress(1, 1);
  const uint64_t round = received<Pull>(0)[0].round;
  send(2, Register{2, 2, fingerprint(), "", {}});  // restarted: its welcome waits for a peer's moments
  BOOST_CHECK(received<Welcome>(2).empty());
  auto asked = received<MomentsPull>(0);  // the peer with the most steps
  BOOST_REQUIRE_EQUAL(asked.size(), 1u);
  send(0, Moments{asked[0].request, moments_of(0.25f)});
  auto w = received<Welcome>(2);
  BOOST_REQUIRE_EQUAL(w.size(), 1u);
  BOOST_REQUIRE(w[0].moments.has_value());
  BOOST_CHECK(w[0].moments->m == moments_of(0.25f).m);
  BOOST_CHECK(received<Pull>(2).empty());  // adopted version 0 just now: nothing to contribute, nothing to pull
  send(0, push(0, round, 0, 4, 32, 1.0f));
  send(1, push(1, round, 0, 1, 8, 1.0f));
  auto b = received<Broadcast>(2);
  BOOST_REQUIRE_EQUAL(b.size(), 1u);
  BOOST_CHECK_EQUAL(b[0].version, 1u);
}

BOOST_AUTO_TEST_CASE(a_cancelled_round_does_not_reopen_without_progress) {
  for (size_t m = 0; m < 2; ++m) join(m);
  progress(0, 4);
  progress(1, 1);
  const uint64_t round = received<Pull>(0)[0].round;
  send(1, push(1, round, 0, 0, 0, 0.0f));  // nothing to give
  caf::anon_send_exit(learners[0], caf::exit_reason::kill);  // the due learner dies: no quorum possible
  consume_messages();
  BOOST_CHECK_EQUAL(stats().cancelled_rounds, 1u);
  for (int i = 0; i < 5; ++i) progress(1, 2);  // below H: no new round, no new cancellation
  BOOST_CHECK_EQUAL(stats().cancelled_rounds, 1u);
  progress(1, 4);  // due again: learner 1 is pulled afresh
  BOOST_CHECK_EQUAL(received<Pull>(1).size(), 2u);
}

BOOST_AUTO_TEST_CASE(without_a_peers_answer_a_restarted_learner_is_welcomed_after_a_timeout) {
  join(0);
  progress(0, 2);
  send(1, Register{1, 2, fingerprint(), "", {}});  // a restarted learner
  BOOST_REQUIRE_EQUAL(received<MomentsPull>(0).size(), 1u);  // learner 0 never answers
  advance_time(2100ms);
  consume_messages();
  BOOST_CHECK(received<Welcome>(1).empty());
  advance_time(200ms);  // past the wait: 2 s and two of the peer's 0.1 s steps (and 43 parameters' bytes)
  consume_messages();
  auto w = received<Welcome>(1);
  BOOST_REQUIRE_EQUAL(w.size(), 1u);
  BOOST_CHECK(!w[0].moments.has_value());
}

BOOST_AUTO_TEST_CASE(a_learner_that_dies_while_its_welcome_waits_is_never_welcomed) {
  join(0);
  progress(0, 2);
  send(1, Register{1, 2, fingerprint(), "", {}});  // restarted: waits for learner 0's moments
  auto asked = received<MomentsPull>(0);
  BOOST_REQUIRE_EQUAL(asked.size(), 1u);
  caf::anon_send_exit(learners[1], caf::exit_reason::kill);
  consume_messages();
  send(0, Moments{asked[0].request, moments_of(0.5f)});  // arrives after the death
  self->send(syncer, snapshot_atom_v);
  consume_messages();
  BOOST_CHECK(!records->syncer()->learners[1].connected);
}

// A learner that restarts while the syncer is down is back after a failure,
// though no syncer saw it fail: the tape must say so, or a chaos run's
// re-integration bound reports a learner that is training as lost.
BOOST_AUTO_TEST_CASE(a_learner_restarted_while_the_syncer_was_down_is_recorded_as_back) {
  for (size_t m = 0; m < 3; ++m) join(m);
  stats();  // the syncer publishes what it knows, as its periodic tick does
  caf::anon_send_exit(syncer, caf::exit_reason::kill);
  consume_messages();
  const size_t logged = records->log->size();
  SyncerArgs args;
  args.topology = topology;
  args.directory = directory;
  args.records = records;
  args.use_checkpointer = false;
  args.tick_seconds = 0.0;
  syncer = spawn_syncer(sys, args);  // the supervisor's restart
  consume_messages();
  send(0, Register{0, 1, fingerprint(), "", {}});  // the same incarnation reconnects
  send(2, Register{2, 2, fingerprint(), "", {}});  // a new one: restarted meanwhile
  advance_time(2100ms);                            // past the wait for a peer's moments
  consume_messages();
  BOOST_REQUIRE_EQUAL(received<Welcome>(2).size(), 2u);
  const auto events = records->log->events();
  size_t back = 0;
  for (size_t i = logged; i < events.size(); ++i)
    if (const auto* r = std::get_if<event::Registered>(&events[i].event)) {
      ++back;
      BOOST_CHECK_EQUAL(r->learner, 2u);
      BOOST_CHECK_EQUAL(r->incarnation, 2u);
    }
  BOOST_CHECK_EQUAL(back, 1u);
}

BOOST_AUTO_TEST_CASE(a_restarted_syncer_takes_the_newest_base_a_learner_adopted) {
  // This syncer has just started (version 0); learners come back with the
  // versions they adopted from the syncer before it.
  send(0, Register{0, 1, fingerprint(), "", base_of(7, 0.5f)});
  send(1, Register{1, 1, fingerprint(), "", base_of(9, 0.75f)});
  send(2, Register{2, 1, fingerprint(), "", base_of(8, 0.6f)});
  auto w2 = received<Welcome>(2);
  BOOST_REQUIRE_EQUAL(w2.size(), 1u);
  BOOST_CHECK_EQUAL(w2[0].fragments[0].version, 9u);  // not 0, not 8: no adopted version is lost
  std::vector<float> values(params);
  BOOST_REQUIRE(decode_payload(w2[0].fragments[0].values, values).ok());
  BOOST_CHECK_EQUAL(values[0], 0.75f);
  // Learner 0, welcomed at 7, is moved forward to 9 by a broadcast.
  auto b0 = received<Broadcast>(0);
  BOOST_REQUIRE(!b0.empty());
  BOOST_CHECK_EQUAL(b0.back().version, 9u);
  BOOST_CHECK_EQUAL(stats().recovered_fragments, 2u);  // 7, then 9
}

BOOST_AUTO_TEST_CASE(outside_recovery_a_base_ahead_of_the_syncer_is_ignored) {
  join(0);
  advance_time(std::chrono::seconds(11));  // past the recovery window
  consume_messages();
  send(1, Register{1, 1, fingerprint(), "", base_of(50, 9.0f)});
  auto w = received<Welcome>(1);
  BOOST_REQUIRE_EQUAL(w.size(), 1u);
  BOOST_CHECK_EQUAL(w[0].fragments[0].version, 0u);  // the syncer's own, not the learner's claim
  BOOST_CHECK(received<Broadcast>(0).empty());
  BOOST_CHECK_EQUAL(stats().recovered_fragments, 0u);
}

BOOST_AUTO_TEST_CASE(unasked_pushes_count_as_answers_and_their_learners_are_not_pulled) {
  for (size_t m = 0; m < 2; ++m) join(m);
  progress(1, 1);
  send(0, push(0, 0, 0, 4, 32, 1.0f));  // due: pushed unasked at H steps
  BOOST_CHECK(received<Pull>(0).empty());  // already answered
  BOOST_REQUIRE_EQUAL(received<Pull>(1).size(), 1u);
  send(1, push(1, received<Pull>(1)[0].round, 0, 1, 8, 1.0f));
  BOOST_CHECK_EQUAL(received<Broadcast>(0).size(), 1u);
}

BOOST_AUTO_TEST_CASE(a_refused_answer_does_not_hold_its_round_open) {
  for (size_t m = 0; m < 2; ++m) join(m);
  progress(0, 4);
  progress(1, 4);
  const uint64_t round = received<Pull>(0)[0].round;
  send(0, push(0, round, 0, 4, 32, std::numeric_limits<float>::quiet_NaN()));  // refused
  BOOST_REQUIRE_EQUAL(received<Reject>(0).size(), 1u);
  send(1, push(1, round, 0, 4, 32, 1.0f));  // the only good answer: quorum, and nobody left to wait for
  auto b = received<Broadcast>(1);
  BOOST_REQUIRE_EQUAL(b.size(), 1u);
  expect_theta(b[0], (1.0f + kMu) * kEta);
}

BOOST_AUTO_TEST_CASE(the_same_progress_is_never_merged_twice) {
  for (size_t m = 0; m < 2; ++m) join(m);
  const Push due = push(0, 0, 0, 4, 32, 1.0f);  // unasked, based on version 0
  progress(1, 1);
  send(0, due);
  send(1, push(1, received<Pull>(1)[0].round, 0, 1, 8, 1.0f));
  BOOST_REQUIRE_EQUAL(received<Broadcast>(0).size(), 1u);  // version 1
  progress(1, 4, 1);  // a round of version 1 opens ...
  BOOST_REQUIRE_EQUAL(received<Pull>(0).size(), 1u);
  send(0, due);       // ... and a duplicate of the merged push arrives
  const auto s = stats();
  BOOST_CHECK_EQUAL(s.late, 1u);
  BOOST_CHECK_EQUAL(s.merged_pushes, 2u);
}

// Two pushes of one learner in flight, from the same base: once the later
// (which holds the earlier's progress too) is merged, the earlier is late, and
// the broadcast names the steps it merged.
BOOST_AUTO_TEST_CASE(a_push_holding_progress_already_merged_is_late) {
  for (size_t m = 0; m < 2; ++m) join(m);
  Push earlier = push(0, 0, 0, 4, 32, 1.0f);  // steps (0, 4]
  Push later = push(0, 0, 0, 8, 64, 1.0f);
  later.since = 0;  // steps (0, 12]: the earlier one's too
  progress(1, 1);
  send(0, later);
  send(1, push(1, received<Pull>(1)[0].round, 0, 1, 8, 1.0f));
  const auto b = received<Broadcast>(0);
  BOOST_REQUIRE_EQUAL(b.size(), 1u);
  BOOST_REQUIRE_EQUAL(b[0].merged.size(), b[0].merged_through.size());
  for (size_t i = 0; i < b[0].merged.size(); ++i)
    if (b[0].merged[i] == 0) BOOST_CHECK_EQUAL(b[0].merged_through[i], 12u);
  progress(1, 4, 1);  // a round of version 1 opens ...
  send(0, earlier);   // ... and the earlier push arrives, reordered
  const auto s = stats();
  BOOST_CHECK_EQUAL(s.late, 1u);
  BOOST_CHECK_EQUAL(s.merged_pushes, 2u);
}

BOOST_AUTO_TEST_CASE(a_finite_but_huge_update_never_makes_theta_non_finite) {
  for (size_t m = 0; m < 1; ++m) join(m);
  progress(0, 4);
  const uint64_t round = received<Pull>(0)[0].round;
  send(0, push(0, round, 0, 4, 32, 3e38f));  // outer step overflows to infinity
  const auto s = stats();
  BOOST_CHECK_EQUAL(s.rounds, 0u);
  BOOST_CHECK_EQUAL(s.discarded_rounds, 1u);
  for (const auto& b : received<Broadcast>(0)) {  // nothing non-finite was ever sent
    std::vector<float> values(params);
    BOOST_CHECK(decode_payload(b.values, values).ok());
  }
  progress(0, 5);  // and the fragment is not stuck: a new round opens
  BOOST_CHECK_EQUAL(received<Pull>(0).size(), 2u);
}

BOOST_FIXTURE_TEST_CASE(the_run_ends_with_a_last_round_that_waits_for_every_learner, Budget) {
  for (size_t m = 0; m < 3; ++m) join(m);
  progress(0, 2);
  progress(1, 2);
  BOOST_CHECK(received<Pull>(0).empty());
  progress(2, 1);  // 40 tokens: the budget is reached, below H = 4 steps
  for (size_t m = 0; m < 3; ++m) {
    auto pulls = received<Pull>(m);
    BOOST_REQUIRE_EQUAL(pulls.size(), 1u);
    BOOST_CHECK(pulls[0].last);
  }
  const uint64_t round = received<Pull>(0)[0].round;
  send(0, push(0, round, 0, 2, 16, 1.0f));
  send(1, push(1, round, 0, 2, 16, 1.0f));
  BOOST_CHECK(received<Broadcast>(0).empty());  // learner 2's progress counts too: wait for it
  BOOST_CHECK(received<Done>(0).empty());
  BOOST_CHECK(!records->latch.sealed());
  send(2, push(2, round, 0, 1, 8, 1.0f));
  for (size_t m = 0; m < 3; ++m) {
    auto b = received<Broadcast>(m);
    BOOST_REQUIRE_EQUAL(b.size(), 1u);
    expect_theta(b[0], (1.0f + kMu) * kEta * 1.0f);
    BOOST_CHECK((b[0].merged == std::vector<uint32_t>{0, 1, 2}));
    BOOST_CHECK_EQUAL(received<Done>(m).size(), 1u);
  }
  BOOST_CHECK(records->latch.sealed());
}

BOOST_FIXTURE_TEST_CASE(the_last_round_stops_waiting_for_a_learner_that_never_answers, Budget) {
  for (size_t m = 0; m < 3; ++m) join(m);
  for (size_t m = 0; m < 3; ++m) progress(m, m == 2 ? 1 : 2);
  const uint64_t round = received<Pull>(0).at(0).round;
  send(0, push(0, round, 0, 2, 16, 1.0f));
  send(1, push(1, round, 0, 2, 16, -1.0f));
  advance_time(900ms);  // flush_seconds: 3 step times, at least 1 s
  consume_messages();
  BOOST_CHECK(!records->latch.sealed());
  advance_time(200ms);
  consume_messages();
  auto b = received<Broadcast>(2);
  BOOST_REQUIRE_EQUAL(b.size(), 1u);
  expect_theta(b[0], 0.0f);  // +1 and -1 with equal weights
  BOOST_CHECK((b[0].merged == std::vector<uint32_t>{0, 1}));
  BOOST_CHECK_EQUAL(received<Done>(2).size(), 1u);
  BOOST_CHECK(records->latch.sealed());
}

// Run::stop() and the time limit reach the syncer as a message, not a flag it polls.
BOOST_FIXTURE_TEST_CASE(an_end_message_starts_the_last_round_and_seal_ends_it_at_once, Fixture) {
  for (size_t m = 0; m < 3; ++m) join(m);
  progress(0, 1);
  BOOST_CHECK(received<Pull>(0).empty());  // not due: 1 step of H = 4
  self->send(syncer, end_atom_v, std::string("the run was stopped"));
  consume_messages();
  for (size_t m = 0; m < 3; ++m) {
    auto pulls = received<Pull>(m);
    BOOST_REQUIRE_EQUAL(pulls.size(), 1u);
    BOOST_CHECK(pulls[0].last);
  }
  self->send(syncer, end_atom_v, std::string("again"));  // once is enough: no second last round
  consume_messages();
  BOOST_CHECK_EQUAL(received<Pull>(0).size(), 1u);
  BOOST_CHECK(!records->latch.sealed());
  self->send(syncer, seal_atom_v);  // Run::wait() gave up on the answers
  consume_messages();
  BOOST_CHECK(records->latch.sealed());
  for (size_t m = 0; m < 3; ++m) BOOST_CHECK_EQUAL(received<Done>(m).size(), 1u);
}

BOOST_FIXTURE_TEST_CASE(int_broadcasts_are_differences_whose_rounding_is_sent_with_the_next, Int4Broadcasts) {
  join(0);
  std::vector<float> copy(params);  // what learner 0 holds: its welcome, then every difference added
  BOOST_REQUIRE(decode_payload(received<Welcome>(0).at(0).fragments.at(0).values, copy).ok());
  BOOST_CHECK(copy == theta0);
  const std::vector<float> steps_of = testing::random_vector(params, 7, 0.05);
  for (uint64_t v = 0; v < 6; ++v) {
    progress(0, 4, v);
    const uint64_t round = received<Pull>(0).back().round;
    Push p = push(0, round, v, 4, 32, 0.0f);
    std::vector<float> delta = steps_of;
    for (float& x : delta) x *= static_cast<float>(v + 1);  // a different shape every round
    p.delta = encode_payload(Codec::kFp32, 0, delta);
    send(0, p);
    auto b = received<Broadcast>(0);
    BOOST_REQUIRE_EQUAL(b.size(), v + 1);
    BOOST_REQUIRE(b.back().delta);
    BOOST_CHECK_EQUAL(b.back().base_version, v);
    BOOST_CHECK(b.back().values.codec == Codec::kInt4);
    std::vector<float> diff(params);
    BOOST_REQUIRE(decode_payload(b.back().values, diff).ok());
    for (size_t i = 0; i < params; ++i) copy[i] += diff[i];
  }
  // The copy is within one rounding of Theta: errors do not pile up over rounds.
  const auto theta = global();
  const double drift = [&] {
    double worst = 0.0;
    for (size_t i = 0; i < params; ++i) worst = std::max(worst, std::fabs(double(copy[i]) - theta[i]));
    return worst;
  }();
  double last_step = 0.0;  // the largest half-step of the last difference's blocks
  std::vector<float> last(params);
  BOOST_REQUIRE(decode_payload(received<Broadcast>(0).back().values, last).ok());
  for (float x : last) last_step = std::max(last_step, double(std::fabs(x)) / 7.0 / 2.0);
  BOOST_TEST_MESSAGE("copy vs Theta: " << drift << ", half a step of the last difference: " << last_step);
  BOOST_CHECK_GT(drift, 0.0);  // int4 did round something away
  BOOST_CHECK_LE(drift, 2 * last_step + 1e-6);
  // A learner welcomed now gets exactly that copy.
  join(1);
  std::vector<float> welcomed(params);
  BOOST_REQUIRE(decode_payload(received<Welcome>(1).at(0).fragments.at(0).values, welcomed).ok());
  BOOST_CHECK(welcomed == copy);
}

BOOST_FIXTURE_TEST_CASE(dead_learners_leave_the_round_and_are_not_pulled, QuorumOfAll) {
  for (size_t m = 0; m < 3; ++m) join(m);
  caf::anon_send_exit(learners[2], caf::exit_reason::kill);
  consume_messages();
  progress(0, 4);
  progress(1, 4);  // K is capped at the 2 connected learners: due
  BOOST_REQUIRE_EQUAL(received<Pull>(0).size(), 1u);
  BOOST_CHECK(received<Pull>(2).empty());
  const uint64_t round = received<Pull>(0)[0].round;
  send(0, push(0, round, 0, 4, 32, 1.0f));
  send(1, push(1, round, 0, 4, 32, 1.0f));
  BOOST_CHECK_EQUAL(received<Broadcast>(0).size(), 1u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
