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
#include "atoll/transformer.h"

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

// One training step of the default transformer (4 layers, width 128, 4
// heads, context 128) on 8 windows: forward, backward, AdamW. GFLOP/s counts
// Transformer::train_flops.
void BM_TransformerTrainStep(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0));
  Transformer model(TransformerConfig{});
  std::vector<float> params(model.layout().size()), grads(params.size());
  model.init(params, 1);
  AdamW opt(model.layout(), {});
  Rng rng(2);
  Batch b;
  b.rows = rows;
  b.y_cols = 129;
  b.tokens = int64_t{rows} * 128;
  for (int i = 0; i < rows * 129; ++i) b.y.push_back(static_cast<int32_t>(32 + rng.below(90)));
  for (auto _ : state) {
    model.forward_backward(params, b, grads);
    opt.update(params, grads);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(model.train_flops(rows), benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.counters["tokens/s"] = benchmark::Counter(double(rows) * 128, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_TransformerTrainStep)->Arg(8)->Unit(benchmark::kMillisecond);

// Exactly the matrix products of that training step (same shapes, same
// count, forward and backward), and nothing else: the GEMM rate the step is
// measured against.
void BM_TransformerGemms(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0));
  const Eigen::Index C = 128, T = 128, H = 4, hs = C / H, V = 256, L = 4, N = rows * T;
  using M = Eigen::MatrixXf;
  struct Shape { Eigen::Index m, k, n; int count; };
  std::vector<Shape> shapes;
  for (auto [out, in] : {std::pair{3 * C, C}, {C, C}, {4 * C, C}, {C, 4 * C}}) {
    shapes.push_back({out, in, N, int(L)});   // y = W x
    shapes.push_back({out, N, in, int(L)});   // dW = dy x^T
    shapes.push_back({in, out, N, int(L)});   // dx = W^T dy
  }
  shapes.push_back({V, C, N, 1});             // logits
  shapes.push_back({V, N, C, 1});             // d head
  shapes.push_back({C, V, N, 1});             // d lnf
  const int heads = int(L * rows * H);
  shapes.push_back({T, hs, T, heads});        // K^T Q
  shapes.push_back({hs, T, T, heads});        // V P
  shapes.push_back({hs, T, T, heads});        // dV = dO P^T
  shapes.push_back({T, hs, T, heads});        // dP = V^T dO
  shapes.push_back({hs, T, T, heads});        // dQ = K dS
  shapes.push_back({hs, T, T, heads});        // dK = Q dS^T
  std::vector<std::array<M, 3>> mats;
  double flops = 0;
  for (const auto& s : shapes) {
    mats.push_back({M::Random(s.m, s.k), M::Random(s.k, s.n), M(s.m, s.n)});
    flops += 2.0 * double(s.m * s.k * s.n) * s.count;
  }
  for (auto _ : state)
    for (size_t i = 0; i < shapes.size(); ++i)
      for (int c = 0; c < shapes[i].count; ++c) {
        mats[i][2].noalias() = mats[i][0] * mats[i][1];
        benchmark::DoNotOptimize(mats[i][2].data());
      }
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_TransformerGemms)->Arg(8)->Unit(benchmark::kMillisecond);

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
