// `atoll chaos PLANS...`: fault plans (a folder of them: a chaos suite) run
// under each of their modes, every invariant checked, a table and a report.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "atoll/chaos.h"
#include "atoll/fault_plan.h"
#include "atoll/progress.h"
#include "atoll/run_plots.h"
#include "command.h"
#include "output_file.h"
#include "signal_stop.h"

namespace atl::cli {
namespace {

struct ChaosArgs {
  std::vector<std::string> paths;
  std::string report = output("chaos.json"), tapes = output("tapes"), data;
  int threads = 0;
  std::optional<uint64_t> seed;
};

// Every plan, checked before anything runs. A plan with nothing to inject
// would run the whole topology for nothing: refused, saying so.
Result<std::vector<FaultPlan>> load_plans(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& p : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      for (const auto& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file() && e.path().extension() == ".toml") files.push_back(e.path().string());
    } else {
      files.push_back(p);
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) return Status::not_found("no fault plans (*.toml) in the given paths");
  std::vector<FaultPlan> plans;
  for (const auto& f : files) {
    auto plan = load_fault_plan(f);
    if (!plan.ok()) return plan.status();
    if (plan->faults.empty() && !plan->random && !plan->invariants.max_eval_loss_increase)
      return Status::invalid_argument(f + ": the plan injects no fault ([[fault]], [random] or replay) and bounds "
                                      "no held-out loss: it would only run its topology; `atoll run` does that");
    plans.push_back(std::move(*plan));
  }
  return plans;
}

int chaos_command(const ChaosArgs& a) {
  auto loaded = load_plans(a.paths);
  if (!loaded.ok()) return fail(loaded.status());
  if (a.seed)
    for (auto& plan : *loaded) plan.seed = plan.topology.seed = *a.seed;  // another draw of faults and of training
  ChaosOptions options;
  options.run.data_root = a.data;
  options.run.compute_threads = a.threads;
  options.tape_dir = a.tapes;
  SignalStop signals;
  // Progress: each mode is a run, and so is its baseline when the plan bounds the held-out loss.
  size_t total = 0, index = 0, ran = 0;
  for (const auto& plan : *loaded) total += plan.modes.size() * (plan.invariants.max_eval_loss_increase ? 2 : 1);
  const auto began = std::chrono::steady_clock::now();
  auto run_began = began;
  double ran_seconds = 0;
  std::string current;
  options.running = [&](Run* run) {
    signals.watch(run);
    const auto now = std::chrono::steady_clock::now();
    if (run) {
      run_began = now;
      std::fprintf(stderr, "chaos: %s, %s: %s\n", current.c_str(), mode_name(run->topology().mode),
                   progress_text(index++, total, std::chrono::duration<double>(now - began).count(), ran,
                                 ran_seconds).c_str());
    } else {
      ++ran;
      ran_seconds += std::chrono::duration<double>(now - run_began).count();
    }
  };
  options.stopping = [&] { return signals.fired(); };
  std::vector<ChaosResult> all;
  for (const auto& plan : *loaded) {
    if (signals.fired()) break;  // the report covers the plans run so far
    current = plan.name + " (" + plan.path + ")";
    auto results = run_plan(plan, options);
    if (!results.ok()) return fail(results.status());
    for (auto& r : *results) {
      std::fputs(chaos_table({r}, /*header=*/false).c_str(), stderr);
      all.push_back(std::move(r));
    }
  }
  std::fputs(chaos_table(all).c_str(), stdout);
  if (!a.report.empty() && !write_output(a.report, chaos_json(all), "report")) return 1;
  if (!a.report.empty()) {
    // Each run's series and plots, and the modes of each plan side by side.
    const std::string stem = plot_stem(a.report);
    std::vector<SuiteRun> runs;
    for (const auto& r : all) runs.push_back({r.plan, series_of(r.report)});
    if (auto written = write_suite_plots(stem, std::move(runs)); !written.ok()) return fail(written.status());
    std::printf("plots: %s.<plan>-<mode>.{loss,learners,goodput}.svg, modes side by side in %s.<plan>.modes.svg\n",
                stem.c_str(), stem.c_str());
  }
  const auto failed = std::count_if(all.begin(), all.end(), [](const auto& r) { return !r.ok(); });
  std::printf("%zu runs, %ld with broken invariants%s\n", all.size(), static_cast<long>(failed),
              signals.fired() ? " (interrupted)" : "");
  if (signals.fired()) return kExitInterrupted;
  return failed ? 1 : 0;
}

}  // namespace

void add_chaos_command(CLI::App& app, int& status) {
  auto a = std::make_shared<ChaosArgs>();
  auto* chaos = app.add_subcommand("chaos", "Run fault plans (a folder of them: a chaos suite) and check their invariants");
  chaos->add_option("plans", a->paths, "Fault plans (TOML) or folders of them")->required();
  add_report_option(chaos, a->report);
  chaos->add_option("--tapes", a->tapes, "Folder for the event tapes (JSON lines), one per plan and mode")
      ->capture_default_str();
  add_data_option(chaos, a->data);
  add_threads_option(chaos, a->threads);
  chaos->add_option("--seed", a->seed,
                    "Run every plan with this seed: its random and message faults and its topology's seed\n"
                    "(default: each plan's own); the modes of a plan share its fault schedule either way");
  add_verbose_flag(chaos);
  chaos->footer(
      "\nEach plan names a topology, faults (timed, step-triggered, random) and invariants; see\n"
      "examples/chaos/. The table shows plan, mode, goodput, uptime, held-out loss (and that of\n"
      "the same run without faults when the plan bounds it), faults injected, learners\n"
      "recovered, verdict. A plan that injects nothing and bounds no held-out loss is refused.\n"
      "Exit status: 0 all invariants hold; 1 some broke; 2 a bad plan.");
  chaos->callback([a, &status] { status = chaos_command(*a); });
}

}  // namespace atl::cli
