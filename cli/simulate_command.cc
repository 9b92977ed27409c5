#include "simulate_command.h"

#include <cstdio>
#include <string>
#include <memory>

#include "atoll/simulation.h"
#include "command.h"
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
    const std::string scavenged = r.cell.scavenged >= 0 ? " +" + std::to_string(r.cell.scavenged) + " scavenged" : "";
    std::fprintf(stderr, "\r[%zu] %s M=%d%s K=%d at %lld chips: %.1f%% goodput (+-%.1f, %.0f simulated hours)   ",
                 done, mode_name(r.cell.mode), r.cell.learners, scavenged.c_str(), r.cell.quorum,
                 static_cast<long long>(r.cell.chips), 100.0 * r.goodput, 100.0 * r.goodput_halfwidth,
                 r.simulated_hours);
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

void add_simulate_command(CLI::App& app, int& status) {
  auto a = std::make_shared<SimulateArgs>();
  auto* simulate = app.add_subcommand(
      "simulate", "Goodput at cluster scale: a simulation in virtual time, its rounds run by the real syncer");
  simulate->add_option("plan", a->plan, "Simulation plan (TOML); see examples/simulate/")->required();
  // Not add_set_option (command.h): these keys are a simulation plan's, not a topology's.
  simulate->add_option("--set", a->sets,
                       "Override a plan key, e.g. --set failures.mtbi_chip_years=0.5 --set 'grid.modes=[\"dp\"]'");
  add_report_option(simulate, a->report);
  simulate->add_option("--plot", a->plot, "Where to draw the planning view (SVG; empty: none)")->capture_default_str();
  simulate->footer(
      "N chips fail as Poisson processes (MTBI per chip), slices recover after random delays, and dp, elastic dp\n"
      "or M decoupled learners train on; every decoupled round is decided by the real SyncerCore in virtual time.\n"
      "Prints goodput beside the plan's references (the paper's Table 1 in the example), the rule of thumb\n"
      "(M learners at N chips vs elastic dp at N/M) and the planning view (goodput and uptime against M and K).\n"
      "With [network], every message crosses its learner's link (rate, delay, jitter, loss; per region) and\n"
      "the hub's, sized by the real codecs, and partitions cut learners off for a while. [utilization] finds the\n"
      "smallest link bandwidth at which each method keeps a share of compute busy (Streaming DiLoCo's Table 4).\n"
      "Examples:\n"
      "  atoll simulate examples/simulate/paper_table1.toml\n"
      "  atoll simulate examples/simulate/table4.toml --report atoll-out/simulate/table4.json\n"
      "  atoll simulate examples/simulate/wan_bench.toml --set 'network.link=\"rate=1gbit,delay=40ms\"'\n"
      "  atoll simulate examples/simulate/planning.toml --set planning.chips=100000 --set failures.mtbi_chip_years=3\n"
      "Exit status: 0 done; 1 an output could not be written; 2 a bad plan or arguments.");
  simulate->callback([a, &status] { status = simulate_command(*a); });
}

}  // namespace atl::cli
