// A decoupled run of a TorchScript model through the whole runtime: a learner
// killed mid-run comes back and re-integrates, the syncer killed mid-run
// restores its checkpoint, and the global model stays finite and improves.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "atoll/chaos.h"
#include "atoll/run.h"
#include "test_support.h"

namespace atl {
namespace {

std::string gpt_tiny() {
  const std::string path = std::string(ATOLL_TORCH_MODULES) + "/gpt_tiny.pt";
  if (!std::filesystem::exists(path))
    testing::skip(path + " is missing: tests/fixtures/torch/make_modules.py writes it (needs python3-torch)");
  return path;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(torchscript_run_test)

BOOST_AUTO_TEST_CASE(a_killed_learner_and_a_killed_syncer_come_back_on_a_torchscript_gpt) {
  const std::string sotu = testing::data_dir() + "/sotu";
  if (!std::filesystem::exists(sotu)) testing::skip(sotu + " is missing (run scripts/setup)");
  testing::TempDir dir;
  FaultPlan plan;
  plan.name = "torchscript";
  plan.path = "torchscript.toml";
  plan.seconds = 6.0;
  Topology& t = plan.topology;
  t.model.kind = ModelKind::kTorchScript;
  t.model.path = gpt_tiny();
  t.model.context = 12;
  t.data.eval_examples = 256;
  t.learners = {{1.0, 8}, {1.0, 8}, {0.6, 8}};
  t.outer.fragments = 3;
  t.outer.sync_every = 6;
  t.inner.warmup_steps = 10;
  t.checkpoint.dir = dir.path();
  t.checkpoint.every_seconds = 0.5;
  plan.modes = {Mode::kDecoupled};
  Fault kill;
  kill.kind = FaultKind::kKill;
  kill.at = 1.0;
  kill.learner = 1;
  kill.recover_after = 0.3;
  Fault kill_syncer;
  kill_syncer.kind = FaultKind::kKillSyncer;
  kill_syncer.at = 3.0;
  kill_syncer.recover_after = 0.3;
  plan.faults = {kill, kill_syncer};
  plan.invariants.reintegrate_within_seconds = 2.0;

  ChaosOptions options;
  options.run.data_root = testing::data_dir();
  auto r = run_with_faults(t, plan, options);
  BOOST_REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  BOOST_TEST_MESSAGE(chaos_table({*r}));
  BOOST_CHECK_MESSAGE(r->ok(), chaos_table({*r}));
  BOOST_CHECK_EQUAL(r->faults_injected, 2u);
  BOOST_CHECK_EQUAL(r->recoveries, 2u);
  BOOST_CHECK_EQUAL(r->report.version_decreases, 0u);
  BOOST_CHECK_EQUAL(r->report.per_learner[1].incarnation, 2u);
  BOOST_CHECK_GT(r->report.per_learner[1].last_incarnation_tokens, 0u);
  BOOST_CHECK_GE(r->report.restarts, 2u);  // the learner and the syncer
  // The global model learned: a fresh GPT predicts a byte at about ln 256 = 5.5 nats.
  BOOST_CHECK(std::isfinite(r->report.eval.loss));
  BOOST_CHECK_LT(r->report.eval.loss, 4.5);
  BOOST_CHECK_GT(r->report.eval.accuracy, 0.0);
}

BOOST_AUTO_TEST_CASE(a_module_file_deleted_mid_run_leaves_the_held_out_loss_unknown_not_a_crash) {
  const std::string module = std::string(ATOLL_TORCH_MODULES) + "/classifier.pt";
  if (!std::filesystem::exists(module)) testing::skip(module + " is missing (make_modules.py needs python3-torch)");
  testing::TempDir dir;
  const std::string copy = dir.file("m.pt");
  std::filesystem::copy_file(module, copy);
  Topology t = testing::tiny_mlp_topology();
  t.model.kind = ModelKind::kTorchScript;
  t.model.path = copy;
  t.tokens = 0;
  t.seconds = 600.0;  // ended below, once the file is gone (the limit only bounds a run the test lost)
  auto run = Run::start(t);
  BOOST_REQUIRE_MESSAGE(run.ok(), run.status().to_string());
  // Every learner has its module loaded once it has trained: only then is deleting the file the case tested.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool trained = false;
  std::string steps;
  while (!trained && std::chrono::steady_clock::now() < deadline) {
    const auto v = (*run)->view();
    steps = v.per_learner.empty() ? " none in the view" : "";
    for (const auto& l : v.per_learner) steps += " " + std::to_string(l.steps);
    trained = v.per_learner.size() == 2 && v.per_learner[0].steps > 0 && v.per_learner[1].steps > 0;
    if (!trained) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  BOOST_REQUIRE_MESSAGE(trained, "both learners had not trained a step within 120 s (steps per learner:" + steps +
                                     "): the module was never loaded by both, so removing it tests nothing");
  std::filesystem::remove(copy);
  (*run)->stop();
  auto report = (*run)->wait();
  BOOST_REQUIRE_MESSAGE(report.ok(), report.status().to_string());
  BOOST_CHECK_GT(report->tokens, 0u);
  BOOST_CHECK(std::isnan(report->eval.loss));  // and the reason is logged
  BOOST_CHECK_MESSAGE(report->model.find("no such file") != std::string::npos, report->model);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
