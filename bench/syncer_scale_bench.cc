// The protocol at scale: the real SyncerCore driven in virtual time by the
// cluster simulator (atoll/simulation.h) for many learners, on the failure
// model fitted to the paper's Table 1 at 1.2M chips.
//
//   atoll_syncer_scale_bench [--learners 64,256,1000,4000] [--parameters 0,1000000]
//                            [--hours H] [--step-jitter S] [--out FILE.json]
//
// Per cell: rounds, the SyncerCore's time per round and per round and learner
// (flat when a round costs O(M)), its utilization (its time over the simulated
// time: at 1 it can no longer keep up with the learners), and the peak memory
// of the process that ran the cell (each cell runs in a child process so that
// its peak is its own). With --parameters the merged model has that many
// parameters, so a round costs what merging them costs. A cell that cannot run
// (a topology the core refuses) is reported, in the JSON too, and skipped.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "atoll/progress.h"
#include "atoll/simulation.h"

namespace {

constexpr const char* kPlan = R"(
name = "syncer_scale"
seed = 1
precision = 0.0001         # never reached: every cell runs max_hours
[failures]
mtbi_chip_years = 1.0
slice_chips = 16384
while_down = false
downscale_seconds = 10
upscale_seconds = 10
[failures.recovery]
distribution = "exponential"
seconds = 80
[training]
step_seconds = 1
set = ["outer.sync_every=12", "outer.fragments=4"]
[grid]
chips = [1200000]
)";

std::vector<int64_t> parse_list(const char* flag, const char* text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0) {
      std::fprintf(stderr, "atoll_syncer_scale_bench: %s %s: expected a comma-separated list of integers\n", flag, text);
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

struct Row {
  int learners = 0;
  int64_t parameters = 0;
  double hours = 0, goodput = 0;
  unsigned long long rounds = 0, events = 0;
  double syncer_seconds = 0, wall_seconds = 0, peak_mib = 0;
  double busiest_shard_seconds = 0;  // of syncer_seconds (one shard: all of it)
  std::string error;  // the cell did not run: why
};

// Runs one cell in a child process; its peak RSS is the cell's own.
bool run_cell(const atl::SimulationPlan& base, int learners, int64_t parameters, Row& row) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    close(fds[0]);
    atl::SimulationPlan plan = base;
    plan.training.parameters = parameters;
    auto r = atl::simulate_cell(plan, atl::SimulationCell{atl::Mode::kDecoupled, learners, 1200000, 1, 0});
    char line[512];
    const int n = r.ok() ? std::snprintf(line, sizeof line, "%.9g %llu %llu %.9g %.9g %.9g %.9g\n", r->goodput,
                                         static_cast<unsigned long long>(r->rounds),
                                         static_cast<unsigned long long>(r->events), r->syncer_seconds,
                                         r->wall_seconds, r->simulated_hours, r->syncer_busiest_shard_seconds)
                         : std::snprintf(line, sizeof line, "error %s\n", r.status().to_string().c_str());
    (void)!write(fds[1], line, static_cast<size_t>(n));
    _exit(r.ok() ? 0 : 1);
  }
  close(fds[1]);
  std::string text;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  row.learners = learners;
  row.parameters = parameters;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    row.error = text.rfind("error ", 0) == 0 ? text.substr(6) : "the cell's process failed: " + text;
    while (!row.error.empty() && row.error.back() == '\n') row.error.pop_back();
    return false;
  }
  std::sscanf(text.c_str(), "%lg %llu %llu %lg %lg %lg %lg", &row.goodput, &row.rounds, &row.events, &row.syncer_seconds,
              &row.wall_seconds, &row.hours, &row.busiest_shard_seconds);
  row.peak_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> learners = {64, 256, 1000, 4000}, parameters = {0};
  double hours = 1.0, jitter = 0.0;
  int shards = 1;
  std::string out = "atoll-out/bench/syncer_scale.json";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--help" || a == "-h") {
      std::printf("atoll_syncer_scale_bench [--learners 64,256,1000,4000] [--parameters 0,1000000] [--hours 1] [--step-jitter 0] [--out FILE]\n"
                  "The real SyncerCore at 1.2M simulated chips (the paper's failure model as fitted in\n"
                  "examples/simulate/paper_table1.toml): time per round, utilization and peak memory against M.\n"
                  "--step-jitter: log-normal sigma of step times (0: learners step in lockstep, and every\n"
                  "learner's push of a round is in flight at once).\n"
                  "--shards S: a syncer in S shards (one SyncerCore each); 'busiest shard' is the utilization\n"
                  "of the shard that spent the most.\n");
      return 0;
    }
    if (a == "--learners" && has_value) learners = parse_list("--learners", argv[++i]);
    else if (a == "--parameters" && has_value) parameters = parse_list("--parameters", argv[++i]);
    else if (a == "--hours" && has_value) hours = std::atof(argv[++i]);
    else if (a == "--step-jitter" && has_value) jitter = std::atof(argv[++i]);
    else if (a == "--shards" && has_value) shards = std::atoi(argv[++i]);
    else if (a == "--out" && has_value) out = argv[++i];
    else {
      std::fprintf(stderr, "atoll_syncer_scale_bench: unknown or incomplete argument '%s' (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (!(hours > 0) || !(jitter >= 0) || shards < 1) {
    std::fprintf(stderr, "atoll_syncer_scale_bench: --hours must be > 0, --step-jitter >= 0 and --shards >= 1\n");
    return 2;
  }
  auto plan = atl::parse_simulation_plan(kPlan, "syncer_scale");
  if (!plan.ok()) {
    std::fprintf(stderr, "atoll_syncer_scale_bench: %s\n", plan.status().to_string().c_str());
    return 2;
  }
  plan->min_hours = plan->max_hours = hours;
  plan->training.step_jitter = jitter;
  plan->training.syncer_shards = shards;

  std::printf("%8s %11s %9s %9s %14s %14s %12s %14s %10s %9s %9s\n", "learners", "parameters", "sim h", "rounds",
              "syncer ms/rnd", "us/rnd/learner", "utilization", "busiest shard", "peak MiB", "goodput", "wall s");
  std::vector<Row> rows;
  const size_t cells = parameters.size() * learners.size();
  const auto began = std::chrono::steady_clock::now();
  double ran_seconds = 0;
  bool failed = false;
  for (int64_t p : parameters)
    for (int64_t m : learners) {
      Row row;
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      std::fprintf(stderr, "M=%lld, %lld parameters: %s\n", static_cast<long long>(m), static_cast<long long>(p),
                   atl::progress_text(rows.size(), cells, elapsed, rows.size(), ran_seconds).c_str());
      if (!run_cell(*plan, static_cast<int>(m), p, row)) {
        if (row.error.empty()) return 1;  // the bench itself failed (pipe, fork)
        std::printf("%8d %11lld   skipped: %s\n", row.learners, static_cast<long long>(row.parameters), row.error.c_str());
        failed = true;
        rows.push_back(row);
        continue;
      }
      ran_seconds += row.wall_seconds;
      const double per_round = row.rounds ? 1e3 * row.syncer_seconds / double(row.rounds) : 0.0;
      const double utilization = row.syncer_seconds / (row.hours * 3600.0);
      std::printf("%8d %11lld %9.2f %9llu %14.3f %14.3f %12.4f %14.4f %10.1f %9.3f %9.1f\n", row.learners,
                  static_cast<long long>(row.parameters), row.hours, row.rounds, per_round,
                  1e3 * per_round / double(row.learners), utilization,
                  row.busiest_shard_seconds / (row.hours * 3600.0), row.peak_mib, row.goodput, row.wall_seconds);
      std::fflush(stdout);
      rows.push_back(row);
    }

  std::error_code ec;
  if (const auto dir = std::filesystem::path(out).parent_path(); !dir.empty()) std::filesystem::create_directories(dir, ec);
  std::ofstream f(out);
  f << "{\"bench\":\"syncer_scale\",\"chips\":1200000,\"step_jitter\":" << jitter << ",\"shards\":" << shards
    << ",\"rows\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    if (!r.error.empty()) {
      std::string why;
      for (char c : r.error) {
        if (c == '"' || c == '\\') why += '\\';
        if (static_cast<unsigned char>(c) >= 0x20) why += c;
      }
      f << (i ? "," : "") << "{\"learners\":" << r.learners << ",\"parameters\":" << r.parameters << ",\"error\":\"" << why
        << "\"}";
      continue;
    }
    const double per_round = r.rounds ? 1e3 * r.syncer_seconds / double(r.rounds) : 0.0;
    char line[640];
    std::snprintf(line, sizeof line,
                  "%s{\"learners\":%d,\"parameters\":%lld,\"simulated_hours\":%.6g,\"rounds\":%llu,\"events\":%llu,"
                  "\"syncer_seconds\":%.6g,\"syncer_ms_per_round\":%.6g,\"syncer_us_per_round_per_learner\":%.6g,"
                  "\"utilization\":%.6g,\"busiest_shard_utilization\":%.6g,\"peak_rss_mib\":%.6g,\"goodput\":%.6g,"
                  "\"wall_seconds\":%.6g}",
                  i ? "," : "", r.learners, static_cast<long long>(r.parameters), r.hours, r.rounds, r.events,
                  r.syncer_seconds, per_round, 1e3 * per_round / double(r.learners),
                  r.syncer_seconds / (r.hours * 3600.0), r.busiest_shard_seconds / (r.hours * 3600.0), r.peak_mib,
                  r.goodput, r.wall_seconds);
    f << line;
  }
  f << "]}\n";
  if (!f) {
    std::fprintf(stderr, "atoll_syncer_scale_bench: cannot write %s\n", out.c_str());
    return 1;
  }
  std::printf("written to %s\n", out.c_str());
  return failed ? 1 : 0;
}
