// Supervision with real threads: a killed learner is restarted, registers
// again, receives the global model and trains on, while the others never
// stop; a learner that keeps failing is given up on and reported, and the run
// goes on without it.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <functional>
#include <algorithm>
#include <thread>

#include "atoll/run.h"
#include "test_support.h"

namespace atl {
namespace {

using namespace std::chrono_literals;

// The smallest topology, a little wider and with three learners: one to kill.
Topology small_run() {
  Topology t = testing::tiny_mlp_topology();
  t.data.features = 16;
  t.data.classes = 4;
  t.data.examples = 2048;
  t.model.hidden = {32};
  t.learners.assign(3, LearnerSpec{1.0, 32});
  t.outer.fragments = 2;
  t.outer.sync_every = 20;
  t.tokens = 1'000'000'000;  // stopped by the test
  return t;
}

// Polls `done` every 10 ms for at most `limit`; false on timeout.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit = 20s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return done();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(supervision_test)

BOOST_AUTO_TEST_CASE(a_killed_learner_is_restarted_and_reintegrated_while_training_goes_on) {
  auto run = Run::start(small_run());
  BOOST_REQUIRE_MESSAGE(run.ok(), run.status().to_string());
  Run& r = **run;
  BOOST_REQUIRE(eventually([&] { return r.view().stats.rounds >= 4; }));
  const uint64_t steps_at_kill = r.view().per_learner.at(1).steps;
  BOOST_REQUIRE(r.kill_learner(1));
  const uint64_t rounds_at_kill = r.view().stats.rounds;
  // Counted by the board as the new incarnation is welcomed: never stale.
  BOOST_REQUIRE_MESSAGE(eventually([&] { return r.view().reintegration_seconds.size() >= 1; }),
                        "learner 1 did not come back");
  BOOST_REQUIRE_MESSAGE(eventually([&] {
                          const auto v = r.view();
                          return v.per_learner.size() == 3 && v.per_learner[1].incarnation == 2 &&
                                 v.per_learner[1].steps >= steps_at_kill + 50 && v.stats.rounds >= rounds_at_kill + 20;
                        }),
                        "learner 1's new incarnation did not train");
  r.stop();
  auto report = r.wait();
  BOOST_REQUIRE_MESSAGE(report.ok(), report.status().to_string());
  BOOST_TEST_MESSAGE(report->to_table());

  BOOST_CHECK_EQUAL(report->restarts, 1u);
  const auto& l1 = report->per_learner[1];
  BOOST_CHECK_EQUAL(l1.restarts, 1u);
  BOOST_CHECK_EQUAL(l1.incarnation, 2u);            // registered again as a new incarnation
  BOOST_CHECK_GT(l1.last_incarnation_tokens, 0u);   // and trained after it
  BOOST_REQUIRE_EQUAL(report->reintegration_seconds.size(), 1u);
  BOOST_CHECK_LT(report->reintegration_seconds[0], 5.0);
  BOOST_TEST_MESSAGE("re-integrated in " << report->reintegration_seconds[0] << " s");
  for (const auto& l : report->per_learner)
    if (l.id != 1) BOOST_CHECK_EQUAL(l.restarts, 0u);
  BOOST_CHECK_GE(report->rounds, rounds_at_kill + 20);
  BOOST_CHECK(report->gave_up.empty());
  BOOST_CHECK_GT(report->eval.accuracy, 0.4);  // 4 classes: well above chance
  // The report carries the run over time: the kill, the restart, the welcome back, and a series to the end.
  const auto has = [&](const std::string& kind) {
    return std::any_of(report->events.begin(), report->events.end(), [&](const EventLine& e) { return e.kind == kind; });
  };
  BOOST_CHECK(has("fault kill"));
  BOOST_CHECK(has("restart"));
  BOOST_CHECK(has("registration"));
  BOOST_REQUIRE(!report->series.empty());  // a sub-second run may have only its last point
  BOOST_CHECK_EQUAL(report->series.back().tokens, report->tokens);
  BOOST_CHECK_EQUAL(report->series.back().learner_steps.size(), 3u);
}

BOOST_AUTO_TEST_CASE(past_the_restart_intensity_a_learner_is_given_up_and_the_run_goes_on) {
  RunOptions options;
  options.max_restarts = 2;
  options.restart_window_seconds = 60;
  auto run = Run::start(small_run(), options);
  BOOST_REQUIRE_MESSAGE(run.ok(), run.status().to_string());
  Run& r = **run;
  BOOST_REQUIRE(eventually([&] { return r.view().stats.rounds >= 2; }));
  for (uint64_t kill = 1; kill <= 3; ++kill) {
    BOOST_REQUIRE_MESSAGE(eventually([&] { return r.kill_learner(2); }), "learner 2 not running for kill " << kill);
    if (kill < 3) BOOST_REQUIRE(eventually([&] { return r.view().restarts >= kill; }));
  }
  // Given up: no third restart, and the two others carry on.
  BOOST_REQUIRE(eventually([&] {
    const auto v = r.view();
    return std::count_if(v.per_learner.begin(), v.per_learner.end(), [](auto& l) { return l.state == atl::LearnerState::kUp; }) == 2 &&
           v.per_learner[2].state == atl::LearnerState::kGaveUp;
  }));
  const uint64_t rounds = r.view().stats.rounds;
  BOOST_REQUIRE(eventually([&] { return r.view().stats.rounds >= rounds + 10; }));
  r.stop();
  auto report = r.wait();
  BOOST_REQUIRE_MESSAGE(report.ok(), report.status().to_string());
  // When to give up is RestartPolicy's (restart_policy_test); here: after it
  // gave up, the supervisor never restarted learner 2 again.
  BOOST_CHECK_EQUAL(report->restarts, 2u);
  const auto gave_up = std::find_if(report->events.begin(), report->events.end(),
                                    [](const EventLine& e) { return e.kind == "gave up" && e.learner == 2; });
  BOOST_REQUIRE(gave_up != report->events.end());
  BOOST_CHECK(std::none_of(gave_up, report->events.end(), [](const EventLine& e) { return e.kind == "restart"; }));
  BOOST_REQUIRE_EQUAL(report->gave_up.size(), 1u);
  BOOST_CHECK_EQUAL(report->gave_up[0], "learner 2");
  BOOST_CHECK(report->per_learner[2].gave_up);
  BOOST_CHECK(!report->per_learner[0].gave_up);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
