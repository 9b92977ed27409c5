// A syncer in shards, held whole in one process (Run with syncer.shards = 2):
// the run is one run. One report with the shards' figures merged and each
// shard's beside them, a held-out evaluation (at the end and on the curve)
// of the model the shards' parts make, that model saved, and checkpoints in
// a folder per shard.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <numeric>
#include <thread>

#include "atoll/model_file.h"
#include "atoll/run.h"
#include "test_support.h"

namespace atl {
namespace {

using namespace std::chrono_literals;

Topology sharded_run() {
  Topology t = testing::tiny_mlp_topology();
  t.data.features = 16;
  t.data.classes = 4;
  t.data.examples = 2048;
  t.model.hidden = {32, 16};
  t.learners.assign(2, LearnerSpec{1.0, 32});
  t.outer.fragments = 4;
  t.outer.sync_every = 10;
  t.syncer.shards = 2;
  t.tokens = 1'000'000'000;  // stopped by the test
  return t;
}

bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit = 30s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return done();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sharded_run_test)

BOOST_AUTO_TEST_CASE(two_shards_in_one_process_make_one_run_with_one_report_one_model_and_its_evaluation) {
  const testing::TempDir scratch;  // declared before the run: removed after it stops
  const std::filesystem::path folder = scratch.path();
  Topology t = sharded_run();
  t.checkpoint.dir = folder.string();
  t.checkpoint.every_rounds = 5;
  RunOptions options;
  options.run_name = "two-shards";
  options.save_model = (folder / "model.atoll").string();
  options.curve_points = 3;
  options.seconds = 600;  // the snapshots' plan: stopped long before
  auto run = Run::start(t, options);
  BOOST_REQUIRE_MESSAGE(run.ok(), run.status().to_string());
  Run& r = **run;
  // Both shards merge: every fragment moves.
  BOOST_REQUIRE(eventually([&] {
    const auto v = r.view();
    return v.shards.size() == 2 && v.shards[0].rounds >= 10 && v.shards[1].rounds >= 10 && v.checkpoints >= 2;
  }));
  r.stop();
  auto report = r.wait();
  BOOST_REQUIRE_MESSAGE(report.ok(), report.status().to_string());
  BOOST_TEST_MESSAGE(report->to_table());

  // Each shard's figures, and the run's as theirs merged.
  BOOST_REQUIRE_EQUAL(report->shards.size(), 2u);
  const size_t parameters = r.parameters().size();
  BOOST_CHECK_EQUAL(report->shards[0].parameters + report->shards[1].parameters, parameters);
  BOOST_CHECK_EQUAL(report->shards[0].fragments + report->shards[1].fragments, 4u);
  BOOST_CHECK_EQUAL(report->rounds, report->shards[0].rounds + report->shards[1].rounds);
  for (const auto& s : report->shards) {
    BOOST_CHECK_EQUAL(s.shard, &s - report->shards.data());
    BOOST_CHECK_GT(s.counts["merged_pushes"], 0u);
    BOOST_CHECK_GE(s.versions_min, 1u);
  }
  BOOST_REQUIRE_EQUAL(report->final_versions.size(), 4u);
  for (uint32_t p = 0; p < 4; ++p) {
    BOOST_CHECK_GE(report->final_versions[p], 1u);  // the owner's version, not another shard's zero
    BOOST_CHECK_GE(report->final_versions[p], report->max_adopted_versions.at(p));
  }
  BOOST_CHECK_EQUAL(report->version_decreases, 0u);

  // The model the shards' parts make: held-out figures at the end and on the curve.
  BOOST_CHECK(report->eval.final);
  BOOST_CHECK(report->eval.by.empty());
  BOOST_CHECK_GT(report->eval.accuracy, 0.4);  // 4 classes: well above chance
  BOOST_CHECK_GE(report->curve.size(), 1u);
  for (const auto& c : report->curve) BOOST_CHECK(std::isfinite(c.loss));
  // No fragment of the whole model is left at zero (a missing shard's part would be).
  BOOST_REQUIRE_EQUAL(parameters, r.parameters().size());
  const double sum_abs = std::accumulate(r.parameters().begin(), r.parameters().end(), 0.0,
                                         [](double a, float x) { return a + std::abs(x); });
  BOOST_CHECK_GT(sum_abs, 0.0);
  auto saved = load_model_file(options.save_model);
  BOOST_REQUIRE_MESSAGE(saved.ok(), saved.status().to_string());
  BOOST_CHECK(saved->values == r.parameters());

  // A folder per shard, each with its checkpoints.
  for (int shard = 0; shard < 2; ++shard) {
    const auto dir = folder / "two-shards" / ("shard-" + std::to_string(shard));
    BOOST_REQUIRE_MESSAGE(std::filesystem::is_directory(dir), dir.string());
    size_t files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      files += e.path().filename().string().starts_with("checkpoint-") ? 1 : 0;
    BOOST_CHECK_MESSAGE(files >= 1, dir.string() + " holds no checkpoint");
  }
}

BOOST_AUTO_TEST_CASE(a_process_that_holds_one_shard_of_two_does_not_save_a_model_it_does_not_have) {
  Topology t = sharded_run();
  RunOptions options;
  options.cluster.listen = "127.0.0.1:0";
  options.cluster.shard = 1;
  options.cluster.token = std::string(32, 'k');
  options.save_model = "/nonexistent/model.atoll";
  auto refused = Run::start(t, options);
  BOOST_REQUIRE(!refused.ok());
  BOOST_CHECK_MESSAGE(refused.status().message().find("--save-model with syncer shard 1 of 2") != std::string::npos,
                      refused.status().to_string());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
