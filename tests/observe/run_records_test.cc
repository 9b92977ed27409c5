// The run's records: typed events and their tape lines (old tapes included),
// the latch, the monotone adopted versions, the syncer's sample and the
// version-decrease check, the snapshot plan.
#include <boost/test/unit_test.hpp>

#include <fstream>

#include "atoll/run_records.h"
#include "test_support.h"

namespace atl {
namespace {

using Clock = std::chrono::steady_clock;

TimedEvent round_trip(const TimedEvent& e) {
  auto back = decode_event_line(encode_event_line(e));
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_REQUIRE(back->has_value());
  return **back;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(run_records_test)

BOOST_AUTO_TEST_CASE(every_event_survives_its_tape_line) {
  event::Injected kill;
  kill.kind = FaultKind::kSlow;
  kill.hit = true;
  kill.learner = 3;
  kill.duration = 2.5;
  kill.factor = 4;
  kill.plan = "plans/p.toml:12";
  const auto k = std::get<event::Injected>(round_trip({1.25, kill}).event);
  BOOST_CHECK(k.kind == FaultKind::kSlow && k.hit && k.learner == 3 && k.duration == 2.5 && k.factor == 4);
  BOOST_CHECK_EQUAL(k.plan, "plans/p.toml:12");
  const auto r = std::get<event::Restarted>(round_trip({2, event::Restarted{Child::of_learner(7), 3}}).event);
  BOOST_CHECK(r.child == Child::of_learner(7));
  BOOST_CHECK_EQUAL(r.incarnation, 3u);
  const auto g = std::get<event::GaveUp>(round_trip({3, event::GaveUp{Child::named("chaos injector")}}).event);
  BOOST_CHECK(g.child.role == Child::Role::kOther && g.child.name() == "chaos injector");
  const auto reg = std::get<event::Registered>(round_trip({4, event::Registered{2, 5, 1.5}}).event);
  BOOST_CHECK(reg.learner == 2 && reg.incarnation == 5 && reg.seconds == 1.5);
  const auto m = std::get<event::FirstMerge>(round_trip({5, event::FirstMerge{1, 2, 0.25}}).event);
  BOOST_CHECK(m.learner == 1 && m.seconds == 0.25);
  const auto in = std::get<event::Reintegrated>(round_trip({6, event::Reintegrated{1, 2, 3.5}}).event);
  BOOST_CHECK(in.learner == 1 && in.incarnation == 2 && in.seconds == 3.5);
  const auto d = std::get<event::VersionDecreased>(round_trip({7, event::VersionDecreased{4, 12, 11}}).event);
  BOOST_CHECK(d.fragment == 4 && d.from == 12 && d.to == 11);
  const auto f = std::get<event::Failed>(round_trip({8, event::Failed{"refused: \"bad\" token\n"}}).event);
  BOOST_CHECK_EQUAL(f.why, "refused: \"bad\" token\n");
  const auto j = std::get<event::Joined>(round_trip({9, event::Joined{4, 7, 0.5, 16}}).event);
  BOOST_CHECK(j.learner == 4 && j.incarnation == 7 && j.speed == 0.5 && j.batch_size == 16);
  const auto left = std::get<event::Departed>(round_trip({10, event::Departed{4, 7, false, "released"}}).event);
  BOOST_CHECK(left.learner == 4 && left.incarnation == 7 && !left.orderly && left.reason == "released");
  event::Injected join;
  join.kind = FaultKind::kJoin;
  join.hit = true;
  join.learner = 5;
  join.speed = 0.7;
  join.batch_size = 4;
  const auto jn = std::get<event::Injected>(round_trip({11, join}).event);
  BOOST_CHECK(jn.kind == FaultKind::kJoin && jn.learner == 5 && jn.speed == 0.7 && jn.batch_size == 4);
}

// Before this format had types, a registration the syncer did not see fail
// was written with "seconds":nan, which is not JSON. Now the field is left
// out, and read back as unknown.
BOOST_AUTO_TEST_CASE(an_unknown_time_is_left_out_not_written_as_nan) {
  const std::string line = encode_event_line({1, event::Registered{2, 3, kUnknownSeconds}});
  BOOST_CHECK_MESSAGE(line.find("nan") == std::string::npos && line.find("seconds") == std::string::npos, line);
  BOOST_CHECK(std::isnan(std::get<event::Registered>(round_trip({1, event::Registered{2, 3, kUnknownSeconds}}).event).seconds));
}

// Lines written by the string tape of earlier versions, verbatim.
BOOST_AUTO_TEST_CASE(old_tapes_still_read) {
  const char* lines[] = {
      R"({"t":12.345,"event":"inject","kind":"kill","hit":1,"learner":2,"recover_after":5,"plan":"random"})",
      R"({"t":12.346,"event":"recovered","what":"restart","child":"learner 2","incarnation":2})",
      R"({"t":17.401,"event":"recovered","what":"registration","learner":2,"incarnation":2,"seconds":5.06})",
      R"({"t":17.650,"event":"recovered","what":"first_merge","learner":2,"incarnation":2,"seconds":0.25})",
      R"({"t":18,"event":"inject","kind":"stall","hit":1,"learner":0,"duration":3,"by":"Run::stall_learner"})",
  };
  std::vector<TimedEvent> events;
  for (const char* l : lines) {
    auto e = decode_event_line(l);
    BOOST_REQUIRE_MESSAGE(e.ok() && e->has_value(), l);
    events.push_back(**e);
  }
  BOOST_CHECK_CLOSE(events[0].t, 12.345, 1e-9);
  const auto& kill = std::get<event::Injected>(events[0].event);
  BOOST_CHECK(kill.kind == FaultKind::kKill && kill.hit && kill.learner == 2 && kill.recover_after == 5);
  BOOST_CHECK(std::get<event::Restarted>(events[1].event).child == Child::of_learner(2));
  BOOST_CHECK_EQUAL(std::get<event::Registered>(events[2].event).seconds, 5.06);
  BOOST_CHECK_EQUAL(kind_of(events[3].event), "first_merge");
  BOOST_CHECK_EQUAL(std::get<event::Injected>(events[4].event).by, "Run::stall_learner");
  // Written again, the same bytes: the tape's form did not change.
  for (int i = 0; i < 4; ++i) BOOST_CHECK_EQUAL(encode_event_line(events[static_cast<size_t>(i)]), lines[i]);
  BOOST_CHECK_EQUAL(event_text(events[0].event), "inject kind=kill hit=1 learner=2 recover_after=5 plan=random");
  // A learner process's incarnations start near 2^60: exact, not rounded through a double.
  auto big = decode_event_line(R"({"t":1,"event":"recovered","what":"registration","learner":0,"incarnation":1152921504606846977})");
  BOOST_REQUIRE(big.ok() && big->has_value());
  BOOST_CHECK_EQUAL(std::get<event::Registered>((**big).event).incarnation, 1152921504606846977ull);
  // A newer tape's event is skipped, not an error; a broken line is one, by column.
  auto newer = decode_event_line(R"({"t":1,"event":"promoted","learner":9})");
  BOOST_CHECK(newer.ok() && !newer->has_value());
  auto broken = decode_event_line(R"({"t":1,"event":"inject","kind":)");
  BOOST_CHECK(!broken.ok());
  BOOST_CHECK(!decode_event_line(R"({"event":"inject","kind":"kill"})").ok());  // no time
  BOOST_CHECK(!decode_event_line(R"({"t":1,"event":"inject","kind":"melt"})").ok());
}

BOOST_AUTO_TEST_CASE(the_log_writes_each_event_as_one_flushed_line) {
  testing::TempDir dir;
  auto log = RunLog::open(dir.file("tape.jsonl"), Clock::now());
  BOOST_REQUIRE(log.ok());
  (*log)->append(event::Restarted{Child::named("syncer"), 2});
  (*log)->append(event::Failed{"gone"});
  BOOST_CHECK_EQUAL((*log)->size(), 2u);
  std::ifstream in(dir.file("tape.jsonl"));  // read while the log is open: flushed
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  BOOST_REQUIRE_EQUAL(lines.size(), 2u);
  auto first = decode_event_line(lines[0]);
  BOOST_REQUIRE(first.ok() && first->has_value());
  BOOST_CHECK(std::get<event::Restarted>((*first)->event).child.role == Child::Role::kSyncer);
  BOOST_CHECK(!RunLog::open(dir.path() + "/no/such/folder/tape.jsonl", Clock::now()).ok());
}

BOOST_AUTO_TEST_CASE(child_names_are_typed_both_ways) {
  for (const char* name : {"learner 0", "learner 12", "syncer", "checkpointer", "root supervisor",
                           "syncer supervisor", "learner supervisor", "chaos injector"})
    BOOST_CHECK_EQUAL(Child::named(name).name(), name);
  BOOST_CHECK(Child::named("learner 12").role == Child::Role::kLearner);
  BOOST_CHECK(Child::named("learner x").role == Child::Role::kOther);
  BOOST_CHECK(Child::named("syncer supervisor").holds_syncer());
  BOOST_CHECK(!Child::of_learner(1).holds_syncer());
}

BOOST_AUTO_TEST_CASE(a_version_that_drops_is_logged_once_and_not_while_recovering) {
  auto records = make_records(2);
  BOOST_CHECK(!records->syncer());
  SyncerSample s;
  s.versions = {5, 7};
  records->publish(s);
  s.versions = {3, 7};
  s.recovering = true;  // a restarted syncer catching up: not a decrease
  records->publish(s);
  BOOST_CHECK_EQUAL(records->log->size(), 0u);
  s.recovering = false;
  s.versions = {6, 6};  // against what was published before the restart: 6 after 5 is up, 6 after 7 down
  records->publish(s);
  records->publish(s);  // still down: not again
  const auto events = records->log->events();
  BOOST_REQUIRE_EQUAL(events.size(), 1u);
  const auto& d = std::get<event::VersionDecreased>(events[0].event);
  BOOST_CHECK(d.fragment == 1 && d.from == 7 && d.to == 6);
  BOOST_CHECK_EQUAL(records->syncer()->versions[1], 6u);
}

BOOST_AUTO_TEST_CASE(adopted_versions_only_go_up) {
  AdoptedVersions a(2);
  BOOST_CHECK(a.max().empty());  // nothing adopted here (a syncer's process)
  a.note(0, 4);
  a.note(0, 2);
  a.note(1, 9);
  a.note(5, 100);  // beyond the fragments: ignored
  BOOST_CHECK(a.max() == (std::vector<uint64_t>{4, 9}));
}

BOOST_AUTO_TEST_CASE(readiness_counts_each_welcomed_learner_once) {
  Readiness r;
  BOOST_CHECK(!r.syncer_serving());
  r.set_syncer_serving(true);
  BOOST_CHECK(r.syncer_serving());
  r.welcomed(3);
  r.welcomed(3);  // welcomed again after a syncer restart: still one learner
  r.welcomed(0);
  BOOST_CHECK_EQUAL(r.learners_welcomed(), 2u);
}

BOOST_AUTO_TEST_CASE(readiness_counts_the_links_to_the_syncer_that_are_down) {
  Readiness r;
  BOOST_CHECK_EQUAL(r.syncer_links_down(), 0u);
  r.set_syncer_link(0, 0, false);
  r.set_syncer_link(0, 1, false);  // a sharded syncer: each shard's connection counts
  r.set_syncer_link(0, 1, false);  // lost twice before it came back: still one
  BOOST_CHECK_EQUAL(r.syncer_links_down(), 2u);
  r.set_syncer_link(0, 0, true);
  BOOST_CHECK_EQUAL(r.syncer_links_down(), 1u);
  r.set_syncer_link(0, 1, true);
  r.set_syncer_link(7, 0, true);   // up without having been down: nothing to undo
  BOOST_CHECK_EQUAL(r.syncer_links_down(), 0u);
}

BOOST_AUTO_TEST_CASE(the_latch_keeps_the_first_failure_and_seal_finishes) {
  auto records = make_records(1);
  BOOST_CHECK(!records->latch.wait_finished_until(Clock::now()));
  BOOST_CHECK(records->latch.failure().ok());
  records->fail(Status::refused("first"));
  records->fail(Status::unavailable("second"));
  BOOST_CHECK_EQUAL(records->latch.failure().message(), "first");
  BOOST_CHECK(records->latch.failure().code() == Status::Code::kRefused);  // the first one's code too
  BOOST_CHECK(records->latch.finished() && !records->latch.sealed());
  BOOST_CHECK_EQUAL(records->log->size(), 1u);  // one Failed event
  records->latch.seal();
  BOOST_CHECK(records->latch.wait_sealed_until(Clock::now()));
}

BOOST_AUTO_TEST_CASE(snapshots_fall_due_at_equal_steps_of_the_budget) {
  ModelSnapshots s;
  s.plan(4, 400, 0);  // points at 100, 200, 300 tokens; the run's end is the fourth
  BOOST_CHECK(!s.due(99, 1e9));
  BOOST_CHECK(s.due(100, 0));
  s.add({1.0, 100, {}});
  BOOST_CHECK(!s.due(150, 0));
  s.add({2.0, 200, {}});
  s.add({3.0, 300, {}});
  BOOST_CHECK(!s.due(1000, 0));  // the end is not a snapshot
  BOOST_CHECK_EQUAL(s.taken().size(), 3u);
}

BOOST_AUTO_TEST_CASE(each_shard_takes_its_own_snapshots_at_the_same_points) {
  ModelSnapshots s;
  s.plan(3, 300, 0);
  BOOST_CHECK(s.due(100, 0, 0) && s.due(100, 0, 1));
  s.add({1.0, 100, {1.0f, 0.0f}}, 0);
  BOOST_CHECK(!s.due(150, 0, 0));
  BOOST_CHECK(s.due(150, 0, 1));  // shard 1 has not taken its first yet
  s.add({1.1, 120, {0.0f, 2.0f}}, 1);
  BOOST_CHECK_EQUAL(s.taken(0).size(), 1u);
  BOOST_CHECK_EQUAL(s.taken(1).size(), 1u);
  BOOST_CHECK_EQUAL(s.taken(1)[0].theta[1], 2.0f);
}

// Two shards of 4 fragments: shard 0 owns 0 and 2, shard 1 owns 1 and 3.
SyncerSample shard_sample(uint32_t shard, std::vector<uint64_t> versions, uint64_t rounds, uint64_t merged) {
  SyncerSample s;
  s.shard = shard;
  s.parameters = 100 + shard;
  s.fragments = 2;
  s.seconds = 10.0 + shard;
  s.cpu_seconds = 1.0;
  s.tokens = 5000 - shard;  // a Progress not yet seen by shard 1
  s.versions = std::move(versions);
  s.stats.rounds = rounds;
  s.stats.merged_pushes = merged;
  s.stats.good_seconds = 2.0;
  s.stats.round_ends = {{shard + 1.0, shard}, {shard + 3.0, shard + 2}};
  s.stats.final_seconds = shard == 0 ? 9.0 : -1.0;
  LearnerRecord l;
  l.connected = shard == 0;  // shard 1 lost it
  l.steps = 40 + shard;
  l.merged = merged;
  l.progress.resize(4);
  for (uint32_t p = 0; p < 4; ++p) l.progress[p].version = 10 * shard + p;
  s.learners = {l};
  return s;
}

BOOST_AUTO_TEST_CASE(the_shards_samples_merge_into_the_runs) {
  std::vector<std::shared_ptr<const SyncerSample>> by_shard = {
      std::make_shared<const SyncerSample>(shard_sample(0, {7, 0, 9, 0}, 16, 30)),
      std::make_shared<const SyncerSample>(shard_sample(1, {0, 5, 0, 6}, 11, 20))};
  const SyncerSample m = merge_shard_samples(by_shard, 2);
  BOOST_CHECK_EQUAL(m.parameters, 201u);
  BOOST_CHECK_EQUAL(m.fragments, 4u);
  BOOST_CHECK_EQUAL(m.tokens, 5000u);                       // the most any shard heard
  BOOST_CHECK_CLOSE(m.seconds, 11.0, 1e-9);
  BOOST_CHECK_CLOSE(m.cpu_seconds, 2.0, 1e-9);              // summed
  BOOST_CHECK((m.versions == std::vector<uint64_t>{7, 5, 9, 6}));  // each from its owner
  BOOST_CHECK_EQUAL(m.stats.rounds, 27u);
  BOOST_CHECK_EQUAL(m.stats.merged_pushes, 50u);
  BOOST_CHECK_CLOSE(m.stats.good_seconds, 4.0, 1e-9);       // each shard's share of the steps
  BOOST_CHECK((m.stats.round_ends == std::vector<RoundEnd>{{1.0, 0}, {2.0, 1}, {3.0, 2}, {4.0, 3}}));
  BOOST_CHECK_EQUAL(m.stats.final_seconds, -1.0);           // shard 1's model is not final yet
  BOOST_REQUIRE_EQUAL(m.learners.size(), 1u);
  const LearnerRecord& l = m.learners[0];
  BOOST_CHECK(!l.connected);                                // up only where every shard has it
  BOOST_CHECK_EQUAL(l.steps, 41u);
  BOOST_CHECK_EQUAL(l.merged, 50u);
  for (uint32_t p = 0; p < 4; ++p) BOOST_CHECK_EQUAL(l.progress[p].version, 10 * (p % 2) + p);  // the owner's
  // One shard missing: its fragments read 0, the rest as it said.
  by_shard[1] = nullptr;
  BOOST_CHECK((merge_shard_samples(by_shard, 2).versions == std::vector<uint64_t>{7, 0, 9, 0}));
}

BOOST_AUTO_TEST_CASE(a_shard_that_publishes_zeros_for_another_shards_fragments_is_no_decrease) {
  auto records = make_records(4, Clock::now(), 2);
  records->publish(shard_sample(0, {7, 0, 9, 0}, 16, 30), 0);
  records->publish(shard_sample(1, {0, 5, 0, 6}, 11, 20), 1);
  records->publish(shard_sample(0, {8, 0, 9, 0}, 17, 31), 0);
  BOOST_CHECK_EQUAL(records->log->size(), 0u);  // no VersionDecreased
  BOOST_CHECK((records->syncer()->versions == std::vector<uint64_t>{8, 5, 9, 6}));
  BOOST_CHECK_EQUAL(records->shard(1)->versions[3], 6u);
  records->publish(shard_sample(1, {0, 4, 0, 6}, 12, 21), 1);  // a real drop, at its owner
  BOOST_CHECK_EQUAL(records->log->size(), 1u);
  // Sealed once every shard held here sealed its part.
  records->seal_shard(0, 2);
  BOOST_CHECK(!records->latch.sealed());
  records->seal_shard(1, 2);
  BOOST_CHECK(records->latch.sealed());
}

// Each learner process's CPU time counts once, as it last said it; a report
// overtaken by an older one does not take time back.
BOOST_AUTO_TEST_CASE(learner_processes_cpu_counts_each_process_once) {
  LearnerProcessesCpu cpu;
  BOOST_CHECK_EQUAL(cpu.seconds(), 0.0);
  cpu.note(7, 1.5);
  cpu.note(7, 2.5);
  cpu.note(7, 2.0);  // reordered
  cpu.note(9, 0.25);
  BOOST_CHECK_EQUAL(cpu.processes(), 2u);
  BOOST_CHECK_CLOSE(cpu.seconds(), 2.75, 1e-12);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
