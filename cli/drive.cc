#include "drive.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>

#include "atoll/log.h"
#include "command.h"
#include "output_file.h"
#include "signal_stop.h"

namespace atl::cli {
namespace {

std::string human(double x) {
  char buf[32];
  if (x >= 1e9) std::snprintf(buf, sizeof buf, "%.2fG", x / 1e9);
  else if (x >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", x / 1e6);
  else if (x >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", x / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

std::string learner_ids(const RunOptions& options) {
  std::string s;
  for (uint32_t id : options.cluster.learner_ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

std::string versions_text(const std::vector<uint64_t>& versions) {
  std::string s = "[";
  for (size_t i = 0; i < versions.size(); ++i) s += (i ? " " : "") + std::to_string(versions[i]);
  return s + "]";
}

}  // namespace

std::string progress_line(const RunView& v) {
  char buf[256];
  const int up = static_cast<int>(std::count_if(v.per_learner.begin(), v.per_learner.end(),
                                                [](const LearnerView& l) { return l.state == LearnerState::kUp; }));
  std::snprintf(buf, sizeof buf,
                "[%6.1fs] tokens %s/%s  loss %.4f  rounds %llu  versions %llu-%llu  goodput %.2f  learners %d/%d  "
                "bytes %s",
                v.seconds, human(double(v.tokens)).c_str(), human(double(v.token_budget)).c_str(), v.train_loss,
                static_cast<unsigned long long>(v.stats.rounds), static_cast<unsigned long long>(v.versions_min()),
                static_cast<unsigned long long>(v.versions_max()), v.goodput, up, v.learners,
                human(double(v.bytes_up + v.bytes_down)).c_str());
  return buf;
}

int drive(const Topology& topology, const RunOptions& options, const std::string& report_path, bool quiet,
          const MetricsFlags& metrics, const std::function<void(Run&)>& started, std::function<void(Run&)> on_signal) {
  // The endpoint first: a port in use fails before anything trains.
  auto status = RunStatus::start(metrics, options.cluster.token);
  if (!status.ok()) return fail(status.status());
  return drive(topology, options, report_path, quiet, status->get(), started, std::move(on_signal));
}

int drive(const Topology& topology, const RunOptions& options, const std::string& report_path, bool quiet,
          RunStatus* status, const std::function<void(Run&)>& started,
          std::function<void(Run&)> on_signal) {
  const bool live = !quiet && ::isatty(STDOUT_FILENO);
  std::mutex out;
  std::string line;  // the progress line currently on screen
  if (live)
    set_log_sink([&](LogLevel, const std::string& text) {
      std::lock_guard lock(out);
      std::fprintf(stdout, "\r\033[2K");
      std::fflush(stdout);
      std::fprintf(stderr, "%s\n", text.c_str());
      std::fprintf(stdout, "%s", line.c_str());
      std::fflush(stdout);
    });
  auto run = Run::start(topology, options);
  if (!run.ok()) return fail(run.status());
  if (status) status->watch(run->get());
  if (started) started(**run);
  SignalStop signals(std::move(on_signal));
  signals.watch(run->get());
  std::atomic<bool> done{false};
  std::thread printer([&] {
    int ticks = 0;
    while (!done) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      if (quiet || done) continue;
      const std::string text = progress_line((*run)->view());
      if (live) {
        std::lock_guard lock(out);
        line = text;
        std::fprintf(stdout, "\r\033[2K%s", line.c_str());
        std::fflush(stdout);
      } else if (++ticks % 40 == 0) {  // every 10 s in a log
        std::fprintf(stderr, "%s\n", text.c_str());
      }
    }
  });
  auto report = (*run)->wait();
  signals.watch(nullptr);
  if (status) status->watch(nullptr);
  done = true;
  printer.join();
  if (live) {
    std::lock_guard lock(out);
    line.clear();
    std::fprintf(stdout, "\r\033[2K");
  }
  set_log_sink(nullptr);
  if (!report.ok()) {
    std::fprintf(stderr, "atoll: %s\n", report.status().to_string().c_str());
    return exit_status_of(report.status());  // the run started and could not finish (a refusal, a lost syncer)
  }
  if (!options.cluster.join.empty()) {
    std::printf("learners %s: done; newest adopted versions %s; restarts %llu\n", learner_ids(options).c_str(),
                versions_text(report->max_adopted_versions).c_str(), static_cast<unsigned long long>(report->restarts));
  } else {
    std::fputs(report->to_table().c_str(), stdout);
  }
  if (!report_path.empty() && !write_output(report_path, report->to_json(), "report")) return kExitFailed;
  if (options.cluster.join.empty() && !write_plots(report_path, *report)) return kExitFailed;
  // A syncer process whose run could not go on (its gateway stopped) still reports what it did.
  if (const std::string failure = (*run)->failure(); !failure.empty()) {
    std::fprintf(stderr, "atoll: the run failed: %s\n", failure.c_str());
    return kExitFailed;
  }
  return report->gave_up.empty() ? kExitDone : kExitFailed;
}

}  // namespace atl::cli
