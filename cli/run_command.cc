// `atoll run`: train a topology in this process, under a fault plan
// (--faults), or as local processes (--processes).
#include <cstdio>
#include <filesystem>
#include <memory>

#include "atoll/chaos.h"
#include "atoll/cluster.h"
#include "atoll/evaluation.h"
#include "atoll/fault_plan.h"
#include "atoll/topology_file.h"
#include "command.h"
#include "drive.h"
#include "local_cluster.h"
#include "output_file.h"
#include "signal_stop.h"

namespace atl::cli {
namespace {

struct RunArgs {
  std::string file, report = output("report.json"), data, faults, tape = output("tape.jsonl");
  std::vector<std::string> sets;
  double seconds = 0;
  int threads = 0, curve = 0;
  bool quiet = false, verbose = false, processes = false;
  std::string tls_dir, link;
  std::string sample_prompt = EvaluationOptions{}.sample_prompt;
  MetricsFlags metrics;
};

// `atoll run FILE --faults PLAN`: the plan's faults on this topology, and its invariants.
int run_with_plan(const Topology& topology, const RunArgs& a) {
  auto plan = load_fault_plan(a.faults);
  if (!plan.ok()) return fail(plan.status());
  auto started = RunStatus::start(a.metrics, "");
  if (!started.ok()) return fail(started.status());
  std::unique_ptr<RunStatus> status = std::move(*started);
  if (a.seconds > 0) plan->seconds = a.seconds;
  ChaosOptions options;
  options.run.data_root = a.data;
  options.run.compute_threads = a.threads;
  options.run.evaluation.sample_prompt = a.sample_prompt;
  options.run.curve_points = a.curve;
  options.tape_dir = std::filesystem::path(a.tape).parent_path().string();
  if (options.tape_dir.empty()) options.tape_dir = ".";
  SignalStop signals;
  options.running = [&](Run* run) {
    signals.watch(run);
    if (status) status->watch(run);
  };
  options.stopping = [&] { return signals.fired(); };
  auto result = run_with_faults(topology, *plan, options);
  if (!result.ok()) return fail(result.status());
  if (!a.tape.empty() && !result->tape_path.empty() && result->tape_path != a.tape)
    std::filesystem::rename(result->tape_path, a.tape);
  std::fputs(result->report.to_table().c_str(), stdout);
  std::fputs(chaos_table({*result}).c_str(), stdout);
  std::printf("event tape: %s\n", a.tape.c_str());
  if (!a.report.empty() && !write_output(a.report, result->report.to_json(), "report")) return 1;
  if (!write_plots(a.report, result->report)) return 1;
  if (signals.fired()) return kExitInterrupted;
  return result->ok() ? 0 : 1;
}

// `atoll run FILE --processes`: the syncer and each learner as local
// processes joined over loopback with a fresh token, for convenience and
// to try the multi-process path on one machine. With --tls-dir, over TLS
// with the certificates there (made by `atoll certs` if the folder has
// none). Ctrl-C or SIGTERM here ends the run in order: the syncer stops,
// tells the learners, writes the report. A second one kills every child.
int run_processes(const Topology& topology, const RunArgs& a) {
  if (!a.link.empty())
    if (auto shape = parse_link_shape(a.link); !shape.ok()) return fail(shape.status().with_context("--link"));
  if (!a.tls_dir.empty() && !std::filesystem::exists(a.tls_dir + "/syncer.pem"))
    std::fprintf(stderr, "atoll: making a CA and certificates in %s\n", a.tls_dir.c_str());
  LocalClusterOptions o;
  o.atoll = "/proc/self/exe";
  o.learners = topology.learners.size();
  o.shards = static_cast<size_t>(topology.syncer.shards);
  o.topology_file = a.file;
  o.sets = a.sets;
  o.report_path = a.report;
  o.seconds = a.seconds;
  o.data = a.data;
  o.quiet = a.quiet;
  o.verbose = a.verbose;
  o.tls_dir = a.tls_dir;
  o.link = a.link;
  if (a.sample_prompt != EvaluationOptions{}.sample_prompt) o.sample_prompt = a.sample_prompt;
  o.curve = a.curve;
  o.metrics = a.metrics.listen;
  o.metrics_public = a.metrics.public_metrics;
  o.token_file = output("cluster-token");
  catch_interrupts();
  int signals = 0;
  auto cluster = LocalCluster::start(o, [] { return interrupt_pending(); });
  if (!cluster.ok()) return interrupt_pending() ? kExitInterrupted : fail(cluster.status());
  if (!a.metrics.listen.empty()) std::fprintf(stderr, "atoll: the status page's token is in %s\n", o.token_file.c_str());
  // The first signal asks the syncer to end the run in order; the second kills every process.
  const int status = (*cluster)->wait([&] {
    if (!take_interrupt()) return;
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

int run_command(const RunArgs& a) {
  if (a.metrics.allow_control && (a.faults.empty() || a.metrics.listen.empty()))
    return fail(Status::invalid_argument(
        "--allow-control needs --faults (a chaos run) and --metrics (the page that controls it)"));
  if (a.processes && !a.faults.empty())
    return fail(Status::invalid_argument("--faults needs the whole run in one process; drop --processes"));
  if (!a.processes && (!a.tls_dir.empty() || !a.link.empty()))
    return fail(Status::invalid_argument("--tls-dir and --link are for --processes"));
  auto topology = load_topology(a.file, a.sets);
  if (!topology.ok()) return fail(topology.status());
  if (a.processes) return run_processes(*topology, a);
  if (!a.faults.empty()) return run_with_plan(*topology, a);
  RunOptions options;
  options.data_root = a.data;
  options.seconds = a.seconds;
  options.compute_threads = a.threads;
  options.evaluation.sample_prompt = a.sample_prompt;
  options.curve_points = a.curve;
  return drive(*topology, options, a.report, a.quiet, a.metrics);
}

}  // namespace

void add_run_command(CLI::App& app, int& status) {
  auto a = std::make_shared<RunArgs>();
  auto* run = app.add_subcommand(
      "run", "Train: the topology in FILE, or the built-in default (a byte-level transformer on the State of the Union)");
  run->add_option("file", a->file, "Topology file (TOML); see examples/topologies/ and `atoll topology`");
  add_set_option(run, a->sets);
  add_report_option(run, a->report);
  add_seconds_option(run, a->seconds);
  add_data_option(run, a->data);
  add_threads_option(run, a->threads);
  add_sample_prompt_option(run, a->sample_prompt);
  add_curve_option(run, a->curve);
  add_quiet_flag(run, a->quiet);
  add_verbose_flag(run, &a->verbose);
  run->add_option("--faults", a->faults, "Inject the faults of this plan (TOML; see examples/chaos/) and check its invariants");
  run->add_option("--tape", a->tape, "With --faults: where to write the event tape (JSON lines)")->capture_default_str();
  add_metrics_flags(run, a->metrics);
  run->add_flag("--allow-control", a->metrics.allow_control,
                "With --faults and --metrics: the status page may kill or stall learners");
  run->add_flag("--processes", a->processes,
                "Run the syncer and each learner as separate local processes (over loopback, with a fresh token)");
  run->add_option("--tls-dir", a->tls_dir,
                  "With --processes: over TLS 1.3, with the certificates in this folder (made there if missing)");
  run->add_option("--link", a->link,
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
      "  atoll run --set syncer.shards=2               the syncer in 2 shards, each merging half the fragments\n"
      "  atoll run --metrics 127.0.0.1:9464            watch it at http://127.0.0.1:9464/ (Prometheus: /metrics)\n"
      "  atoll topology > mine.toml                    start a topology file from the defaults\n"
      "\nThe report (JSON) has mode, tokens, tokens_per_second, goodput, uptime, eval.loss,\n"
      "eval.accuracy, bytes.*, bytes_per_token, rounds, quorum_mean, grace_wait_mean_ms, round_mean_ms,\n"
      "broadcast_adopted_mean_ms/max_ms, stale_refused, rejected, restarts, versions_min/max and\n"
      "per-learner figures. A syncer in shards (--set syncer.shards=2, in this process or with\n"
      "--processes) adds a shards list: each shard's parameters, rounds, merges and CPU. Beside it go the\n"
      "run's time series (REPORT.series.csv, REPORT.events.csv) and plots (REPORT.loss.svg,\n"
      "REPORT.learners.svg, REPORT.goodput.svg); `atoll plot REPORT.json` draws them again.\n"
      "Exit status: 0 done; 1 the run failed or gave up on an actor; 2 bad topology or arguments.");
  run->callback([a, &status] { status = run_command(*a); });
}

}  // namespace atl::cli
