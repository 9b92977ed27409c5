// `atoll simulate`: goodput at cluster scale in virtual time (atoll/simulation.h).
#pragma once

#include <string>
#include <vector>

namespace atl::cli {

struct SimulateArgs {
  std::string plan;                                   // TOML (examples/simulate/)
  std::vector<std::string> sets;                      // "key=value" over the plan's keys
  std::string report = "atoll-out/simulate/report.json";  // JSON; empty: none
  std::string plot = "atoll-out/simulate/planning.svg";   // the planning view; empty: none
};

// Runs every cell of the plan, prints the table and writes the report.
// Exit status: 0 done; 1 an output could not be written; 2 a bad plan or arguments.
int simulate_command(const SimulateArgs& args);

}  // namespace atl::cli
