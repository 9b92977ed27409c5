// The syncer's CPU per parameter and merged learner, part by part, for one
// round of every fragment of a topology's model (by default the 100M MLP of
// examples/topologies/large_100m.toml, 8 fragments):
//
//   atoll_merge_bench [--topology FILE] [--learners M] [--reps R]
//                     [--rounds-per-checkpoint X] [--out FILE.json]
//
// Each round runs what the syncer runs, with the real functions, in its order,
// on memory kept from round to round as the syncer keeps it (its scratch
// vectors and sums, on huge pages where the kernel allows):
//   alloc       per push: what getting memory for the decoded push costs (the
//               syncer decodes into one scratch vector: nothing, once warm);
//   decode      per push: decode_payload() into it;
//   accumulate  per push: MergeAccumulator::add();
//   merge       per round: MergeAccumulator::merge() into the scratch vector;
//   nesterov    per round: what DecoupledRounds::close_round() does next (the
//               sign, then nesterov_step_if_finite());
//   broadcast   per round: what SyncerState::broadcast() does with an int
//               broadcast codec (the difference to what learners hold, its
//               encoding, the decoding learners will do, the new held copy);
//   checkpoint  per write: encode_checkpoint(SyncerCore::checkpoint()) over
//               the whole model, amortized over X rounds of each fragment
//               (the 100M run on 2 cores wrote one every 30 s, about 1.7
//               rounds of each fragment; the file write is another thread's).
// Pushes are encoded beforehand with the topology's push codec, as learners
// send them. Figures are wall-clock nanoseconds per parameter of the model
// per merged learner (a round's parts divided by M), mean and sample standard
// deviation over R repetitions after one round not counted; "total cpu" is
// the process's CPU time on the same scale (above wall when parts run on
// several threads). Beside them, so that machines compare: a float32 add
// c = a + b over as many elements as the model has parameters (reused
// buffers), in ns per element; the merge's total is also given in adds.
#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "atoll/checkpoint.h"
#include "atoll/codec.h"
#include "atoll/huge_pages.h"
#include "atoll/json_writer.h"
#include "atoll/merge.h"
#include "atoll/nesterov.h"
#include "atoll/rng.h"
#include "atoll/syncer_core.h"
#include "atoll/topology_file.h"

namespace atl {
namespace {

enum Part { kAlloc, kDecode, kAccumulate, kMerge, kNesterov, kBroadcast, kCheckpoint, kParts };
const char* const kPartNames[kParts] = {"alloc", "decode", "accumulate", "merge", "nesterov", "broadcast", "checkpoint"};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// An outer gradient of the size learners push after H steps: normal, scale
// `scale`, a few per mille of the values.
std::vector<float> random_vector(size_t n, uint64_t seed, double scale) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

struct Options {
  std::string topology = "examples/topologies/large_100m.toml";
  int learners = 4;
  int reps = 5;
  double rounds_per_checkpoint = 1.7;
  std::string out = "atoll-out/bench/merge/merge_bench.json";
};

// Seconds by part, one repetition, summed over the fragments.
using Times = std::array<double, kParts>;

// One fragment's round, `reps` times; adds each repetition's seconds to
// times[r], and its CPU seconds to cpu[r].
void run_fragment(const Topology& t, const Fragment& fragment, const Options& o, std::vector<Times>& times,
                  std::vector<double>& cpu) {
  const size_t n = fragment.size;
  const auto& outer = t.outer;
  std::vector<Payload> pushes;
  std::vector<double> weights;
  for (int m = 0; m < o.learners; ++m) {
    const auto g = random_vector(n, 1000 * static_cast<uint64_t>(fragment.id) + static_cast<uint64_t>(m),
                                 1e-3 * (1.0 + 0.5 * m));
    pushes.push_back(encode_payload(outer.push_codec, outer.push_block, g));
    weights.push_back(token_weight(16 * (10 + static_cast<uint64_t>(m)), 10 + static_cast<uint64_t>(m)));
  }
  MergeAccumulator acc(fragment);
  // The global copy in its steady state: learners hold the current values.
  // Allocated as SyncerCore allocates them.
  std::vector<float> values, momentum, held, decoded, work;
  for (std::vector<float>* v : {&values, &momentum, &held, &decoded, &work}) {
    reserve_huge(*v, n);
    v->resize(n);
  }
  const std::vector<float> initial = random_vector(n, 7 + static_cast<uint64_t>(fragment.id), 0.02);
  std::copy(initial.begin(), initial.end(), values.begin());
  held = values;

  // Round 0 is a warm-up, not counted: a running syncer's sums and copies
  // have their memory already.
  Times warmup{};
  double warmup_cpu = 0.0;
  for (int r = -1; r < o.reps; ++r) {
    Times& tr = r < 0 ? warmup : times[static_cast<size_t>(r)];
    double& tc = r < 0 ? warmup_cpu : cpu[static_cast<size_t>(r)];
    const double c0 = cpu_seconds();
    for (int m = 0; m < o.learners; ++m) {
      const double t0 = now_seconds();
      const std::span<float> delta(decoded.data(), n);  // SyncerCore::on_push()
      const double t1 = now_seconds();
      DecodeFault fault = DecodeFault::kNone;
      if (!decode_payload(pushes[static_cast<size_t>(m)], delta, fault).ok()) std::abort();
      const double t2 = now_seconds();
      acc.add(delta, weights[static_cast<size_t>(m)]);
      const double t3 = now_seconds();
      tr[kAlloc] += t1 - t0;
      tr[kDecode] += t2 - t1;
      tr[kAccumulate] += t3 - t2;
    }
    // DecoupledRounds::close_round()
    double t0 = now_seconds();
    const std::span<float> outer_grad(work.data(), n);
    if (!acc.merge(outer_grad)) std::abort();
    double t1 = now_seconds();
    tr[kMerge] += t1 - t0;
    for (float& x : outer_grad) x = -x;
    if (!nesterov_step_if_finite(outer.nesterov, values, momentum, outer_grad)) std::abort();
    acc.clear();
    double t2 = now_seconds();
    tr[kNesterov] += t2 - t1;
    // SyncerState::broadcast() with an int broadcast codec.
    {
      const std::span<float> diff(work.data(), n);
      for (size_t i = 0; i < n; ++i) diff[i] = values[i] - held[i];
      Payload b = encode_payload(outer.broadcast_codec, outer.broadcast_block, diff);
      if (!decode_payload(b, diff).ok()) std::abort();
      for (size_t i = 0; i < n; ++i) held[i] += diff[i];
    }
    tr[kBroadcast] += now_seconds() - t2;
    tc += cpu_seconds() - c0;
  }
}

// ns per element of c = a + b over n floats, the buffers reused (and on huge
// pages, as the syncer's are): mean and sd over `reps` after one not counted.
std::pair<double, double> float_add_ns(size_t n, int reps) {
  std::vector<float> a = random_vector(n, 1, 1.0), b = random_vector(n, 2, 1.0), c;
  reserve_huge(c, n);
  c.resize(n);
  std::vector<double> ns;
  for (int r = -1; r < reps; ++r) {
    const double t0 = now_seconds();
    const float* pa = a.data();
    const float* pb = b.data();
    float* pc = c.data();
    for (size_t i = 0; i < n; ++i) pc[i] = pa[i] + pb[i];
    const double t = now_seconds() - t0;
    if (r >= 0) ns.push_back(t * 1e9 / static_cast<double>(n));
  }
  double mean = 0.0, var = 0.0;
  for (double x : ns) mean += x / static_cast<double>(ns.size());
  for (double x : ns) var += (x - mean) * (x - mean);
  volatile float sink = c[n / 2];
  (void)sink;
  return {mean, ns.size() > 1 ? std::sqrt(var / static_cast<double>(ns.size() - 1)) : 0.0};
}

int run(const Options& o) {
  auto topology = load_topology(o.topology);
  if (!topology.ok()) {
    std::fprintf(stderr, "%s\n", topology.status().to_string().c_str());
    return 1;
  }
  Topology& t = *topology;
  t.checkpoint.moments = false;  // as in the 100M run: Theta and the momentum only
  auto core = SyncerCore::create(t, std::chrono::steady_clock::now());
  if (!core.ok()) {
    std::fprintf(stderr, "%s\n", core.status().to_string().c_str());
    return 1;
  }
  const std::vector<Fragment>& fragments = (*core)->fragments();
  size_t params = 0;
  for (const Fragment& f : fragments) params += f.size;
  std::printf("%s: %zu parameters in %zu fragments, M = %d learners, push %s/%u, broadcast %s/%u, %d repetitions\n",
              o.topology.c_str(), params, fragments.size(), o.learners, codec_name(t.outer.push_codec),
              t.outer.push_block, codec_name(t.outer.broadcast_codec), t.outer.broadcast_block, o.reps);

  std::vector<Times> times(static_cast<size_t>(o.reps), Times{});
  std::vector<double> cpu(static_cast<size_t>(o.reps), 0.0);
  for (const Fragment& f : fragments) {
    std::printf("  fragment %d: %zu parameters, %s\n", f.id, f.size, merge_rule_name(f.rule));
    std::fflush(stdout);
    run_fragment(t, f, o, times, cpu);
  }
  for (int r = -1; r < o.reps; ++r) {  // the checkpoint: the whole model once per repetition
    if (r < 0) {
      (void)encode_checkpoint((*core)->checkpoint(0));  // warm-up
      continue;
    }
    const double t0 = now_seconds(), c0 = cpu_seconds();
    const std::vector<uint8_t> bytes = encode_checkpoint((*core)->checkpoint(0));
    if (bytes.empty()) std::abort();
    times[static_cast<size_t>(r)][kCheckpoint] += now_seconds() - t0;
    cpu[static_cast<size_t>(r)] += (cpu_seconds() - c0) / o.rounds_per_checkpoint;
  }

  // ns per parameter per merged learner; the checkpoint also per write.
  const double scale = 1e9 / (static_cast<double>(params) * o.learners);
  auto stats = [&](auto value) {
    double mean = 0.0, var = 0.0;
    for (int r = 0; r < o.reps; ++r) mean += value(r) / o.reps;
    for (int r = 0; r < o.reps; ++r) var += (value(r) - mean) * (value(r) - mean);
    return std::pair<double, double>{mean, o.reps > 1 ? std::sqrt(var / (o.reps - 1)) : 0.0};
  };
  auto part = [&](int p) {
    return [&, p](int r) {
      const double s = times[static_cast<size_t>(r)][p] * scale;
      return p == kCheckpoint ? s / o.rounds_per_checkpoint : s;
    };
  };
  auto total = [&](int r) {
    double s = 0.0;
    for (int p = 0; p < kParts; ++p) s += part(p)(r);
    return s;
  };
  auto cpu_total = [&](int r) { return cpu[static_cast<size_t>(r)] * scale; };

  JsonWriter j;
  j.open(nullptr, '{');
  j.field("topology", o.topology);
  j.field("parameters", params);
  j.field("fragments", fragments.size());
  j.field("learners", o.learners);
  j.field("repetitions", o.reps);
  j.field("rounds_per_checkpoint", o.rounds_per_checkpoint);
  j.field("push_codec", std::string(codec_name(t.outer.push_codec)));
  j.open("ns_per_param_per_learner", '{');
  std::printf("\n%-12s %10s %8s   (ns per parameter per merged learner, wall)\n", "part", "mean", "sd");
  for (int p = 0; p < kParts; ++p) {
    const auto [mean, sd] = stats(part(p));
    std::printf("%-12s %10.3f %8.3f%s\n", kPartNames[p], mean, sd,
                p == kCheckpoint ? "   (amortized; see below)" : "");
    j.open(kPartNames[p], '{');
    j.field("mean", mean);
    j.field("sd", sd);
    j.close('}');
  }
  const auto [tm, tsd] = stats(total);
  const auto [cm, csd] = stats(cpu_total);
  std::printf("%-12s %10.3f %8.3f\n%-12s %10.3f %8.3f\n", "total", tm, tsd, "total cpu", cm, csd);
  j.open("total", '{');
  j.field("mean", tm);
  j.field("sd", tsd);
  j.close('}');
  j.open("total_cpu", '{');
  j.field("mean", cm);
  j.field("sd", csd);
  j.close('}');
  j.close('}');
  const auto [am, asd] = float_add_ns(params, o.reps);
  std::printf("%-12s %10.3f %8.3f   (ns per element of c = a + b over %zu floats)\n", "float32 add", am, asd, params);
  std::printf("%-12s %10.2f            (total / float32 add)\n", "in adds", tm / am);
  j.open("float32_add_ns_per_element", '{');
  j.field("mean", am);
  j.field("sd", asd);
  j.close('}');
  j.field("total_in_adds", tm / am);
  const auto [km, ksd] = stats([&](int r) { return times[static_cast<size_t>(r)][kCheckpoint] * 1e9 / static_cast<double>(params); });
  std::printf("checkpoint per write: %.3f ns per parameter (sd %.3f), amortized over %.2f rounds of %d learners\n", km,
              ksd, o.rounds_per_checkpoint, o.learners);
  j.open("checkpoint_ns_per_param_per_write", '{');
  j.field("mean", km);
  j.field("sd", ksd);
  j.close('}');
  j.close('}');

  std::error_code ec;
  if (const auto dir = std::filesystem::path(o.out).parent_path(); !dir.empty())
    std::filesystem::create_directories(dir, ec);
  std::ofstream(o.out) << j.text() << "\n";
  std::printf("wrote %s\n", o.out.c_str());
  return 0;
}

}  // namespace
}  // namespace atl

int main(int argc, char** argv) {
  atl::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--topology" && has_value) o.topology = argv[++i];
    else if (a == "--learners" && has_value) o.learners = std::atoi(argv[++i]);
    else if (a == "--reps" && has_value) o.reps = std::atoi(argv[++i]);
    else if (a == "--rounds-per-checkpoint" && has_value) o.rounds_per_checkpoint = std::atof(argv[++i]);
    else if (a == "--out" && has_value) o.out = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: atoll_merge_bench [--topology FILE] [--learners M] [--reps R]\n"
                   "                         [--rounds-per-checkpoint X] [--out FILE.json]\n");
      return 2;
    }
  }
  if (o.learners < 1 || o.reps < 1 || !(o.rounds_per_checkpoint > 0)) {
    std::fprintf(stderr, "--learners and --reps must be >= 1, --rounds-per-checkpoint > 0\n");
    return 2;
  }
  return atl::run(o);
}
