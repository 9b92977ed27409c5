// Runs one topology in several variants, each over seeds, one run after the
// other, through the sweep engine (atoll/sweep_runner.h): resumable in its
// folder, with progress lines and a table of mean and spread. The engine of
// the comparison benchmarks (modes_bench, parity_bench); a benchmark, never a
// pass/fail test.
#pragma once

#include <string>
#include <vector>

#include "atoll/sweep.h"

namespace atl::bench {

struct BenchOptions {
  std::string topology_file;           // empty: the built-in default
  std::vector<std::string> overrides;  // shared by every variant (before its own)
  int seeds = 1;                       // seed = 1..seeds
  std::string out;                     // folder: every run's record and report, and the JSON
  std::vector<std::string> only;       // the variants (or groups) to run; empty: the default set
  int curve_points = 0;                // evaluations during each run (quality against time)
};

// Parses "[TOPOLOGY.toml] [--set key=value]... [--seeds N] [--out DIR]
// [--only NAME,...]" into `options`; `usage` is printed for --help. Returns
// -1 to go on, else an exit status. --only's names are split at commas, but
// not at ", " (part of labels such as "decoupled, again").
int parse_bench_args(int argc, char** argv, const char* usage, BenchOptions& options);

// Runs every variant x seed not recorded in options.out yet, prints the sweep
// table and writes <out>/sweep.json. Fills `records` with every trial's
// record. Returns a process exit status: 0 all ran; 1 a run failed or was
// interrupted (Ctrl-C; the same command resumes); 2 a topology or override
// was bad.
int run_bench(const BenchOptions& options, const std::vector<Variant>& variants, std::vector<TrialRecord>& records);

}  // namespace atl::bench
