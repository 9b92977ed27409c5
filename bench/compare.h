// Runs one topology in several variants, one after the other, and prints a
// table of what each measured (throughput, bytes per token, goodput, quality).
// The engine of the comparison benchmarks (modes_bench, parity_bench); a
// benchmark, never a pass/fail test.
#pragma once

#include <string>
#include <vector>

namespace atl::bench {

struct Variant {
  std::string label;                   // first column of the table
  std::vector<std::string> overrides;  // "key=value", applied after the shared ones
};

struct CompareOptions {
  std::string topology_file;           // empty: the built-in default
  std::vector<std::string> overrides;  // shared by every variant (before its own)
  std::string json_out;                // every report, as a JSON array
};

// Runs every variant with checkpoints off. Returns a process exit status:
// 0 all ran; 1 a run failed; 2 a topology or override was bad.
int compare(const CompareOptions& options, const std::vector<Variant>& variants);

// Parses "[TOPOLOGY.toml] [--set key=value]... [--out FILE.json]" into
// `options`; `usage` is printed for --help. Returns -1 to go on, else an exit
// status.
int parse_compare_args(int argc, char** argv, const char* usage, CompareOptions& options);

}  // namespace atl::bench
