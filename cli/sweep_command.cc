#include "sweep_command.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>

#include "atoll/log.h"
#include "atoll/sweep_runner.h"
#include "command.h"

namespace atl::cli {
namespace {

std::atomic<bool> stop_requested{false};
void on_signal(int) { stop_requested = true; }

}  // namespace

int sweep_command(const SweepArgs& args) {
  std::vector<GridAxis> axes;
  for (const auto& g : args.grids) {
    auto axis = parse_grid_axis(g);
    if (!axis.ok()) {
      std::fprintf(stderr, "atoll: %s\n", axis.status().to_string().c_str());
      return 2;
    }
    for (const auto& a : axes)
      if (a.key == axis->key) {
        std::fprintf(stderr, "atoll: --grid %s: the key is given twice\n", axis->key.c_str());
        return 2;
      }
    if (axis->key == "seed") {
      std::fprintf(stderr, "atoll: --grid seed=...: use --seeds N (seeds 1..N for every combination)\n");
      return 2;
    }
    axes.push_back(std::move(*axis));
  }
  SweepSpec spec;
  spec.topology_file = args.file;
  spec.overrides = args.sets;
  spec.variants = expand_grid(axes);
  spec.seeds.clear();
  for (int s = 1; s <= args.seeds; ++s) spec.seeds.push_back(static_cast<uint64_t>(s));
  spec.dir = args.out;
  spec.run.data_root = args.data;
  spec.run.compute_threads = args.threads;
  spec.run.curve_points = args.curve;

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::fprintf(stderr, "sweep: %zu combination(s) x %d seed(s); records in %s\n", spec.variants.size(), args.seeds,
               spec.dir.c_str());
  auto outcome = run_sweep(
      spec, [](const std::string& line) { std::fprintf(stderr, "sweep %s\n", line.c_str()); },
      [] { return stop_requested.load(); });
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (!outcome.ok()) {
    std::fprintf(stderr, "atoll: %s\n", outcome.status().to_string().c_str());
    return outcome.status().code() == Status::Code::kInvalidArgument ? 2 : 1;
  }
  std::fputs(sweep_table(outcome->rows).c_str(), stdout);
  std::printf("%d run now, %d kept from before, %d failed; JSON written to %s\n", outcome->ran - (outcome->interrupted ? 1 : 0),
              outcome->resumed, outcome->failed, outcome->json_path.c_str());
  if (outcome->interrupted) {
    std::printf("interrupted: the same command resumes the sweep\n");
    return 1;
  }
  return outcome->failed ? 1 : 0;
}

void add_sweep_command(CLI::App& app, int& status) {
  auto a = std::make_shared<SweepArgs>();
  auto* sweep = app.add_subcommand(
      "sweep", "Run a topology over a grid of settings and several seeds; print a table, best first");
  sweep->add_option("file", a->file, "Topology file (TOML); none: the built-in default");
  sweep->add_option("--grid", a->grids,
                    "One axis: key=value1,value2,... (repeatable; every combination of the axes runs)");
  add_set_option(sweep, a->sets);
  sweep->add_option("--seeds", a->seeds, "Runs per combination, with seed = 1..N")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  sweep->add_option("--out", a->out, "Folder for every run's record (TOML) and report (JSON), and sweep.json")
      ->capture_default_str();
  add_curve_option(sweep, a->curve);
  add_data_option(sweep, a->data);
  add_threads_option(sweep, a->threads);
  add_verbose_flag(sweep);
  sweep->footer(
      "\nEvery run takes the --set overrides; the --grid axes vary between combinations.\n"
      "Runs are sequential and use the whole machine, one at a time; each prints a line when it\n"
      "starts (which of how many, elapsed, remaining) and when it ends. A finished run leaves its\n"
      "record in --out; the same command again skips what is recorded, so an interrupted sweep\n"
      "(Ctrl-C) resumes where it stopped. The table ranks combinations by mean held-out loss:\n"
      "bits per byte (language models) or accuracy, mean +- standard deviation over seeds.\n"
      "Examples:\n"
      "  atoll sweep --grid outer.lr=0.5,0.7,1.0 --grid outer.momentum=0.8,0.9 --seeds 3\n"
      "  atoll sweep examples/topologies/mnist.toml --grid inner.lr=1e-3,3e-3 --set tokens=600000\n"
      "Exit status: 0 every run finished; 1 a run failed or the sweep was interrupted; 2 bad arguments.");
  sweep->callback([a, &status] { status = sweep_command(*a); });
}

}  // namespace atl::cli
