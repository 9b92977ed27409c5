#include "atoll/step_pacer.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "atoll/adamw.h"
#include "atoll/cpu_clock.h"
#include "atoll/topology_file.h"

namespace atl {

StepPacer::StepPacer(int threads, double total_speed, double compute_seconds, int batch, double headroom)
    : threads_(std::max(1, threads)),
      total_speed_(total_speed > 0.0 ? total_speed : 1.0),
      compute_seconds_(compute_seconds),
      batch_(std::max(1, batch)),
      headroom_(std::max(1.0, headroom)) {}

double StepPacer::step_seconds(double speed, int batch) const {
  const double share = std::min(1.0, threads_ * std::max(speed, 1e-6) / total_speed_);
  return headroom_ * compute_seconds_ * (static_cast<double>(batch) / batch_) / share;
}

double StepPacer::pace(double wall_seconds, double speed, int batch) {
  const double target = step_seconds(speed, batch);
  ++paced_;
  if (wall_seconds > target) ++late_;
  return std::max(0.0, target - wall_seconds);
}

namespace {

// One replica for measuring: a model, its parameters and gradients, AdamW, a data stream.
struct Replica {
  std::unique_ptr<Model> model;
  std::vector<float> params, grads;
  std::unique_ptr<AdamW> adamw;
  std::unique_ptr<DataSource> stream;
};

}  // namespace

Result<double> measure_step_compute(const Job& job, ComputePool& pool, int concurrent, int batch, int rounds) {
  const Topology& t = job.topology();
  concurrent = std::clamp(concurrent, 1, pool.threads());
  // Once per process and shape: runs compared side by side (a chaos plan's
  // modes, a benchmark's variants) get the same hardware, not each its own
  // draw of the machine's noise (measured per run, 92 to 111 ms for one step).
  Topology shape;  // what a step's cost depends on
  shape.learners.clear();
  shape.model = t.model;
  shape.data = t.data;
  const std::string key = to_toml(shape) + "|" + std::to_string(batch) + "|" + std::to_string(concurrent) + "|" +
                          std::to_string(pool.threads());
  static std::mutex cache_mu;
  static std::map<std::string, double> cache;
  {
    std::lock_guard lock(cache_mu);
    if (const auto it = cache.find(key); it != cache.end()) return it->second;
  }
  std::vector<Replica> replicas(static_cast<size_t>(concurrent));
  for (int i = 0; i < concurrent; ++i) {
    Replica& r = replicas[static_cast<size_t>(i)];
    auto model = make_model(t);
    if (!model.ok()) return model.status();
    r.model = std::move(*model);
    r.params = initial_parameters(*r.model, t);
    r.grads.assign(r.params.size(), 0.0f);
    r.adamw = std::make_unique<AdamW>(r.model->layout(), t.inner);
    r.stream = job.make_stream(static_cast<uint32_t>(i), 0);
  }
  std::mutex mu;
  std::vector<double> samples;
  for (int round = 0; round <= std::max(1, rounds); ++round) {
    for (Replica& r : replicas)
      pool.submit([&r, &mu, &samples, batch, warm = round > 0] {
        const double start = thread_cpu_seconds();
        const Batch b = r.stream->next(batch);
        r.model->forward_backward(r.params, b, r.grads);
        r.adamw->update(r.params, r.grads);
        const double seconds = thread_cpu_seconds() - start;
        std::lock_guard lock(mu);
        if (warm) samples.push_back(seconds);
      });
    pool.wait_idle();
  }
  auto mid = samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2);
  std::nth_element(samples.begin(), mid, samples.end());
  std::lock_guard lock(cache_mu);
  return cache.emplace(key, *mid).first->second;
}

}  // namespace atl
