// `atoll sweep`: a topology over a grid of settings and several seeds.
#pragma once

#include <string>
#include <vector>

namespace atl::cli {

struct SweepArgs {
  std::string file;                 // topology (empty: the built-in default)
  std::vector<std::string> grids;   // "key=v1,v2,..."
  std::vector<std::string> sets;    // shared overrides
  int seeds = 3;
  std::string out = "atoll-out/sweep";  // records, reports and sweep.json
  int curve = 0;                    // curve points per run (0: none)
  std::string data;
  int threads = 0;
};

// Runs the sweep, prints the sorted table and writes <out>/sweep.json.
// Exit status: 0 every trial ran; 1 a trial failed or Ctrl-C cut the sweep
// short (it resumes); 2 a bad grid, override or topology.
int sweep_command(const SweepArgs& args);

}  // namespace atl::cli
