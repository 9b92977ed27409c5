// atoll: the command-line front of the embedding API (atoll/run.h).
//
//   atoll run [FILE] [--set key=value]... [--report FILE.json] [--seconds N]
//   atoll validate FILE [--set key=value]...
//   atoll topology [FILE] [--set key=value]...      (prints the effective topology)
//   atoll syncer [FILE] --listen HOST:PORT           (learners join from other processes)
//   atoll learner --join HOST:PORT --id N
//   atoll certs DIR                                  (a CA and certificates for TLS)
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include <algorithm>
#include <filesystem>

#include "atoll/certificates.h"
#include "atoll/chaos.h"
#include "atoll/cluster.h"
#include "atoll/cluster_token.h"
#include "atoll/fault_plan.h"
#include "atoll/file.h"
#include "atoll/fragments.h"
#include "atoll/job.h"
#include "local_cluster.h"
#include "atoll/log.h"
#include "atoll/progress.h"
#include "atoll/run_plots.h"
#include "atoll/run.h"
#include "atoll/topology_file.h"
#include "bandwidth_command.h"
#include "output_file.h"
#include "run_status.h"
#include "simulate_command.h"
#include "sweep_command.h"

namespace {

std::atomic<bool> interrupted{false};
void on_signal(int) { interrupted = true; }

// Ctrl-C or SIGTERM while runs go on: the current run is stopped in order, so
// its report and summary are still written. A signal handler may only set a
// flag; a watcher thread does the stopping.
class SignalStop {
 public:
  SignalStop() {
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    watcher_ = std::thread([this] {
      while (!done_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (!interrupted.exchange(false)) continue;
        atl::log_warn("interrupted: stopping the run (the report follows)");
        std::lock_guard lock(mu_);
        fired_ = true;
        if (run_) run_->stop();
      }
    });
  }
  ~SignalStop() {
    done_ = true;
    watcher_.join();
  }
  // The run to stop on a signal (nullptr: none now). One that starts after
  // the signal is stopped at once.
  void watch(atl::Run* run) {
    std::lock_guard lock(mu_);
    run_ = run;
    if (run_ && fired_) run_->stop();
  }
  bool fired() const {
    std::lock_guard lock(mu_);
    return fired_;
  }

 private:
  mutable std::mutex mu_;
  atl::Run* run_ = nullptr;
  bool fired_ = false;
  std::atomic<bool> done_{false};
  std::thread watcher_;
};

std::string human(double x) {
  char buf[32];
  if (x >= 1e9) std::snprintf(buf, sizeof buf, "%.2fG", x / 1e9);
  else if (x >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", x / 1e6);
  else if (x >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", x / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

std::string progress_line(const atl::RunView& v) {
  char buf[256];
  const int up = static_cast<int>(std::count_if(v.per_learner.begin(), v.per_learner.end(),
                                                [](const atl::LearnerView& l) { return l.state == atl::LearnerState::kUp; }));
  std::snprintf(buf, sizeof buf,
                "[%6.1fs] tokens %s/%s  loss %.4f  rounds %llu  versions %llu-%llu  goodput %.2f  learners %d/%d  "
                "bytes %s",
                v.seconds, human(double(v.tokens)).c_str(), human(double(v.token_budget)).c_str(), v.train_loss,
                static_cast<unsigned long long>(v.stats.rounds), static_cast<unsigned long long>(v.versions_min()),
                static_cast<unsigned long long>(v.versions_max()), v.goodput, up, v.learners,
                human(double(v.bytes_up + v.bytes_down)).c_str());
  return buf;
}

std::string learner_ids(const atl::RunOptions& options) {
  std::string s;
  for (uint32_t id : options.cluster.learner_ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

std::string versions_text(const std::vector<uint64_t>& versions) {
  std::string s = "[";
  for (size_t i = 0; i < versions.size(); ++i) s += (i ? " " : "") + std::to_string(versions[i]);
  return s + "]";
}

// A positive, finite number of seconds. (CLI11's Range lets nan and inf through.)
const CLI::Validator kPositiveSeconds(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0' || !std::isfinite(v) || v <= 0)
        return "expected a positive, finite number of seconds, got '" + text + "'";
      return {};
    },
    "SECONDS > 0");
const CLI::Range kThreads(1, 1024);

// Where run outputs go unless a flag says otherwise: one ignored folder.
constexpr const char* kOutputs = "atoll-out";
std::string output(const char* name) { return std::string(kOutputs) + "/" + name; }

using atl::cli::MetricsFlags;
using atl::cli::RunStatus;
using atl::cli::write_output;

int fail(const atl::Status& s) {
  std::fprintf(stderr, "atoll: %s\n", s.to_string().c_str());
  return 2;
}

// The plan a topology gives its model: "mlp 784-256-10, 2 fragments (200704 rda, 2826 avg)".
atl::Result<std::string> describe_plan(const atl::Topology& t) {
  auto model = atl::make_model(t);
  if (!model.ok()) return model.status();
  auto fragments = atl::plan_fragments((*model)->layout(), t);
  if (!fragments.ok()) return fragments.status();
  const size_t count = fragments->size();
  std::string s = (*model)->describe() + " (" + std::to_string((*model)->layout().size()) + " parameters), " +
                  std::to_string(count) + " fragment" + (count > 1 ? "s" : "") + ":";
  for (const auto& f : *fragments) s += " " + std::to_string(f.size) + " " + atl::merge_rule_name(f.rule);
  return s;
}

// `atoll run FILE --faults PLAN`: the plan's faults on this topology, and its invariants.
int run_with_plan(const atl::Topology& topology, const std::string& plan_path, const std::string& tape,
                  const std::string& report_path, double seconds, const std::string& data, int threads,
                  const MetricsFlags& metrics) {
  auto plan = atl::load_fault_plan(plan_path);
  if (!plan.ok()) return fail(plan.status());
  std::unique_ptr<RunStatus> status;
  if (!metrics.listen.empty()) {
    auto started = RunStatus::start(metrics, "");
    if (!started.ok()) return fail(started.status());
    status = std::move(*started);
  }
  if (seconds > 0) plan->seconds = seconds;
  atl::ChaosOptions options;
  options.run.data_root = data;
  options.run.compute_threads = threads;
  options.tape_dir = std::filesystem::path(tape).parent_path().string();
  if (options.tape_dir.empty()) options.tape_dir = ".";
  SignalStop signals;
  options.running = [&](atl::Run* run) {
    signals.watch(run);
    if (status) status->watch(run);
  };
  options.stopping = [&] { return signals.fired(); };
  auto result = atl::run_with_faults(topology, *plan, options);
  if (!result.ok()) return fail(result.status());
  if (!tape.empty() && !result->tape_path.empty() && result->tape_path != tape)
    std::filesystem::rename(result->tape_path, tape);
  std::fputs(result->report.to_table().c_str(), stdout);
  std::fputs(atl::chaos_table({*result}).c_str(), stdout);
  std::printf("event tape: %s\n", tape.c_str());
  if (!report_path.empty() && !write_output(report_path, result->report.to_json(), "report")) return 1;
  if (!atl::cli::write_plots(report_path, result->report)) return 1;
  if (signals.fired()) return 130;
  return result->ok() ? 0 : 1;
}

int chaos_command(const std::vector<std::string>& paths, const std::string& report_path, const std::string& tapes,
                  const std::string& data, int threads) {
  std::vector<std::string> plans;
  for (const auto& p : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      for (const auto& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file() && e.path().extension() == ".toml") plans.push_back(e.path().string());
    } else {
      plans.push_back(p);
    }
  }
  std::sort(plans.begin(), plans.end());
  if (plans.empty()) return fail(atl::Status::not_found("no fault plans (*.toml) in the given paths"));
  std::vector<atl::FaultPlan> loaded;
  for (const auto& p : plans) {  // all plans are checked before anything runs
    auto plan = atl::load_fault_plan(p);
    if (!plan.ok()) return fail(plan.status());
    loaded.push_back(std::move(*plan));
  }
  atl::ChaosOptions options;
  options.run.data_root = data;
  options.run.compute_threads = threads;
  options.tape_dir = tapes;
  SignalStop signals;
  // Progress: each mode is a run, and so is its baseline when the plan bounds the held-out loss.
  size_t total = 0, index = 0, ran = 0;
  for (const auto& plan : loaded) total += plan.modes.size() * (plan.invariants.max_eval_loss_increase ? 2 : 1);
  const auto began = std::chrono::steady_clock::now();
  auto run_began = began;
  double ran_seconds = 0;
  std::string current;
  options.running = [&](atl::Run* run) {
    signals.watch(run);
    const auto now = std::chrono::steady_clock::now();
    if (run) {
      run_began = now;
      std::fprintf(stderr, "chaos: %s, %s: %s\n", current.c_str(), atl::mode_name(run->topology().mode),
                   atl::progress_text(index++, total, std::chrono::duration<double>(now - began).count(), ran,
                                      ran_seconds).c_str());
    } else {
      ++ran;
      ran_seconds += std::chrono::duration<double>(now - run_began).count();
    }
  };
  options.stopping = [&] { return signals.fired(); };
  std::vector<atl::ChaosResult> all;
  for (const auto& plan : loaded) {
    if (signals.fired()) break;  // the report covers the plans run so far
    current = plan.name + " (" + plan.path + ")";
    auto results = atl::run_plan(plan, options);
    if (!results.ok()) return fail(results.status());
    for (auto& r : *results) {
      std::fputs(atl::chaos_table({r}, /*header=*/false).c_str(), stderr);
      all.push_back(std::move(r));
    }
  }
  std::fputs(atl::chaos_table(all).c_str(), stdout);
  if (!report_path.empty() && !write_output(report_path, atl::chaos_json(all), "report")) return 1;
  if (!report_path.empty()) {
    // Each run's series and plots, and the modes of each plan side by side.
    const std::string stem = atl::plot_stem(report_path);
    std::vector<atl::SuiteRun> runs;
    for (const auto& r : all) runs.push_back({r.plan, atl::series_of(r.report)});
    if (auto written = atl::write_suite_plots(stem, std::move(runs)); !written.ok()) return fail(written.status());
    std::printf("plots: %s.<plan>-<mode>.{loss,learners,goodput}.svg, modes side by side in %s.<plan>.modes.svg\n",
                stem.c_str(), stem.c_str());
  }
  const auto failed = std::count_if(all.begin(), all.end(), [](const auto& r) { return !r.ok(); });
  std::printf("%zu runs, %ld with broken invariants%s\n", all.size(), static_cast<long>(failed),
              signals.fired() ? " (interrupted)" : "");
  if (signals.fired()) return 130;
  return failed ? 1 : 0;
}

// Starts a run, shows its progress, waits, prints the summary and writes the
// report. `started` sees the run once it is up (to print a port, say).
int drive(const atl::Topology& topology, const atl::RunOptions& options, const std::string& report_path,
          bool quiet, const MetricsFlags& metrics, const std::function<void(atl::Run&)>& started = {}) {
  const bool live = !quiet && ::isatty(STDOUT_FILENO);
  std::mutex out;
  std::string line;  // the progress line currently on screen
  if (live)
    atl::set_log_sink([&](atl::LogLevel, const std::string& text) {
      std::lock_guard lock(out);
      std::fprintf(stdout, "\r\033[2K");
      std::fflush(stdout);
      std::fprintf(stderr, "%s\n", text.c_str());
      std::fprintf(stdout, "%s", line.c_str());
      std::fflush(stdout);
    });
  // The endpoint first: a port in use fails before anything trains.
  std::unique_ptr<RunStatus> status;
  if (!metrics.listen.empty()) {
    auto served = RunStatus::start(metrics, options.cluster.token);
    if (!served.ok()) return fail(served.status());
    status = std::move(*served);
  }
  auto run = atl::Run::start(topology, options);
  if (!run.ok()) return fail(run.status());
  if (status) status->watch(run->get());
  if (started) started(**run);
  SignalStop signals;
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
  atl::set_log_sink(nullptr);
  if (!report.ok()) {
    std::fprintf(stderr, "atoll: %s\n", report.status().to_string().c_str());
    return 1;  // the run started and could not finish (a refusal, a lost syncer)
  }
  if (!options.cluster.join.empty()) {
    std::printf("learners %s: done; newest adopted versions %s; restarts %llu\n", learner_ids(options).c_str(),
                versions_text(report->max_adopted_versions).c_str(), static_cast<unsigned long long>(report->restarts));
  } else {
    std::fputs(report->to_table().c_str(), stdout);
  }
  if (!report_path.empty() && !write_output(report_path, report->to_json(), "report")) return 1;
  if (options.cluster.join.empty() && !atl::cli::write_plots(report_path, *report)) return 1;
  return report->gave_up.empty() ? 0 : 1;
}

int run_command(const std::string& file, const std::vector<std::string>& sets, const std::string& report_path,
                double seconds, const std::string& data, int threads, bool quiet, const std::string& faults,
                const std::string& tape, const MetricsFlags& metrics) {
  auto topology = atl::load_topology(file, sets);
  if (!topology.ok()) return fail(topology.status());
  if (!faults.empty()) return run_with_plan(*topology, faults, tape, report_path, seconds, data, threads, metrics);
  atl::RunOptions options;
  options.data_root = data;
  options.seconds = seconds;
  options.compute_threads = threads;
  return drive(*topology, options, report_path, quiet, metrics);
}

// ---- across processes

struct ClusterFlags {
  std::string listen = "127.0.0.1:7070", join, token_file, port_file, run_name, save_model;
  std::string tls_cert, tls_key, tls_ca, tls_name, link;
  uint32_t id = 0;
  double give_up = 60, timeout = 5;
};

// All three TLS files or none; checked now (readable, the key of the
// certificate, signed by the CA, valid today), not at the first handshake.
// And the emulated link, if any.
atl::Status set_network(const ClusterFlags& c, atl::RunOptions::Cluster& cluster) {
  if (!c.link.empty()) {
    auto shape = atl::parse_link_shape(c.link);
    if (!shape.ok()) return shape.status().with_context("--link");
    cluster.link = *shape;
  }
  const int given = !c.tls_cert.empty() + !c.tls_key.empty() + !c.tls_ca.empty();
  if (given == 0) {
    if (!c.tls_name.empty()) return atl::Status::invalid_argument("--tls-name needs --tls-cert, --tls-key and --tls-ca");
    return {};
  }
  if (given != 3) return atl::Status::invalid_argument("TLS needs all of --tls-cert, --tls-key and --tls-ca");
  cluster.tls_certificate = c.tls_cert;
  cluster.tls_key = c.tls_key;
  cluster.tls_ca = c.tls_ca;
  cluster.tls_name = c.tls_name;
  return atl::check_tls_files({c.tls_cert, c.tls_key, c.tls_ca, c.tls_name});
}

int syncer_command(const std::string& file, const std::vector<std::string>& sets, const ClusterFlags& c,
                   const std::string& report_path, double seconds, const std::string& data, bool quiet,
                   const MetricsFlags& metrics) {
  auto topology = atl::load_topology(file, sets);
  if (!topology.ok()) return fail(topology.status());
  auto token = atl::load_cluster_token(c.token_file);
  if (!token.ok()) return fail(token.status());
  atl::RunOptions options;
  options.data_root = data;
  options.seconds = seconds;
  options.run_name = c.run_name;
  options.save_model = c.save_model;
  options.cluster.listen = c.listen;
  options.cluster.token = *token;
  options.cluster.connection_timeout_seconds = c.timeout;
  if (atl::Status s = set_network(c, options.cluster); !s.ok()) return fail(s);
  return drive(*topology, options, report_path, quiet, metrics, [&](atl::Run& run) {
    const auto at = atl::parse_endpoint(c.listen);
    std::printf("atoll syncer: serving learners on %s:%u (%zu learners expected)\n", at->host.c_str(), run.port(),
                topology->learners.size());
    std::fflush(stdout);
    if (!c.port_file.empty()) {
      const std::string tmp = c.port_file + ".tmp";
      std::ofstream(tmp) << run.port() << "\n";
      std::error_code ec;
      std::filesystem::rename(tmp, c.port_file, ec);  // readers never see half a number
      if (ec) atl::log_error("cannot write the port file " + c.port_file + ": " + ec.message());
    }
  });
}

int learner_command(const ClusterFlags& c, const std::string& report_path, const std::string& data, int threads) {
  auto at = atl::parse_endpoint(c.join);
  if (!at.ok()) return fail(at.status());
  auto token = atl::load_cluster_token(c.token_file);
  if (!token.ok()) return fail(token.status());
  atl::RunOptions options;
  options.data_root = data;
  options.compute_threads = threads;
  options.cluster.join = c.join;
  options.cluster.learner_ids = {c.id};
  options.cluster.token = *token;
  options.cluster.give_up_seconds = c.give_up;
  options.cluster.connection_timeout_seconds = c.timeout;
  if (atl::Status s = set_network(c, options.cluster); !s.ok()) return fail(s);
  auto topology = atl::fetch_topology(*at, c.id, options.cluster, c.give_up);
  if (!topology.ok()) {
    std::fprintf(stderr, "atoll: %s\n", topology.status().to_string().c_str());
    return 1;
  }
  return drive(*topology, options, report_path, /*quiet=*/true, MetricsFlags{});
}

// `atoll run FILE --processes`: the syncer and each learner as local
// processes joined over loopback with a fresh token, for convenience and
// to try the multi-process path on one machine. With `tls_dir`, over TLS
// with the certificates there (made by `atoll certs` if the folder has
// none). Ctrl-C or SIGTERM here ends the run in order: the syncer stops,
// tells the learners, writes the report. A second one kills every child.
int processes_command(const std::string& file, const std::vector<std::string>& sets, const std::string& report_path,
                      double seconds, const std::string& data, bool quiet, bool verbose, const std::string& tls_dir,
                      const std::string& link, const std::string& metrics) {
  auto topology = atl::load_topology(file, sets);
  if (!topology.ok()) return fail(topology.status());
  if (!link.empty())
    if (auto shape = atl::parse_link_shape(link); !shape.ok()) return fail(shape.status().with_context("--link"));
  if (!tls_dir.empty() && !std::filesystem::exists(tls_dir + "/syncer.pem"))
    std::fprintf(stderr, "atoll: making a CA and certificates in %s\n", tls_dir.c_str());
  atl::LocalClusterOptions o;
  o.atoll = "/proc/self/exe";
  o.learners = topology->learners.size();
  o.topology_file = file;
  o.sets = sets;
  o.report_path = report_path;
  o.seconds = seconds;
  o.data = data;
  o.quiet = quiet;
  o.verbose = verbose;
  o.tls_dir = tls_dir;
  o.link = link;
  o.metrics = metrics;
  o.token_file = output("cluster-token");
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  int signals = 0;
  auto cluster = atl::LocalCluster::start(o, [&] { return interrupted.load(); });
  if (!cluster.ok()) {
    if (interrupted) return 130;
    return fail(cluster.status());
  }
  if (!metrics.empty()) std::fprintf(stderr, "atoll: the status page's token is in %s\n", o.token_file.c_str());
  // The first signal asks the syncer to end the run in order; the second kills every process.
  const int status = (*cluster)->wait([&] {
    if (!interrupted.exchange(false)) return;
    if (++signals == 1) {
      std::fprintf(stderr, "atoll: interrupted: stopping the run (again to kill every process)\n");
      (*cluster)->stop();
    } else {
      std::fprintf(stderr, "atoll: interrupted again: killing every process\n");
      (*cluster)->kill();
    }
  });
  if (const int failed = (*cluster)->learners_failed())
    std::fprintf(stderr, "atoll: %d learner process(es) did not end cleanly\n", failed);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "atoll: fault-tolerant, low-bandwidth training with Decoupled DiLoCo.\n"
      "Learners train their own replicas and hand parameter fragments to a syncer;\n"
      "no learner waits for another. README.md explains the concepts and every file."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Print help for every subcommand");

  std::string file, report_path = output("report.json"), data, faults, tape = output("tape.jsonl");
  std::vector<std::string> sets;
  double seconds = 0;
  int threads = 0;
  bool quiet = false, verbose = false;

  auto* run = app.add_subcommand(
      "run", "Train: the topology in FILE, or the built-in default (a byte-level transformer on the State of the Union)");
  run->add_option("file", file, "Topology file (TOML); see examples/topologies/ and `atoll topology`");
  run->add_option("--set", sets, "Override one key, e.g. --set outer.quorum=2 --set mode=dp (repeatable)");
  run->add_option("--report", report_path, "Where to write the JSON report (empty: none)")->capture_default_str();
  run->add_option("--seconds", seconds, "Stop after this many seconds, whatever the token budget")->check(kPositiveSeconds);
  run->add_option("--data", data, "Data folder from scripts/setup (default: $ATOLL_DATA_DIR or ./data)");
  run->add_option("--threads", threads, "Compute threads for the learners (default: one per core)")->check(kThreads);
  run->add_flag("-q,--quiet", quiet, "No progress line, only the summary");
  run->add_flag("-v,--verbose", verbose, "Log every registration, restart and refusal");
  run->add_option("--faults", faults, "Inject the faults of this plan (TOML; see examples/chaos/) and check its invariants");
  run->add_option("--tape", tape, "With --faults: where to write the event tape (JSON lines)")->capture_default_str();
  bool processes = false;
  std::string tls_dir, run_link;
  MetricsFlags run_metrics;
  run->add_option("--metrics", run_metrics.listen,
                  "Serve a live status page at / and Prometheus metrics at /metrics on HOST:PORT, e.g. 127.0.0.1:9464");
  run->add_flag("--allow-control", run_metrics.allow_control,
                "With --faults and --metrics: the status page may kill or stall learners");
  run->add_flag("--processes", processes,
                "Run the syncer and each learner as separate local processes (over loopback, with a fresh token)");
  run->add_option("--tls-dir", tls_dir,
                  "With --processes: over TLS 1.3, with the certificates in this folder (made there if missing)");
  run->add_option("--link", run_link,
                  "With --processes: every process emulates this wide-area link, e.g. rate=100mbit,delay=20ms");
  run->footer(
      "\nExamples:\n"
      "  atoll run                                     the default: transformer on State of the Union text (~3 min)\n"
      "  atoll run examples/topologies/mnist.toml      an MLP on MNIST (about 30 s)\n"
      "  atoll run --set mode=dp                       the data-parallel baseline, all else equal\n"
      "  atoll run --set outer.sync_every=50 --seconds 10\n"
      "  atoll run examples/topologies/synthetic.toml  needs no data files\n"
      "  atoll run examples/torch/gpt.toml             a PyTorch GPT as TorchScript (python3 examples/torch/gpt.py first)\n"
      "  atoll run --processes                         syncer and learners as separate local processes\n"
      "  atoll run --processes --tls-dir certs         the same over TLS 1.3 with mutual certificates\n"
      "  atoll run --metrics 127.0.0.1:9464            watch it at http://127.0.0.1:9464/ (Prometheus: /metrics)\n"
      "  atoll topology > mine.toml                    start a topology file from the defaults\n"
      "\nThe report (JSON) has mode, tokens, tokens_per_second, goodput, uptime, eval.loss,\n"
      "eval.accuracy, bytes.*, bytes_per_token, rounds, quorum_mean, grace_wait_mean_ms,\n"
      "stale_refused, rejected, restarts, versions_min/max and per-learner figures. Beside it go the\n"
      "run's time series (REPORT.series.csv, REPORT.events.csv) and plots (REPORT.loss.svg,\n"
      "REPORT.learners.svg, REPORT.goodput.svg); `atoll plot REPORT.json` draws them again.\n"
      "Exit status: 0 done; 1 the run failed or gave up on an actor; 2 bad topology or arguments.");

  std::string vfile;
  std::vector<std::string> vsets;
  std::string vdata;
  auto* val = app.add_subcommand("validate",
                                 "Check a topology file: keys, types, ranges, the fragment plan and the data it reads");
  val->add_option("file", vfile, "Topology file (TOML)")->required();
  val->add_option("--set", vsets, "Override one key before checking (repeatable)");
  val->add_option("--data", vdata, "Data folder from scripts/setup (default: $ATOLL_DATA_DIR or ./data)");

  std::string tfile;
  std::vector<std::string> tsets;
  auto* top = app.add_subcommand("topology", "Print the effective topology (defaults + FILE + --set) as TOML");
  top->add_option("file", tfile, "Topology file (TOML); none: the built-in default");
  top->add_option("--set", tsets, "Override one key (repeatable)");

  std::vector<std::string> chaos_paths;
  std::string chaos_report = output("chaos.json"), chaos_tapes = output("tapes"), chaos_data;
  auto* chaos = app.add_subcommand("chaos", "Run fault plans (a folder of them: a chaos suite) and check their invariants");
  chaos->add_option("plans", chaos_paths, "Fault plans (TOML) or folders of them")->required();
  chaos->add_option("--report", chaos_report, "Where to write the JSON report (empty: none)")->capture_default_str();
  chaos->add_option("--tapes", chaos_tapes, "Folder for the event tapes (JSON lines), one per plan and mode")
      ->capture_default_str();
  chaos->add_option("--data", chaos_data, "Data folder from scripts/setup (default: $ATOLL_DATA_DIR or ./data)");
  chaos->add_option("--threads", threads, "Compute threads for the learners (default: one per core)")->check(kThreads);
  chaos->footer(
      "\nEach plan names a topology, faults (timed, step-triggered, random) and invariants; see\n"
      "examples/chaos/. The table shows plan, mode, goodput, uptime, held-out loss (and that of\n"
      "the same run without faults when the plan bounds it), faults injected, learners\n"
      "recovered, verdict. Exit status: 0 all invariants hold; 1 some broke; 2 a bad plan.");

  ClusterFlags cluster;
  std::string sfile, sreport = output("report.json"), sdata;
  std::vector<std::string> ssets;
  double sseconds = 0;
  bool squiet = false;
  auto* syncer = app.add_subcommand("syncer", "Hold the syncer of a run whose learners join from other processes");
  syncer->add_option("file", sfile, "Topology file (TOML); none: the built-in default");
  syncer->add_option("--set", ssets, "Override one key (repeatable)");
  MetricsFlags syncer_metrics;
  syncer->add_option("--metrics", syncer_metrics.listen,
                     "Serve a live status page at / and Prometheus metrics at /metrics on HOST:PORT; their data "
                     "wants the cluster token (Authorization: Bearer TOKEN)");
  syncer->add_option("--listen", cluster.listen, "HOST:PORT to serve learners on (port 0: any free one)")
      ->capture_default_str();
  syncer->add_option("--token-file", cluster.token_file, "File holding the cluster token (default: $ATOLL_TOKEN)");
  syncer->add_option("--run-name", cluster.run_name,
                     "Checkpoint folder name inside checkpoint.dir; the same name again resumes from its checkpoints "
                     "(default: a fresh run-<date>-<pid>)");
  syncer->add_option("--port-file", cluster.port_file, "Write the port served on to this file once listening");
  syncer->add_option("--save-model", cluster.save_model,
                     "At the end, write the global model here as a model file (atoll.load_model() reads it)");
  syncer->add_option("--timeout", cluster.timeout, "Seconds of silence (no heartbeat) before a learner counts as failed")
      ->capture_default_str()
      ->check(kPositiveSeconds);
  syncer->add_option("--tls-cert", cluster.tls_cert,
                     "TLS 1.3: this process's certificate (PEM; `atoll certs` makes one); with --tls-key and --tls-ca. "
                     "Then every learner must show a certificate of the same CA");
  syncer->add_option("--tls-key", cluster.tls_key, "TLS: this process's private key (PEM, mode 600)");
  syncer->add_option("--tls-ca", cluster.tls_ca, "TLS: the CA that signed every learner's certificate (PEM)");
  syncer->add_option("--tls-name", cluster.tls_name, "TLS: the common name learner certificates must carry")
      ->default_str(atl::kLearnerName);
  syncer->add_option("--link", cluster.link,
                     "Emulate a wide-area link on what this process sends, e.g. rate=100mbit,delay=20ms,jitter=1ms,loss=0.001");
  syncer->add_option("--report", sreport, "Where to write the JSON report (empty: none)")->capture_default_str();
  syncer->add_option("--seconds", sseconds, "Stop after this many seconds, whatever the token budget")
      ->check(kPositiveSeconds);
  syncer->add_option("--data", sdata, "Data folder (held-out evaluation; default: $ATOLL_DATA_DIR or ./data)");
  syncer->add_flag("-q,--quiet", squiet, "No progress line, only the summary");
  syncer->add_flag("-v,--verbose", verbose, "Log every registration, restart and refusal");
  syncer->footer(
      "\nLearners join with `atoll learner --join HOST:PORT --id N`, proving the same cluster token\n"
      "(at least 16 bytes, from --token-file or $ATOLL_TOKEN; never printed). Joins with a wrong\n"
      "token, an unknown or duplicate id or another model are refused, logged and counted.\n"
      "Example:\n"
      "  head -c 32 /dev/urandom | base64 > token && chmod 600 token\n"
      "  atoll syncer examples/topologies/default.toml --listen 0.0.0.0:7070 --token-file token --run-name exp1\n"
      "Without --tls-* the traffic is plain TCP, readable and alterable on the path (a warning says so):\n"
      "  atoll certs certs && atoll syncer --listen 0.0.0.0:7070 --token-file token \\\n"
      "    --tls-cert certs/syncer.pem --tls-key certs/syncer.key --tls-ca certs/ca.pem\n"
      "Python learners (atoll.Learner) join the same way, for a TorchScript model of their layout, or\n"
      "for a model atoll does not run: model.kind = \"external\", model.path = a file atoll.save_model()\n"
      "wrote (examples/python/train_gpt.py). Their evaluators' held-out figures reach the report.\n"
      "See README.md, \"Across machines\" and \"Your own training loop (Python)\".");

  std::string ldata, lreport;
  auto* learner = app.add_subcommand("learner", "Run one learner in this process, joining a syncer over the network");
  learner->add_option("--join", cluster.join, "HOST:PORT of the syncer")->required();
  learner->add_option("--id", cluster.id, "Learner id, from 0 to the topology's learners - 1")->required();
  learner->add_option("--token-file", cluster.token_file, "File holding the cluster token (default: $ATOLL_TOKEN)");
  learner->add_option("--give-up", cluster.give_up, "Seconds without a syncer before giving up")
      ->capture_default_str()
      ->check(kPositiveSeconds);
  learner->add_option("--timeout", cluster.timeout, "Seconds of silence (no heartbeat) before the syncer counts as lost")
      ->capture_default_str()
      ->check(kPositiveSeconds);
  learner->add_option("--tls-cert", cluster.tls_cert,
                      "TLS 1.3: this process's certificate (PEM; learner.pem of `atoll certs`); with --tls-key and --tls-ca");
  learner->add_option("--tls-key", cluster.tls_key, "TLS: this process's private key (PEM, mode 600)");
  learner->add_option("--tls-ca", cluster.tls_ca, "TLS: the CA that signed the syncer's certificate (PEM)");
  learner->add_option("--tls-name", cluster.tls_name,
                      "TLS: the name the syncer's certificate must carry (default: the host of --join)");
  learner->add_option("--link", cluster.link,
                      "Emulate a wide-area link on what this process sends, e.g. rate=100mbit,delay=20ms");
  learner->add_option("--data", ldata, "Data folder (default: $ATOLL_DATA_DIR or ./data)");
  learner->add_option("--threads", threads, "Compute threads (default: one per core)")->check(kThreads);
  learner->add_option("--report", lreport, "Where to write this process's JSON report (empty: none)");
  learner->add_flag("-v,--verbose", verbose, "Log every connection, registration and refusal");
  learner->footer(
      "\nThe topology comes from the syncer. The learner trains on without the syncer, reconnects\n"
      "with backoff and pushes again; it exits 0 when the syncer says the run is over, 1 when refused\n"
      "(wrong token, unknown id) or when no syncer answered for --give-up seconds.");

  atl::CertificateRequest cert_request;
  auto* certs = app.add_subcommand("certs", "Make a CA and certificates for a cluster's TLS (a test cluster; keep ca.key safe)");
  certs->add_option("dir", cert_request.dir, "Folder for ca.pem/.key, syncer.pem/.key, learner.pem/.key")->required();
  certs->add_option("--syncer-name", cert_request.syncer_names,
                    "A DNS name or IP address of the syncer's host, beside localhost (repeatable)");
  certs->add_option("--days", cert_request.days, "Validity of the syncer and learner certificates")
      ->capture_default_str()
      ->check(CLI::Range(1, 3650));
  certs->add_flag("--force", cert_request.force, "Replace existing syncer and learner files (the CA is reused)");
  certs->footer(
      "\nECDSA P-256 keys (mode 600), SHA-256 signatures. An existing ca.pem and ca.key are reused, so\n"
      "running it again with another --syncer-name issues new certificates of the same cluster.\n"
      "The syncer's certificate names localhost, 127.0.0.1, ::1 and every --syncer-name: learners check\n"
      "the host they join (or --tls-name) against it. Learner certificates are named atoll-learner.\n"
      "Example:\n"
      "  atoll certs certs --syncer-name syncer.example.org\n"
      "  atoll syncer --listen 0.0.0.0:7070 --token-file token --tls-cert certs/syncer.pem \\\n"
      "    --tls-key certs/syncer.key --tls-ca certs/ca.pem\n"
      "  atoll learner --join syncer.example.org:7070 --id 0 --token-file token \\\n"
      "    --tls-cert certs/learner.pem --tls-key certs/learner.key --tls-ca certs/ca.pem");

  atl::cli::BandwidthArgs bw;
  auto* bandwidth = app.add_subcommand(
      "bandwidth", "The link bandwidth each mode needs to keep its compute busy (a model; README, \"Over a slow link\")");
  bandwidth->add_option("file", bw.file, "Topology file (TOML); none: the built-in default");
  bandwidth->add_option("--set", bw.sets, "Override one key (repeatable)");
  bandwidth->add_option("--step-seconds", bw.step_seconds, "Compute time of one inner step of one learner")
      ->capture_default_str()
      ->check(kPositiveSeconds);
  bandwidth->add_option("--rtt-ms", bw.rtt_ms, "Round trip between a learner and the syncer")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  bandwidth->add_option("--target", bw.target, "Share of compute to keep busy")->capture_default_str()->check(CLI::Range(0.01, 0.999));
  bandwidth->add_option("--parameters", bw.parameters, "Model size, instead of the topology model's (e.g. 1e10)")
      ->check(CLI::Range(1.0, 1e15));
  bandwidth->add_option("--link-mbit", bw.links_mbit, "Also print each mode's utilization at these bandwidths (repeatable)")
      ->check(CLI::Range(1e-3, 1e9));
  bandwidth->footer(
      "\nPer learner link: dp sends its fp32 gradient and waits for fp32 parameters every step (transfer and\n"
      "round trip on the critical path); decoupled pushes and receives each fragment once per H steps while\n"
      "it trains on. The syncer's side carries the learners' links together. Formulas: atoll/bandwidth_model.h.\n"
      "Examples:\n"
      "  atoll bandwidth --step-seconds 0.23 --rtt-ms 40 --link-mbit 100 --link-mbit 1000\n"
      "  atoll bandwidth --parameters 1e10 --step-seconds 2 --rtt-ms 100 --set outer.sync_every=100");

  atl::cli::SweepArgs sweep_args;
  auto* sweep = app.add_subcommand(
      "sweep", "Run a topology over a grid of settings and several seeds; print a table, best first");
  sweep->add_option("file", sweep_args.file, "Topology file (TOML); none: the built-in default");
  sweep->add_option("--grid", sweep_args.grids,
                    "One axis: key=value1,value2,... (repeatable; every combination of the axes runs)");
  sweep->add_option("--set", sweep_args.sets, "Override one key in every run (repeatable)");
  sweep->add_option("--seeds", sweep_args.seeds, "Runs per combination, with seed = 1..N")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  sweep->add_option("--out", sweep_args.out,
                    "Folder for every run's record (TOML) and report (JSON), and sweep.json")
      ->capture_default_str();
  sweep->add_option("--curve", sweep_args.curve,
                    "Evaluate the global model at this many points of each run (quality against time and tokens)")
      ->check(CLI::Range(0, 100));
  sweep->add_option("--data", sweep_args.data, "Data folder from scripts/setup (default: $ATOLL_DATA_DIR or ./data)");
  sweep->add_option("--threads", sweep_args.threads, "Compute threads for the learners (default: one per core)")
      ->check(kThreads);
  sweep->footer(
      "\nRuns are sequential and use the whole machine, one at a time; each prints a line when it\n"
      "starts (which of how many, elapsed, remaining) and when it ends. A finished run leaves its\n"
      "record in --out; the same command again skips what is recorded, so an interrupted sweep\n"
      "(Ctrl-C) resumes where it stopped. The table ranks combinations by mean held-out loss:\n"
      "bits per byte (language models) or accuracy, mean +- standard deviation over seeds.\n"
      "Examples:\n"
      "  atoll sweep --grid outer.lr=0.5,0.7,1.0 --grid outer.momentum=0.8,0.9 --seeds 3\n"
      "  atoll sweep examples/topologies/mnist.toml --grid inner.lr=1e-3,3e-3 --set tokens=600000\n"
      "Exit status: 0 every run finished; 1 a run failed or the sweep was interrupted; 2 bad arguments.");

  atl::cli::SimulateArgs simulate_args;
  auto* simulate = app.add_subcommand(
      "simulate", "Goodput at cluster scale: a simulation in virtual time, its rounds run by the real syncer");
  simulate->add_option("plan", simulate_args.plan, "Simulation plan (TOML); see examples/simulate/")->required();
  simulate->add_option("--set", simulate_args.sets,
                       "Override a plan key, e.g. --set failures.mtbi_chip_years=0.5 --set 'grid.modes=[\"dp\"]'");
  simulate->add_option("--report", simulate_args.report, "Where to write the JSON report (empty: none)")
      ->capture_default_str();
  simulate->add_option("--plot", simulate_args.plot, "Where to draw the planning view (SVG; empty: none)")
      ->capture_default_str();
  simulate->footer(
      "N chips fail as Poisson processes (MTBI per chip), slices recover after random delays, and dp, elastic dp\n"
      "or M decoupled learners train on; every decoupled round is decided by the real SyncerCore in virtual time.\n"
      "Prints goodput beside the plan's references (the paper's Table 1 in the example), the rule of thumb\n"
      "(M learners at N chips vs elastic dp at N/M) and the planning view (goodput and uptime against M and K).\n"
      "Examples:\n"
      "  atoll simulate examples/simulate/paper_table1.toml\n"
      "  atoll simulate examples/simulate/planning.toml --set planning.chips=100000 --set failures.mtbi_chip_years=3\n"
      "Exit status: 0 done; 1 an output could not be written; 2 a bad plan or arguments.");

  std::string plot_report;
  auto* plot = app.add_subcommand("plot", "Draw the plots of a run (or a chaos suite) again from the series beside its report");
  plot->add_option("report", plot_report, "The JSON report of `atoll run` or `atoll chaos`")->required();
  plot->footer(
      "\nReads REPORT.series.csv and REPORT.events.csv (a chaos suite: REPORT.<plan>-<mode>.series.csv)\n"
      "and writes the SVG plots beside them: loss against tokens and time, steps per learner with the\n"
      "faults marked, goodput and alive share over time, and each plan's modes side by side.\n"
      "Example:\n"
      "  atoll run --report atoll-out/r.json && atoll plot atoll-out/r.json");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the help, or the error with its option
    return rc == 0 ? 0 : 2;      // a bad argument exits 2, as the help says
  }
  atl::set_log_level(verbose ? atl::LogLevel::kInfo : atl::LogLevel::kWarn);

  if (*run && run_metrics.allow_control && (faults.empty() || run_metrics.listen.empty()))
    return fail(atl::Status::invalid_argument(
        "--allow-control needs --faults (a chaos run) and --metrics (the page that controls it)"));
  if (*run && processes && !faults.empty())
    return fail(atl::Status::invalid_argument("--faults needs the whole run in one process; drop --processes"));
  if (*run && !processes && (!tls_dir.empty() || !run_link.empty()))
    return fail(atl::Status::invalid_argument("--tls-dir and --link are for --processes"));
  if (*run && processes)
    return processes_command(file, sets, report_path, seconds, data, quiet, verbose, tls_dir, run_link,
                             run_metrics.listen);
  if (*certs) {
    auto made = atl::make_certificates(cert_request);
    if (!made.ok()) return fail(made.status());
    std::printf("%s: %s\n  syncer:  %s %s (localhost, 127.0.0.1, ::1%s)\n  learner: %s %s (%s)\n",
                cert_request.dir.c_str(), made->ca_reused ? "reused the CA in ca.pem" : "made a CA (ca.pem, ca.key: keep ca.key safe)",
                made->syncer_certificate.c_str(), made->syncer_key.c_str(),
                [&] { std::string n; for (const auto& x : cert_request.syncer_names) n += ", " + x; return n; }().c_str(),
                made->learner_certificate.c_str(), made->learner_key.c_str(), atl::kLearnerName);
    return 0;
  }
  if (*run) return run_command(file, sets, report_path, seconds, data, threads, quiet, faults, tape, run_metrics);
  if (*syncer) return syncer_command(sfile, ssets, cluster, sreport, sseconds, sdata, squiet, syncer_metrics);
  if (*plot) return atl::cli::plot_command(plot_report);
  if (*learner) return learner_command(cluster, lreport, ldata, threads);
  if (*sweep) return atl::cli::sweep_command(sweep_args);
  if (*bandwidth) return atl::cli::bandwidth_command(bw);
  if (*simulate) return atl::cli::simulate_command(simulate_args);
  if (*chaos) return chaos_command(chaos_paths, chaos_report, chaos_tapes, chaos_data, threads);
  if (*val) {
    auto t = atl::load_topology(vfile, vsets);
    if (!t.ok()) return fail(t.status());
    auto plan = describe_plan(*t);
    if (!plan.ok()) return fail(plan.status().with_context(vfile));
    auto job = atl::Job::load(*t, vdata.empty() ? atl::default_data_root() : vdata);  // reads and checks it all
    if (!job.ok()) return fail(job.status().with_context(vfile + ": data"));
    std::printf("%s: ok: %s, %zu learners, %s; data: %s\n", vfile.c_str(), atl::mode_name(t->mode),
                t->learners.size(), plan->c_str(), (*job)->description().c_str());
    return 0;
  }
  if (*top) {
    auto t = atl::load_topology(tfile, tsets);
    if (!t.ok()) return fail(t.status());
    std::fputs(atl::to_toml(*t).c_str(), stdout);
    return 0;
  }
  return 0;
}
