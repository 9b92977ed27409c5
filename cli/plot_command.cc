// `atoll plot REPORT.json`: the plots of a run or a chaos suite, drawn again.
#include <memory>

#include "command.h"
#include "run_status.h"

namespace atl::cli {

void add_plot_command(CLI::App& app, int& status) {
  auto report = std::make_shared<std::string>();
  auto* plot = app.add_subcommand("plot", "Draw the plots of a run (or a chaos suite) again from the series beside its report");
  plot->add_option("report", *report, "The JSON report of `atoll run` or `atoll chaos`")->required();
  plot->footer(
      "\nReads REPORT.series.csv and REPORT.events.csv (a chaos suite: REPORT.<plan>-<mode>.series.csv)\n"
      "and writes the SVG plots beside them: loss against tokens and time, steps per learner with the\n"
      "faults marked, goodput and alive share over time, and each plan's modes side by side.\n"
      "Example:\n"
      "  atoll run --report atoll-out/r.json && atoll plot atoll-out/r.json");
  plot->callback([report, &status] { status = plot_command(*report); });
}

}  // namespace atl::cli
