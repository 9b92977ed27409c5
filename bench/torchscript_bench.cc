// Throughput of a TorchScript GPT (examples/torch/gpt.py) against atoll's
// own Eigen transformer of the same shape, one core each: bytes per second of
// a training step (forward, backward, AdamW) and of a forward pass alone, on
// batches of the State of the Union. Held-out quality at equal tokens is a
// sweep (docs/benchmarks.md, "TorchScript models"):
//   atoll sweep examples/torch/gpt.toml --grid model.kind=transformer,torchscript
//
//   atoll_torchscript_bench [--module FILE] [--steps N] [--repeats R] [--out FILE.json]
//
// The module must have atoll's default shape (4 x 128, 4 heads, context 128),
// which `python3 examples/torch/gpt.py` writes to atoll-out/torch/gpt.pt.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "atoll/adamw.h"
#include "atoll/job.h"
#include "atoll/rng.h"
#include "atoll/transformer.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Figures {
  double mean = 0.0, sd = 0.0;
};

Figures summarize(const std::vector<double>& xs) {
  Figures f;
  for (double x : xs) f.mean += x;
  f.mean /= static_cast<double>(xs.size());
  for (double x : xs) f.sd += (x - f.mean) * (x - f.mean);
  f.sd = xs.size() > 1 ? std::sqrt(f.sd / static_cast<double>(xs.size() - 1)) : 0.0;
  return f;
}

// Training and forward-only throughput (bytes per second), `repeats` times
// `steps` batches after two warm-up steps.
std::pair<Figures, Figures> measure(atl::Model& model, const std::vector<atl::Batch>& batches, int steps,
                                    int repeats) {
  std::vector<float> params(model.layout().size()), grads(params.size());
  model.init(params, 1);
  atl::AdamW opt(model.layout(), atl::AdamWConfig{});
  for (int i = 0; i < 2; ++i) model.forward_backward(params, batches[static_cast<size_t>(i)], grads);
  std::vector<double> train, forward;
  size_t next = 0;
  for (int r = 0; r < repeats; ++r) {
    double bytes = 0.0;
    auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) {
      const auto& b = batches[next++ % batches.size()];
      model.forward_backward(params, b, grads);
      opt.update(params, grads);
      bytes += static_cast<double>(b.tokens);
    }
    train.push_back(bytes / std::chrono::duration<double>(Clock::now() - t0).count());
    bytes = 0.0;
    t0 = Clock::now();
    for (int s = 0; s < steps; ++s) {
      const auto& b = batches[next++ % batches.size()];
      model.evaluate(params, b);
      bytes += static_cast<double>(b.tokens);
    }
    forward.push_back(bytes / std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return {summarize(train), summarize(forward)};
}

}  // namespace

int main(int argc, char** argv) {
  std::string module = "atoll-out/torch/gpt.pt", out = "atoll-out/bench/torchscript.json";
  int steps = 10, repeats = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--module" && has_value) module = argv[++i];
    else if (a == "--steps" && has_value) steps = std::atoi(argv[++i]);
    else if (a == "--repeats" && has_value) repeats = std::atoi(argv[++i]);
    else if (a == "--out" && has_value) out = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--module FILE] [--steps N] [--repeats R] [--out FILE.json]\n", argv[0]);
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  if (steps < 1 || repeats < 1) {
    std::fprintf(stderr, "--steps and --repeats must be at least 1\n");
    return 2;
  }

  atl::Topology t;  // the default job: transformer 4 x 128, context 128, batches of 8 windows
  t.learners = {{1.0, 8}};
  auto job = atl::Job::load(t, atl::default_data_root());
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", job.status().to_string().c_str());
    return 1;
  }
  auto source = (*job)->make_stream(0, 1);
  std::vector<atl::Batch> batches;
  for (int i = 0; i < 16; ++i) batches.push_back(source->next(8));

  atl::Topology tt = t;
  tt.model.kind = atl::ModelKind::kTorchScript;
  tt.model.path = module;
  auto torch = atl::make_model(tt);
  if (!torch.ok()) {
    std::fprintf(stderr, "%s\n", torch.status().to_string().c_str());
    return 1;
  }
  auto eigen = atl::make_model(t);
  if ((*torch)->layout().size() != (*eigen)->layout().size()) {
    std::fprintf(stderr, "%s has %zu parameters, atoll's default transformer %zu: make it with gpt.py's defaults\n",
                 module.c_str(), (*torch)->layout().size(), (*eigen)->layout().size());
    return 2;
  }

  std::printf("one core, batches of 8 x 128 bytes, %d steps x %d repeats (mean +- sd of the repeats)\n", steps,
              repeats);
  std::printf("%-34s %22s %22s\n", "model", "train bytes/s", "forward bytes/s");
  struct Row {
    std::string name;
    std::pair<Figures, Figures> f;
  };
  std::vector<Row> rows;
  for (auto* m : {eigen->get(), torch->get()}) {
    rows.push_back({m->describe(), measure(*m, batches, steps, repeats)});
    const auto& r = rows.back();
    std::printf("%-34.34s %12.0f +- %-7.0f %12.0f +- %-7.0f\n", r.name.c_str(), r.f.first.mean, r.f.first.sd,
                r.f.second.mean, r.f.second.sd);
  }
  std::printf("libtorch / Eigen: %.2fx the training time per byte\n", rows[0].f.first.mean / rows[1].f.first.mean);

  std::ofstream json(out);
  if (!json) {
    std::fprintf(stderr, "cannot write %s (does its folder exist?)\n", out.c_str());
    return 1;
  }
  json << "{\"steps\":" << steps << ",\"repeats\":" << repeats << ",\"rows\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    json << (i ? "," : "") << "{\"model\":\"" << (i ? "torchscript" : "transformer") << "\",\"train_bytes_per_second\":"
         << r.f.first.mean << ",\"train_sd\":" << r.f.first.sd << ",\"forward_bytes_per_second\":" << r.f.second.mean
         << ",\"forward_sd\":" << r.f.second.sd << "}";
  }
  json << "]}\n";
  std::printf("written to %s\n", out.c_str());
  return 0;
}
