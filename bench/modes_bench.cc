// The same topology in the three modes, side by side (no faults): throughput,
// bytes per token, goodput and held-out quality.
//
//   atoll_modes_bench [TOPOLOGY.toml] [--set key=value]... [--seeds N] [--out DIR]
// Default: the built-in topology (the transformer on State of the Union text).
// Issue 3's table: atoll_modes_bench examples/topologies/mnist.toml
#include "compare.h"

int main(int argc, char** argv) {
  atl::bench::BenchOptions options;
  options.out = "atoll-out/bench/modes";
  const char* usage =
      "Runs decoupled, dp and elastic_dp on one topology, one after the other. Records go to --out\n"
      "(default atoll-out/bench/modes); the same command resumes an interrupted run.\n";
  if (int status = atl::bench::parse_bench_args(argc, argv, usage, options); status >= 0) return status;
  std::vector<atl::TrialRecord> records;
  return atl::bench::run_bench(options,
                               {{"decoupled", {"mode=decoupled"}}, {"dp", {"mode=dp"}}, {"elastic_dp", {"mode=elastic_dp"}}},
                               records);
}
