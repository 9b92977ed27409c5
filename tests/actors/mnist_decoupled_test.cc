// Integration: examples/topologies/mnist.toml (4 learners of speeds 1, 1,
// 0.7, 0.5, decoupled, K = 1 with grace, int4 pushes, an MLP) reaches at least
// 96% MNIST test accuracy with the global model. Needs the fetched data:
// skipped without it.
#include <boost/test/unit_test.hpp>

#include "atoll/mnist.h"
#include "atoll/run.h"
#include "atoll/topology_file.h"
#include "test_support.h"

namespace atl {

BOOST_AUTO_TEST_SUITE(mnist_decoupled_test)

BOOST_AUTO_TEST_CASE(four_heterogeneous_learners_reach_96_percent) {
  if (auto mnist = load_mnist(testing::data_dir() + "/mnist"); !mnist.ok())
    testing::skip("MNIST not available (" + mnist.status().to_string() + "); run scripts/setup");
  testing::TempDir checkpoints;
  auto loaded = load_topology(std::string(ATOLL_SOURCE_DIR) + "/examples/topologies/mnist.toml");
  BOOST_REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
  Topology t = *loaded;
  t.tokens = 1'000'000;
  t.checkpoint.dir = checkpoints.path();
  // Checkpoints by rounds alone: a 1M-token run has a few hundred rounds however fast the machine is, where
  // the topology's "every 30 s" is due only on a machine slow enough to train for 30 s.
  t.checkpoint.every_rounds = 10;
  t.checkpoint.every_seconds = 0;
  RunOptions options;
  options.data_root = testing::data_dir();
  auto run = Run::start(t, options);
  BOOST_REQUIRE_MESSAGE(run.ok(), run.status().to_string());
  auto report = (*run)->wait();
  BOOST_REQUIRE_MESSAGE(report.ok(), report.status().to_string());
  BOOST_TEST_MESSAGE(report->to_table());
  std::cout << "decoupled mnist: accuracy " << report->eval.accuracy << ", goodput " << report->goodput << ", "
            << report->bytes_per_token << " bytes/token, " << report->wall_seconds << " s\n";
  BOOST_CHECK_EQUAL(report->eval.count, 10000);
  BOOST_CHECK_GE(report->eval.accuracy, 0.96);
  BOOST_CHECK_GE(report->tokens, t.tokens);
  BOOST_CHECK_GT(report->checkpoints, 0u);  // the checkpointer wrote durable state meanwhile
  // One record per learner of the topology: an empty list must not pass the loop below.
  BOOST_REQUIRE_EQUAL(report->per_learner.size(), t.learners.size());
  for (const auto& l : report->per_learner) BOOST_CHECK_GT(l.merged, 0u);  // even the slowest contributed
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
