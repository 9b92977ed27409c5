#include "simulate_command.h"

#include <cstdio>

#include "atoll/simulation.h"
#include "output_file.h"

namespace atl::cli {

int simulate_command(const SimulateArgs& args) {
  auto plan = load_simulation_plan(args.plan, args.sets);
  if (!plan.ok()) {
    std::fprintf(stderr, "atoll: %s\n", plan.status().to_string().c_str());
    return 2;
  }
  size_t done = 0;
  auto report = run_simulation(*plan, [&](const CellResult& r) {
    // Progress on stderr: the table on stdout stays clean to pipe.
    ++done;
    std::fprintf(stderr, "\r[%zu] %s M=%d K=%d at %lld chips: %.1f%% goodput (+-%.1f, %.0f simulated hours)   ",
                 done, mode_name(r.cell.mode), r.cell.learners, r.cell.quorum, static_cast<long long>(r.cell.chips),
                 100.0 * r.goodput, 100.0 * r.goodput_halfwidth, r.simulated_hours);
  });
  std::fprintf(stderr, "\n");
  if (!report.ok()) {
    std::fprintf(stderr, "atoll: %s\n", report.status().to_string().c_str());
    return 2;
  }
  std::fputs(simulation_table(*plan, *report).c_str(), stdout);
  bool ok = true;
  if (!args.report.empty()) ok &= write_output(args.report, simulation_json(*plan, *report), "report");
  if (!args.plot.empty() && plan->planning) ok &= write_output(args.plot, planning_svg(*plan, *report), "planning plot");
  return ok ? 0 : 1;
}

}  // namespace atl::cli
