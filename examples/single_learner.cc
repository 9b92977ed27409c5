// The numerics alone, without actors: one learner trains the MLP on MNIST with
// AdamW and reports held-out accuracy. A starting point for reading the
// runtime layer; `atoll run` adds learners, the syncer and supervision.
//
// usage: single_learner [DATA_DIR] [EPOCHS]     (defaults: ./data, 3)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "atoll/adamw.h"
#include "atoll/data_source.h"
#include "atoll/mlp.h"
#include "atoll/mnist.h"

int main(int argc, char** argv) {
  const std::string data = argc > 1 ? argv[1] : "data";
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 3;
  if (epochs < 1) {
    std::fprintf(stderr, "usage: %s [DATA_DIR] [EPOCHS >= 1]\n", argv[0]);
    return 2;
  }
  auto mnist = atl::load_mnist(data + "/mnist");
  if (!mnist.ok()) {
    std::fprintf(stderr, "error: %s\n(run scripts/setup to fetch MNIST)\n", mnist.status().to_string().c_str());
    return 1;
  }
  auto train = std::make_shared<const atl::ExampleSet>(atl::to_examples(mnist->train));
  const auto test = atl::example_batches(atl::to_examples(mnist->test), 1000);

  atl::Mlp model(atl::MlpConfig{});
  std::vector<float> params(model.layout().size()), grads(params.size());
  model.init(params, 1);
  const int batch = 64;
  const int64_t steps = int64_t{epochs} * static_cast<int64_t>(train->size()) / batch;
  atl::AdamWConfig config;
  config.lr = 2e-3f;
  config.weight_decay = 1e-4f;
  config.warmup_steps = 100;
  config.total_steps = steps;
  atl::AdamW optimizer(model.layout(), config);
  atl::ExampleStream stream(train, atl::split_indices(train->size(), 1, 1)[0], 1);

  std::printf("%s, %zu parameters, %lld steps of %d examples\n", model.describe().c_str(), params.size(),
              static_cast<long long>(steps), batch);
  const auto start = std::chrono::steady_clock::now();
  double loss = 0;
  for (int64_t s = 1; s <= steps; ++s) {
    loss += model.forward_backward(params, stream.next(batch), grads);
    optimizer.update(params, grads);
    if (s % (steps / epochs) == 0) {
      const auto eval = atl::evaluate_all(model, params, test);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("epoch %lld: train loss %.4f  test loss %.4f  test accuracy %.2f%%  (%.1f s, %.0f examples/s)\n",
                  static_cast<long long>(s / (steps / epochs)), loss / double(steps / epochs), eval.loss(),
                  100 * eval.accuracy(), secs, double(s) * batch / secs);
      loss = 0;
    }
  }
  return 0;
}
