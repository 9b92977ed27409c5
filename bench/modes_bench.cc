// The same topology in the three modes, side by side (no faults): throughput,
// bytes per token, goodput and held-out quality.
//
//   atoll_modes_bench [TOPOLOGY.toml] [--set key=value]... [--seeds N] [--out DIR]
// Default: the built-in topology (the transformer on State of the Union text).
// The MNIST table in docs/benchmarks.md: atoll_modes_bench examples/topologies/mnist.toml
//
// The modes run on dedicated hardware (atoll/step_pacer.h): each learner owns
// its share of the cores, so no mode gains from a learner that waits or dies.
// `--set hardware=shared` measures the machine instead.
#include "compare.h"

int main(int argc, char** argv) {
  atl::bench::BenchOptions options;
  options.out = "atoll-out/bench/modes";
  const char* usage =
      "Runs decoupled, dp and elastic_dp on one topology, one after the other. Records go to --out\n"
      "(default atoll-out/bench/modes); the same command resumes an interrupted run. Learners run on\n"
      "dedicated hardware (each owns its share of the cores); --set hardware=shared to measure the machine.\n";
  if (int status = atl::bench::parse_bench_args(argc, argv, usage, options); status >= 0) return status;
  options.overrides.insert(options.overrides.begin(), "hardware=dedicated");  // a --set comes after and wins
  std::vector<atl::TrialRecord> records;
  return atl::bench::run_bench(options,
                               {{"decoupled", {"mode=decoupled"}}, {"dp", {"mode=dp"}}, {"elastic_dp", {"mode=elastic_dp"}}},
                               records);
}
