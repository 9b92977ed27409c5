#include "run_status.h"

#include <cstdio>
#include <filesystem>

#include "atoll/cluster.h"
#include "atoll/log.h"
#include "atoll/run_plots.h"

namespace atl::cli {

// A stall from the page lasts this long: long enough to see on the charts.
constexpr double kStallSeconds = 5.0;

Result<std::unique_ptr<RunStatus>> RunStatus::start(const MetricsFlags& flags, const std::string& token) {
  if (flags.listen.empty()) return std::unique_ptr<RunStatus>();
  auto at = parse_endpoint(flags.listen);
  if (!at.ok()) return at.status().with_context("--metrics");
  std::unique_ptr<RunStatus> status(new RunStatus());
  StatusServerOptions options;
  options.host = at->host;
  options.port = at->port;
  options.token = token;
  options.allow_control = flags.allow_control;
  options.public_metrics = flags.public_metrics;
  RunStatus* self = status.get();
  StatusSource source;
  source.view = [self] { return self->view(); };
  source.health = [self] { return self->probe(false); };
  source.ready = [self] { return self->probe(true); };
  if (flags.allow_control)
    source.control = [self](const std::string& action, uint32_t learner) { return self->control(action, learner); };
  auto server = StatusServer::start(options, source);
  if (!server.ok()) return server.status();
  status->server_ = std::move(*server);
  const bool local = at->host == "127.0.0.1" || at->host == "localhost" || at->host == "::1";
  if (token.empty() && !local)
    log_warn("--metrics " + flags.listen + ": anyone who reaches this port can read the run's status (read-only" +
             std::string(flags.allow_control ? ", and with --allow-control kill learners" : "") + ")");
  std::fprintf(stderr,
               "atoll: status page at http://%s:%u/, Prometheus metrics at /metrics%s, probes at /healthz and /readyz\n",
               at->host.c_str(), status->port(),
               token.empty() || flags.public_metrics ? "" : " (they want the cluster token)");
  return status;
}

RunStatus::~RunStatus() { server_.reset(); }  // before the members it reads

void RunStatus::watch(Run* run) {
  std::lock_guard lock(mu_);
  if (run_ && !run) last_ = run_->view();
  run_ = run;
  phase_ = run ? RunPhase::kRunning : RunPhase::kOver;
}

uint16_t RunStatus::port() const { return server_ ? server_->port() : 0; }

RunView RunStatus::view() {
  std::lock_guard lock(mu_);
  if (run_) last_ = run_->view();
  return last_;
}

ProbeAnswer RunStatus::probe(bool ready) {
  std::lock_guard lock(mu_);
  if (run_) last_ = run_->view();
  return ready ? probe_ready(phase_, last_) : probe_health(phase_, last_);
}

void add_metrics_flags(CLI::App* command, MetricsFlags& flags) {
  auto* listen = command->add_option(
      "--metrics", flags.listen,
      "Serve a live status page at /, Prometheus metrics at /metrics and probes at /healthz and /readyz on "
      "HOST:PORT, e.g. 127.0.0.1:9464; across processes the page's data and metrics want the cluster token "
      "(Authorization: Bearer TOKEN), the probes do not");
  command->add_flag("--metrics-public", flags.public_metrics,
                    "Serve /metrics without the cluster token (a Prometheus that scrapes by annotation); the page's "
                    "data still wants it")
      ->needs(listen);
}

std::string RunStatus::control(const std::string& action, uint32_t learner) {
  std::lock_guard lock(mu_);
  if (!run_) return "no run is going on";
  if (learner >= run_->topology().learners.size()) return "there is no learner " + std::to_string(learner);
  bool done = false;
  if (action == "kill") done = run_->kill_learner(learner);
  else if (action == "stall") done = run_->stall_learner(learner, kStallSeconds);
  else return "unknown action '" + action + "': kill or stall";
  return done ? "" : "learner " + std::to_string(learner) + " is not running now";
}

bool write_plots(const std::string& report_path, const Report& report) {
  if (report_path.empty()) return true;
  auto written = write_run_plots(plot_stem(report_path), series_of(report));
  if (!written.ok()) {
    std::fprintf(stderr, "atoll: plots not written: %s\n", written.status().to_string().c_str());
    return false;
  }
  std::printf("plots: %s.{loss,learners,goodput}.svg (series: %s)\n", plot_stem(report_path).c_str(),
              (*written)[0].c_str());
  return true;
}

int plot_command(const std::string& report_path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(report_path, ec)) {
    std::fprintf(stderr, "atoll: %s: no such report\n", report_path.c_str());
    return 2;
  }
  const std::string stem = plot_stem(report_path);
  std::vector<std::string> written;
  if (std::filesystem::exists(stem + ".series.csv")) {
    auto w = redraw_run_plots(stem);
    if (!w.ok()) {
      std::fprintf(stderr, "atoll: %s\n", w.status().to_string().c_str());
      return 1;
    }
    written = *w;
  } else {
    // A chaos suite: STEM.<plan>-<mode>.series.csv per run; a side-by-side picture per plan.
    const auto folder = std::filesystem::path(stem).parent_path();
    const std::string prefix = std::filesystem::path(stem).filename().string() + ".";
    std::vector<SuiteRun> runs;
    for (const auto& e : std::filesystem::directory_iterator(folder.empty() ? "." : folder, ec)) {
      const std::string name = e.path().filename().string();
      if (!name.starts_with(prefix) || !name.ends_with(".series.csv")) continue;
      const std::string run = name.substr(prefix.size(), name.size() - prefix.size() - 11);
      auto series = read_run_series((folder / (prefix + run)).string());
      if (!series.ok()) {
        std::fprintf(stderr, "atoll: %s\n", series.status().to_string().c_str());
        return 1;
      }
      const std::string plan = run.substr(0, run.size() - series->mode.size() - 1);
      runs.push_back({plan, std::move(*series)});
    }
    if (runs.empty()) {
      std::fprintf(stderr, "atoll: no series beside %s (want %s.series.csv, or %s<plan>-<mode>.series.csv)\n",
                   report_path.c_str(), stem.c_str(), (stem + ".").c_str());
      return 1;
    }
    auto w = write_suite_plots(stem, std::move(runs));
    if (!w.ok()) {
      std::fprintf(stderr, "atoll: %s\n", w.status().to_string().c_str());
      return 1;
    }
    written = *w;
  }
  for (const auto& w : written) std::printf("%s\n", w.c_str());
  return 0;
}

}  // namespace atl::cli
