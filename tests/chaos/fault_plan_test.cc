// Fault plans: what users write to torture a run. A good plan means exactly
// what it says; every mistake names the file, the line and the key.
#include <boost/test/unit_test.hpp>

#include <fstream>

#include "atoll/run_records.h"
#include "atoll/fault_plan.h"
#include "test_support.h"

namespace atl {
namespace {

struct Plans {
  testing::TempDir dir;
  Plans() {
    std::ofstream(dir.file("topo.toml"))
        << "[model]\nkind = \"mlp\"\n[data]\nkind = \"synthetic\"\n[outer]\nfragments = 2\nsync_every = 10\n";
  }
  Result<FaultPlan> load(const std::string& text) {
    std::ofstream(dir.file("plan.toml")) << "topology = \"topo.toml\"\nseconds = 3\n" << text;
    return load_fault_plan(dir.file("plan.toml"));
  }
  void expect_error(const std::string& text, const std::string& wanted) {
    auto p = load(text);
    BOOST_REQUIRE_MESSAGE(!p.ok(), "accepted: " << text);
    BOOST_CHECK_MESSAGE(p.status().message().find(wanted) != std::string_view::npos,
                        "wanted '" << wanted << "' in: " << p.status().to_string());
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(fault_plan_test)

BOOST_AUTO_TEST_CASE(a_plan_with_every_kind_of_fault_means_what_it_says) {
  Plans t;
  auto p = t.load(R"(
modes = ["decoupled", "dp"]
seed = 9
[[fault]]
kind = "kill"
at = 1.0
learner = "*"
recover_after = 0.5
[[fault]]
kind = "crash"
at_step = 300
learner = 2
[[fault]]
kind = "stall"
at = 1
learner = 0
duration = 1
[[fault]]
kind = "slow"
at = 1
learner = 1
duration = 2
factor = 3
[[fault]]
kind = "partition"
at = 2
learner = 3
duration = 1
[[fault]]
kind = "delay"
at = 2
learner = "*"
duration = 1
seconds = 0.05
[[fault]]
kind = "duplicate"
at = 2
learner = 1
duration = 1
probability = 0.5
[[fault]]
kind = "reorder"
at = 2
learner = 1
duration = 1
seconds = 0.01
[[fault]]
kind = "corrupt"
at = 2
learner = 0
duration = 1
[[fault]]
kind = "kill_syncer"
at = 2.5
[[fault]]
kind = "kill_checkpointer"
at = 2.6
[random]
mtbf_seconds = 30
recovery = "uniform"
recovery_min = 4
recovery_max = 6
[invariants]
reintegrate_within_seconds = 10
min_goodput = 0.8
max_eval_loss_increase = 0.05
)");
  BOOST_REQUIRE_MESSAGE(p.ok(), p.status().to_string());
  BOOST_CHECK_EQUAL(p->name, "plan");
  BOOST_CHECK_EQUAL(p->seconds, 3.0);
  BOOST_CHECK_EQUAL(p->seed, 9u);
  BOOST_CHECK(p->topology.data.kind == DataKind::kSynthetic);
  BOOST_CHECK_EQUAL(p->topology.outer.sync_every, 10);
  BOOST_REQUIRE_EQUAL(p->modes.size(), 2u);
  BOOST_CHECK(p->topology.hardware == Hardware::kDedicated);  // modes side by side: each learner owns its share
  BOOST_REQUIRE_EQUAL(p->faults.size(), 11u);
  BOOST_CHECK(p->faults[0].kind == FaultKind::kKill);
  BOOST_CHECK_EQUAL(p->faults[0].learner, -1);  // "*"
  BOOST_CHECK_EQUAL(p->faults[0].recover_after, 0.5);
  BOOST_CHECK_EQUAL(p->faults[1].at_step, 300u);
  BOOST_CHECK_LT(p->faults[1].at, 0.0);
  BOOST_CHECK_EQUAL(p->faults[3].factor, 3.0);
  BOOST_CHECK_EQUAL(p->faults[6].probability, 0.5);
  BOOST_CHECK(p->faults[10].kind == FaultKind::kKillCheckpointer);
  BOOST_CHECK(p->faults[4].where.find("plan.toml:") != std::string::npos);
  BOOST_REQUIRE(p->random.has_value());
  BOOST_CHECK(p->random->recovery == RandomFaults::Recovery::kUniform);
  BOOST_CHECK_EQUAL(p->invariants.min_goodput, 0.8);
  BOOST_REQUIRE(p->invariants.max_eval_loss_increase.has_value());
}

BOOST_AUTO_TEST_CASE(modes_side_by_side_run_on_dedicated_hardware_unless_set_says_otherwise) {
  Plans t;
  const std::string faults = "[[fault]]\nkind = \"kill\"\nat = 1\nlearner = 0\n";
  auto one = t.load(faults);
  BOOST_REQUIRE_MESSAGE(one.ok(), one.status().to_string());
  BOOST_CHECK(one->topology.hardware == Hardware::kShared);  // one mode: the topology's own
  auto shared = t.load("modes = [\"decoupled\", \"dp\"]\nset = [\"hardware=shared\"]\n" + faults);
  BOOST_REQUIRE_MESSAGE(shared.ok(), shared.status().to_string());
  BOOST_CHECK(shared->topology.hardware == Hardware::kShared);
}

BOOST_AUTO_TEST_CASE(mistakes_name_the_file_line_and_key) {
  Plans t;
  t.expect_error("[[fault]]\nkind = \"kil\"\nat = 1\nlearner = 0\n", "plan.toml:4: fault[0].kind: unknown fault kind 'kil'");
  t.expect_error("[[fault]]\nkind = \"kill\"\nat = 1\nlearnr = 0\n", "fault[0].learnr: unknown key (did you mean learner?)");
  t.expect_error("[[fault]]\nkind = \"kill\"\nlearner = 0\n", "give exactly one of at (seconds) and at_step");
  t.expect_error("[[fault]]\nkind = \"kill\"\nat = 1\n", "fault[0].learner: missing");
  t.expect_error("[[fault]]\nkind = \"kill\"\nat = 1\nlearner = 9\n", "plan.toml:6: fault[0].learner: 9 is outside [0, 3]");
  t.expect_error("[[fault]]\nkind = \"kill_syncer\"\nat = 1\nlearner = 0\n", "kill_syncer does not target a learner");
  t.expect_error("[[fault]]\nkind = \"partition\"\nat = 1\nlearner = 0\n", "fault[0].duration: missing");
  t.expect_error("[[fault]]\nkind = \"slow\"\nat = 1\nlearner = 0\nduration = 1\n", "fault[0].factor: missing");
  t.expect_error("[[fault]]\nkind = \"crash\"\nat_step = 5\nlearner = \"*\"\n", "needs a single learner");
  t.expect_error("[random]\nrecovery = \"normal\"\nmtbf_seconds = 3\n", "random.recovery: unknown distribution 'normal'");
  t.expect_error("[random]\nkind = \"kill\"\n", "random.mtbf_seconds: missing");
  t.expect_error("[invariants]\nmin_goodpt = 0.5\n", "invariants.min_goodpt: unknown key (did you mean min_goodput?)");
  t.expect_error("modes = [\"fast\"]\n", "modes[0]: unknown mode 'fast'");
  t.expect_error("seeds = 3\n", "plan.toml:3: seeds: unknown key (did you mean seed?)");
  t.expect_error("set = [\"outer.quorum=9\"]\n", "outer.quorum = 9 exceeds the 4 learners");
  t.expect_error("[invariants]\nreintegrate_within_seconds = -2\n",
                 "plan.toml:4: invariants.reintegrate_within_seconds: -2 is outside [0, 1e+06]");
  t.expect_error("[invariants]\nmin_goodput = 1.5\n", "invariants.min_goodput: 1.5 is outside [0, 1]");
  t.expect_error("[[fault]]\nkind = \"kill\"\nat = 4\nlearner = 0\n",
                 "plan.toml:3: kill at 4 s would never be injected: the run ends at seconds = 3");
  t.expect_error("[[fault]]\nkind = \"crash\"\nat_step = 2.2e39\nlearner = 0\n",
                 "fault[0].at_step: expected an integer, got a number");
  t.expect_error("replay = \".\"\n", "replay: event tape: " + t.dir.path() + "/.: is a folder, not a file");
}

// Spot capacity: joins, leaves and preemptions mean what they say, and need open slots.
BOOST_AUTO_TEST_CASE(membership_faults_mean_what_they_say_and_need_open_slots) {
  Plans t;
  auto p = t.load(R"(set = ["membership.max_learners=6"]
[[fault]]
kind = "join"
at = 0.5
count = 2
speed = 0.5
batch_size = 16
[[fault]]
kind = "leave"
at = 1
learner = 5
[[fault]]
kind = "preempt"
at = 2
learner = 4
grace = 1.5
[random]
kind = "preempt"
mtbf_seconds = 40
grace = 3
)");
  BOOST_REQUIRE_MESSAGE(p.ok(), p.status().to_string());
  BOOST_REQUIRE_EQUAL(p->faults.size(), 3u);
  const Fault& join = p->faults[0];
  BOOST_CHECK(join.kind == FaultKind::kJoin && join.count == 2 && join.speed == 0.5 && join.batch_size == 16);
  BOOST_CHECK_EQUAL(join.learner, -1);
  BOOST_CHECK(p->faults[1].kind == FaultKind::kLeave && p->faults[1].learner == 5);  // an open slot's id
  BOOST_CHECK(p->faults[2].kind == FaultKind::kPreempt && p->faults[2].duration == 1.5);
  BOOST_CHECK(p->random->kind == FaultKind::kPreempt && p->random->grace == 3);

  t.expect_error("[[fault]]\nkind = \"join\"\nat = 1\n",
                 "fault[0].kind: join needs open slots: set membership.max_learners above the topology's [[learners]]");
  t.expect_error("set = [\"membership.max_learners=6\"]\n[[fault]]\nkind = \"join\"\nat = 1\nlearner = 4\n",
                 "fault[0].learner: a join names no learner");
  t.expect_error("[[fault]]\nkind = \"kill\"\nat = 1\nlearner = 0\nspeed = 2\n", "fault[0].speed: only a join has speed");
  t.expect_error("[[fault]]\nkind = \"leave\"\nat = 1\nlearner = 0\ngrace = 2\n", "fault[0].grace: only a preempt has grace");
  t.expect_error("[random]\nkind = \"preempt\"\nmtbf_seconds = 3\n", "random.kind: preempt hits the learners of open slots");
  t.expect_error("[random]\nkind = \"kill\"\nmtbf_seconds = 3\ngrace = 1\n", "random.grace: only random preemptions");
  t.expect_error("set = [\"membership.max_learners=6\"]\n[[fault]]\nkind = \"leave\"\nat = 1\nlearner = 6\n",
                 "fault[0].learner: 6 is outside [0, 5]");
  // A tape's join replays as a join (the syncer gives the slot again).
  const auto replayed = parse_fault_tape(
      "{\"t\":1.5,\"event\":\"inject\",\"kind\":\"join\",\"hit\":1,\"learner\":4,\"speed\":0.7,\"batch_size\":4}\n",
      "spot.jsonl");
  BOOST_REQUIRE_MESSAGE(replayed.ok(), replayed.status().to_string());
  BOOST_REQUIRE_EQUAL(replayed->size(), 1u);
  BOOST_CHECK((*replayed)[0].kind == FaultKind::kJoin && (*replayed)[0].learner == -1 &&
              (*replayed)[0].speed == 0.7 && (*replayed)[0].batch_size == 4);
}

BOOST_AUTO_TEST_CASE(a_missing_plan_is_not_found_by_name) {
  auto p = load_fault_plan("/nonexistent/plan.toml");
  BOOST_CHECK(p.status().code() == Status::Code::kNotFound);
}

BOOST_AUTO_TEST_CASE(a_tape_replays_as_the_faults_that_hit_at_their_times) {
  Plans t;
  {
    auto tape = RunLog::open(t.dir.file("run.jsonl"), std::chrono::steady_clock::now());
    BOOST_REQUIRE(tape.ok());
    event::Injected kill;
    kill.kind = FaultKind::kKill;
    kill.hit = true;
    kill.learner = 2;
    kill.recover_after = 4.5;
    (*tape)->append(kill);
    kill.hit = false;  // its target was not running
    kill.learner = 1;
    (*tape)->append(kill);
    (*tape)->append(event::Restarted{Child::of_learner(2), 2});
    event::Injected delay;
    delay.kind = FaultKind::kDelay;
    delay.hit = true;
    delay.duration = 2.0;
    delay.seconds = 0.05;
    (*tape)->append(delay);
    event::Injected syncer;  // a syncer in shards: the tape says which shard died
    syncer.kind = FaultKind::kKillSyncer;
    syncer.hit = true;
    syncer.shard = 1;
    syncer.recover_after = 2.0;
    (*tape)->append(syncer);
  }
  auto p = t.load("replay = \"run.jsonl\"\n");
  BOOST_REQUIRE_MESSAGE(p.ok(), p.status().to_string());
  BOOST_REQUIRE_EQUAL(p->faults.size(), 3u);  // the miss and the recovery are not faults
  BOOST_CHECK(p->faults[2].kind == FaultKind::kKillSyncer);
  BOOST_CHECK_EQUAL(p->faults[2].shard, 1u);
  BOOST_CHECK_EQUAL(p->faults[2].recover_after, 2.0);
  BOOST_CHECK(p->faults[0].kind == FaultKind::kKill);
  BOOST_CHECK_EQUAL(p->faults[0].learner, 2);
  BOOST_CHECK_EQUAL(p->faults[0].recover_after, 4.5);
  BOOST_CHECK_GE(p->faults[0].at, 0.0);
  BOOST_CHECK(p->faults[1].kind == FaultKind::kDelay);
  BOOST_CHECK_EQUAL(p->faults[1].learner, -1);
  BOOST_CHECK_EQUAL(p->faults[1].seconds, 0.05);
  std::ofstream(t.dir.file("bad.jsonl")) << "{\"t\":1,\"event\":\"inject\",\"kind\":\"melt\",\"hit\":1}\n";
  t.expect_error("replay = \"bad.jsonl\"\n", "bad.jsonl:1: unknown fault kind 'melt'");
  // A tape is input as much as a plan: values a plan could not hold are refused by line.
  const auto replayed = parse_fault_tape(
      "{\"t\":1,\"event\":\"inject\",\"kind\":\"kill\",\"hit\":1,\"learner\":1e300}\n", "huge.jsonl");
  BOOST_CHECK_MESSAGE(replayed.status().message().find("huge.jsonl:1: learner 1e+300 is outside") !=
                          std::string_view::npos,
                      replayed.status().to_string());
  BOOST_CHECK(!parse_fault_tape("{\"t\":-1,\"event\":\"inject\",\"kind\":\"kill\",\"hit\":1}\n", "t.jsonl").ok());
  // A tape from before shards were recorded replays against shard 0, as it ran.
  const auto older = parse_fault_tape("{\"t\":1,\"event\":\"inject\",\"kind\":\"kill_syncer\",\"hit\":1}\n", "old.jsonl");
  BOOST_REQUIRE_MESSAGE(older.ok(), older.status().to_string());
  BOOST_CHECK_EQUAL((*older)[0].shard, 0u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
