// Micro-benchmarks of the hot numerics, single thread: GEMM on the MLP's
// shapes, one MLP training step, every payload codec, and the RDA merge.
// Prints a table and writes JSON (default: atoll_micro_bench.json in the
// working directory; override with --benchmark_out=FILE).
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <string>
#include <vector>

#include "atoll/adamw.h"
#include "atoll/codec.h"
#include "atoll/data_source.h"
#include "atoll/merge.h"
#include "atoll/mlp.h"
#include "atoll/rng.h"

namespace atl {
namespace {

std::vector<float> random_vector(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(0.01 * rng.normal());
  return v;
}

// C (M, N) = A (M, K) * B (K, N): the forward (W x) and backward shapes of
// the 784-256-10 MLP at batch 64.
void BM_Gemm(benchmark::State& state) {
  const auto m = state.range(0), k = state.range(1), n = state.range(2);
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(m, k), b = Eigen::MatrixXf::Random(k, n), c(m, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(m * n * k), benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.SetLabel(std::to_string(m) + "x" + std::to_string(k) + " * " + std::to_string(k) + "x" + std::to_string(n));
}
BENCHMARK(BM_Gemm)
    ->Args({256, 784, 64})   // layer 0 forward: W0 x
    ->Args({256, 64, 784})   // layer 0 backward: dW0 = dy x^T
    ->Args({10, 256, 64})    // head forward
    ->Args({256, 10, 64})    // head backward: dx = W1^T dy
    ->Args({512, 512, 512})  // reference square shape
    ->Unit(benchmark::kMicrosecond);

// One inner step of a learner: forward, backward, AdamW.
void BM_MlpTrainStep(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  Mlp mlp(MlpConfig{784, {256}, 10});
  std::vector<float> params(mlp.layout().size()), grads(params.size());
  mlp.init(params, 1);
  AdamW opt(mlp.layout(), {});
  auto set = std::make_shared<ExampleSet>();
  set->features = 784;
  set->classes = 10;
  set->x = random_vector(size_t{784} * 1024, 2);
  for (int i = 0; i < 1024; ++i) set->y.push_back(i % 10);
  ExampleStream stream(set, split_indices(1024, 1, 1)[0], 3);
  std::vector<Batch> batches;
  for (int i = 0; i < 8; ++i) batches.push_back(stream.next(batch));
  size_t i = 0;
  for (auto _ : state) {
    mlp.forward_backward(params, batches[i++ % batches.size()], grads);
    opt.update(params, grads);
  }
  // Per layer of in x out weights: forward 2*in*out*B, weight gradient
  // 2*in*out*B, input gradient 2*in*out*B except for the first layer.
  const double w0 = 784.0 * 256, w1 = 256.0 * 10;
  const double flops = (4 * w0 + 6 * w1) * batch;
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["examples/s"] = benchmark::Counter(batch, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MlpTrainStep)->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);

// The inner optimizer on the whole MLP (203530 parameters).
void BM_AdamW(benchmark::State& state) {
  Mlp mlp(MlpConfig{784, {256}, 10});
  std::vector<float> params = random_vector(mlp.layout().size(), 6), grads = random_vector(params.size(), 7);
  AdamWConfig c;
  c.weight_decay = 0.01f;
  AdamW opt(mlp.layout(), c);
  for (auto _ : state) {
    opt.update(params, grads);
    benchmark::DoNotOptimize(params.data());
  }
  // reads p, g, m, v and writes p, m, v
  state.counters["GB/s"] = benchmark::Counter(7.0 * 4 * double(params.size()), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_AdamW)->Unit(benchmark::kMicrosecond);

// 200704 floats: the MLP's largest fragment (layer0.weight).
constexpr size_t kFragment = 200704;

void BM_Encode(benchmark::State& state) {
  const auto codec = static_cast<Codec>(state.range(0));
  const auto x = random_vector(kFragment, 4);
  std::vector<uint8_t> out(encoded_size(codec, x.size(), 64));
  for (auto _ : state) {
    encode(codec, 64, x, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(codec_name(codec));
  state.counters["GB/s"] = benchmark::Counter(double(x.size() * sizeof(float)), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.counters["bytes/value"] = double(out.size()) / double(x.size());
}

void BM_Decode(benchmark::State& state) {
  const auto codec = static_cast<Codec>(state.range(0));
  const auto x = random_vector(kFragment, 5);
  std::vector<uint8_t> bytes(encoded_size(codec, x.size(), 64));
  encode(codec, 64, x, bytes);
  std::vector<float> y(x.size());
  for (auto _ : state) {
    const Status s = decode(codec, 64, bytes, y);
    benchmark::DoNotOptimize(s.ok());
  }
  state.SetLabel(codec_name(codec));
  state.counters["GB/s"] = benchmark::Counter(double(x.size() * sizeof(float)), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Encode)->DenseRange(0, 4)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Decode)->DenseRange(0, 4)->Unit(benchmark::kMicrosecond);

// The syncer's merge of one fragment from M learners.
void BM_Merge(benchmark::State& state) {
  const auto m = static_cast<size_t>(state.range(0));
  const auto rule = static_cast<MergeRule>(state.range(1));
  std::vector<std::vector<float>> gs;
  std::vector<Contribution> cs;
  for (size_t i = 0; i < m; ++i) gs.push_back(random_vector(kFragment, 10 + i));
  for (size_t i = 0; i < m; ++i) cs.push_back({gs[i], 1.0 + double(i)});
  Fragment f;
  f.rule = rule;
  f.size = kFragment;
  f.pieces = {{0, 0, 0, kFragment}};
  std::vector<float> out(kFragment);
  for (auto _ : state) {
    merge_fragment(f, cs, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(merge_rule_name(rule));
  state.counters["GB/s"] = benchmark::Counter(double(m * kFragment * sizeof(float)), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Merge)->Args({4, 1})->Args({8, 1})->Args({4, 0})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace atl

int main(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  bool has_out = false;
  for (int i = 1; i < argc; ++i) has_out |= std::string(argv[i]).rfind("--benchmark_out=", 0) == 0;
  std::string out = "--benchmark_out=atoll_micro_bench.json";
  if (!has_out) args.push_back(out.data());
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
