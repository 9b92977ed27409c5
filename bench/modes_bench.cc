// The same topology in the three modes, side by side (no faults): throughput,
// bytes per token, goodput and held-out quality.
//
//   atoll_modes_bench [TOPOLOGY.toml] [--set key=value]... [--out FILE.json]
// Default: the built-in topology (the transformer on State of the Union text).
// Issue 3's table: atoll_modes_bench examples/topologies/mnist.toml
#include "compare.h"

int main(int argc, char** argv) {
  atl::bench::CompareOptions options;
  options.json_out = "atoll_modes_bench.json";
  const char* usage = "Runs decoupled, dp and elastic_dp on one topology, one after the other.\n";
  if (int status = atl::bench::parse_compare_args(argc, argv, usage, options); status >= 0) return status;
  return atl::bench::compare(options, {{"decoupled", {"mode=decoupled"}},
                                       {"dp", {"mode=dp"}},
                                       {"elastic_dp", {"mode=elastic_dp"}}});
}
