// One learner trains the MLP on the real MNIST to at least 97% test accuracy.
// The only runtime suite that reads the fetched data: without it, it reports
// itself skipped (CTest "Skipped", exit 77) and says why.
#include <boost/test/unit_test.hpp>

#include <chrono>

#include "atoll/adamw.h"
#include "atoll/data_source.h"
#include "atoll/mlp.h"
#include "atoll/mnist.h"
#include "test_support.h"

namespace atl {

BOOST_AUTO_TEST_SUITE(mnist_training_test)

BOOST_AUTO_TEST_CASE(one_learner_reaches_97_percent) {
  const std::string dir = testing::data_dir() + "/mnist";
  auto mnist = load_mnist(dir);
  if (!mnist.ok() && mnist.status().code() == Status::Code::kNotFound)
    testing::skip("MNIST not found (" + mnist.status().to_string() + "); run scripts/setup");
  BOOST_REQUIRE_MESSAGE(mnist.ok(), mnist.status().to_string());

  auto train = std::make_shared<const ExampleSet>(to_examples(mnist->train));
  const ExampleSet test = to_examples(mnist->test);
  Mlp mlp(MlpConfig{784, {256}, 10});
  std::vector<float> params(mlp.layout().size()), grads(params.size());
  mlp.init(params, 1);

  const int batch = 64, epochs = 3;
  const int steps = epochs * static_cast<int>(train->size()) / batch;
  AdamWConfig cfg;
  cfg.lr = 2e-3f;
  cfg.weight_decay = 1e-4f;
  cfg.warmup_steps = 100;
  cfg.total_steps = steps;
  AdamW opt(mlp.layout(), cfg);
  auto shards = split_indices(train->size(), 1, 1);
  ExampleStream stream(train, std::move(shards[0]), 1);

  const auto start = std::chrono::steady_clock::now();
  double first_loss = 0, last_loss = 0;
  for (int s = 0; s < steps; ++s) {
    const Batch b = stream.next(batch);
    const float loss = mlp.forward_backward(params, b, grads);
    opt.update(params, grads);
    if (s < 50) first_loss += loss / 50;
    if (s >= steps - 50) last_loss += loss / 50;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const EvalSums eval = evaluate_all(mlp, params, example_batches(test, 1000));
  BOOST_TEST_MESSAGE("trained " << steps << " steps in " << seconds << " s ("
                     << steps * batch / seconds << " examples/s); loss " << first_loss << " -> "
                     << last_loss << "; test loss " << eval.loss() << " accuracy " << eval.accuracy());
  std::cout << "mnist: " << steps << " steps, " << static_cast<int>(steps * batch / seconds)
            << " examples/s, test accuracy " << eval.accuracy() << "\n";
  BOOST_CHECK_EQUAL(eval.count, 10000);
  BOOST_CHECK_LT(last_loss, first_loss);
  BOOST_CHECK_GE(eval.accuracy(), 0.97);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
