#include "compare.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "atoll/log.h"
#include "atoll/sweep_runner.h"

namespace atl::bench {
namespace {

std::atomic<bool> stop_requested{false};
void on_signal(int) { stop_requested = true; }

// "a,b" is two names; "decoupled, again" is one: a comma followed by a space
// belongs to the name, as it does in the variants' labels.
std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == ',' && (i + 1 == s.size() || s[i + 1] != ' ')) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  out.push_back(s.substr(start));
  return out;
}

}  // namespace

int parse_bench_args(int argc, char** argv, const char* usage, BenchOptions& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--set" && has_value) {
      options.overrides.push_back(argv[++i]);
    } else if (a == "--out" && has_value) {
      options.out = argv[++i];
    } else if (a == "--seeds" && has_value) {
      options.seeds = std::atoi(argv[++i]);
      if (options.seeds < 1 || options.seeds > 1000) {
        std::fprintf(stderr, "%s: --seeds %s: expected 1 to 1000\n", argv[0], argv[i]);
        return 2;
      }
    } else if (a == "--only" && has_value) {
      options.only = split_names(argv[++i]);
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: %s [TOPOLOGY.toml] [--set key=value]... [--seeds N] [--out DIR] [--only NAME,...]\n%s",
                  argv[0], usage);
      return 0;
    } else if (!a.starts_with("-") && options.topology_file.empty()) {
      options.topology_file = a;
    } else {
      std::fprintf(stderr, "%s: unknown argument '%s' (see --help)\n", argv[0], a.c_str());
      return 2;
    }
  }
  return -1;
}

int run_bench(const BenchOptions& options, const std::vector<Variant>& variants, std::vector<TrialRecord>& records) {
  set_log_level(LogLevel::kWarn);
  SweepSpec spec;
  spec.topology_file = options.topology_file;
  spec.overrides = options.overrides;
  spec.variants = variants;
  spec.seeds.clear();
  for (int s = 1; s <= options.seeds; ++s) spec.seeds.push_back(static_cast<uint64_t>(s));
  spec.dir = options.out;
  spec.run.curve_points = options.curve_points;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  auto outcome = run_sweep(
      spec, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); },
      [] { return stop_requested.load(); });
  if (!outcome.ok()) {
    std::fprintf(stderr, "%s\n", outcome.status().to_string().c_str());
    return outcome.status().code() == Status::Code::kInvalidArgument ? 2 : 1;
  }
  records = outcome->records;
  std::fputs(sweep_table(outcome->rows).c_str(), stdout);
  std::printf("every run's record and report in %s/, the table as JSON in %s\n", spec.dir.c_str(),
              outcome->json_path.c_str());
  if (outcome->interrupted) {
    std::printf("interrupted: the same command resumes\n");
    return 1;
  }
  return outcome->failed ? 1 : 0;
}

}  // namespace atl::bench
