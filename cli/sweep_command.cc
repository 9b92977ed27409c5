#include "sweep_command.h"

#include <atomic>
#include <csignal>
#include <cstdio>

#include "atoll/log.h"
#include "atoll/sweep_runner.h"

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

  set_log_level(LogLevel::kWarn);
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

}  // namespace atl::cli
