// With the barrier option, K = M, no grace, uniform weights, AVG merge and
// P = 1, Decoupled DiLoCo is plain DiLoCo (docs/design.md section 5). The whole actor
// system (real threads) must give the same global parameters as the
// straightforward loop below, written from the algorithm's definition.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "atoll/adamw.h"
#include "atoll/job.h"
#include "atoll/run.h"

namespace atl {
namespace {

constexpr int kLearners = 3, kH = 5, kBatch = 16, kRounds = 8;

Topology diloco_topology() {
  Topology t;
  t.model.kind = ModelKind::kMlp;
  t.data.kind = DataKind::kSynthetic;
  t.data.features = 8;
  t.data.classes = 4;
  t.data.examples = 1024;
  t.model.hidden = {16};
  t.learners.assign(kLearners, LearnerSpec{1.0, kBatch});
  t.inner.lr = 0.01f;
  t.inner.total_steps = 1000;  // explicit: no schedule derived from the budget
  t.outer.fragments = 1;
  t.outer.sync_every = kH;
  t.outer.quorum = kLearners;
  t.outer.grace_gamma = 0.0;
  t.outer.barrier = true;
  t.outer.weighting = Weighting::kUniform;
  t.outer.force_avg = true;
  t.outer.push_codec = Codec::kFp32;
  t.outer.broadcast_codec = Codec::kFp32;
  t.outer.final_flush = false;  // plain DiLoCo ends on a whole round: no last partial one
  t.checkpoint.dir = "";
  t.tokens = uint64_t{kLearners} * kH * kBatch * kRounds;
  return t;
}

// DiLoCo: every learner starts the round from Theta, takes H AdamW steps on
// its own data; Theta moves by Nesterov along the mean of their progress.
std::vector<std::vector<float>> reference_diloco(const Topology& t, int rounds) {
  auto job = Job::load(t, "");
  BOOST_REQUIRE(job.ok());
  auto model = make_model(t);
  BOOST_REQUIRE(model.ok());
  const auto& layout = (*model)->layout();
  std::vector<float> theta = initial_parameters(**model, t), velocity(theta.size(), 0.0f);
  std::vector<AdamW> inner;
  std::vector<std::unique_ptr<DataSource>> streams;
  for (int m = 0; m < kLearners; ++m) {
    inner.emplace_back(layout, t.inner);
    streams.push_back((*job)->make_stream(static_cast<uint32_t>(m), 1));
  }
  std::vector<std::vector<float>> thetas = {theta};
  std::vector<float> replica(theta.size()), grads(theta.size());
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> progress(theta.size(), 0.0);
    for (int m = 0; m < kLearners; ++m) {
      replica = theta;
      for (int h = 0; h < kH; ++h) {
        (*model)->forward_backward(replica, streams[m]->next(kBatch), grads);
        inner[m].update(replica, grads);
      }
      for (size_t i = 0; i < theta.size(); ++i) progress[i] += (1.0 / kLearners) * (replica[i] - theta[i]);
    }
    const float lr = t.outer.nesterov.lr, mu = t.outer.nesterov.momentum;
    for (size_t i = 0; i < theta.size(); ++i) {
      const float g = static_cast<float>(-progress[i]);  // outer gradient: base - learner
      velocity[i] = mu * velocity[i] + g;
      theta[i] -= lr * (g + mu * velocity[i]);
    }
    thetas.push_back(theta);
  }
  return thetas;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(equivalence_test)

BOOST_AUTO_TEST_CASE(barrier_k_equals_m_avg_p1_is_plain_diloco) {
  const Topology t = diloco_topology();
  auto run = Run::start(t);
  BOOST_REQUIRE_MESSAGE(run.ok(), run.status().to_string());
  auto report = (*run)->wait();
  BOOST_REQUIRE_MESSAGE(report.ok(), report.status().to_string());
  const uint64_t version = report->versions_max;
  BOOST_TEST_MESSAGE("global version at the end: " << version);
  // The budget ends the run while the last round may or may not have closed.
  BOOST_REQUIRE_GE(version, uint64_t{kRounds - 1});
  BOOST_CHECK_EQUAL(report->quorum_mean, double(kLearners));

  const auto reference = reference_diloco(t, static_cast<int>(version));
  const auto& actual = (*run)->parameters();
  BOOST_REQUIRE_EQUAL(actual.size(), reference[version].size());
  double worst = 0.0, moved = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    worst = std::max(worst, std::fabs(double(actual[i]) - reference[version][i]));
    moved = std::max(moved, std::fabs(double(reference[version][i]) - reference[0][i]));
  }
  BOOST_TEST_MESSAGE("largest difference " << worst << " (parameters moved up to " << moved << ")");
  BOOST_CHECK_GT(moved, 1e-2);  // training really happened
  BOOST_CHECK_LE(worst, 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
