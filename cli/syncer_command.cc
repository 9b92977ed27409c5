// `atoll syncer`: the syncer of a run whose learners join from other processes.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>

#include "atoll/cluster.h"
#include "atoll/evaluation.h"
#include "atoll/file.h"
#include "atoll/fragments.h"
#include "atoll/job.h"
#include "atoll/log.h"
#include "atoll/topology_file.h"
#include "cluster_flags.h"
#include "command.h"
#include "drive.h"
#include "signal_stop.h"

namespace atl::cli {
namespace {

// A pausing syncer's last checkpoint may take this long: within the 30 s an
// engine (Kubernetes' default grace period) waits after SIGTERM.
constexpr double kPauseCheckpointSeconds = 20.0;

struct SyncerArgs {
  std::string file, report = output("report.json"), data;
  std::vector<std::string> sets;
  std::string listen = "127.0.0.1:7070", port_file, run_name, save_model, shard;
  std::string on_signal = "end", after_run = "exit";
  std::string sample_prompt = EvaluationOptions{}.sample_prompt;
  double seconds = 0;
  int curve = 0;
  bool quiet = false;
  ClusterFlags cluster;
  MetricsFlags metrics;
};

// Written whole under another name, then renamed: readers never see half a
// number. A syncer that holds every shard of several writes each shard's port,
// comma-separated, shard 0 first.
void write_port_file(const std::string& path, const std::vector<uint16_t>& ports) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    for (size_t i = 0; i < ports.size(); ++i) out << (i ? "," : "") << ports[i];
    out << "\n";
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) log_error("cannot write the port file " + path + ": " + ec.message());
}

// The note that the run is over, beside its checkpoints: a syncer started again
// with the same run name (an engine that always restarts it) finds it there.
std::string over_note(const Topology& t, const SyncerArgs& a, uint32_t shard) {
  return checkpoint_folder(t, a.run_name, shard) + "/RUN-OVER";
}

// Written once the run is over (synced, atomic): "the run is over (<when>)".
void write_over_note(const std::string& path) {
  const std::time_t now = std::time(nullptr);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  const std::string text = "the run is over (" + std::string(when) + ")\n";
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  if (Status s = write_file_atomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}); !s.ok())
    log_error("cannot note the end of the run: " + s.to_string());
}

// --after-run wait: the run is over; stay up until SIGTERM or Ctrl-C, answering
// every learner that the run is over (it exits 0) and the probes alive, not ready.
// `ports`: the ones the run served on, a shard's each (empty: --listen's, and
// for `shards` in this process the ports after it, as the run takes them).
int idle(const SyncerArgs& a, const RunOptions& options, RunStatus* status, const std::string& note,
         std::vector<uint16_t> ports, int shards) {
  auto at = parse_endpoint(a.listen);
  if (!at.ok()) return fail(at.status());
  if (ports.empty())
    for (int k = 0; k < shards; ++k) ports.push_back(at->port == 0 ? 0 : static_cast<uint16_t>(at->port + k));
  auto text = read_text(note, 4096);
  std::string why = text.ok() ? std::string(*text) : "the run is over";
  while (!why.empty() && why.back() == '\n') why.pop_back();
  catch_interrupts();
  std::vector<std::unique_ptr<OverDoor>> doors;
  std::vector<uint16_t> served;
  for (uint16_t port : ports) {
    Endpoint e = *at;
    e.port = port;  // --listen HOST:0 took a free port: learners know that one
    // The port the run served is free again now, but maybe not for a moment yet.
    Result<std::unique_ptr<OverDoor>> door = Status::unavailable("not listening");
    for (int attempt = 0; attempt < 50 && !interrupt_pending(); ++attempt) {
      door = serve_run_over(e, options.cluster, why);
      if (door.ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!door.ok()) return fail(door.status().with_context("--after-run wait"));
    served.push_back((*door)->port());
    doors.push_back(std::move(*door));
  }
  if (status) status->watch(nullptr);  // probes: alive, the run is over, not ready
  std::string where;
  for (uint16_t port : served) where += (where.empty() ? "" : ",") + at->host + ":" + std::to_string(port);
  log_info("the run " + a.run_name + " is over (" + note + "): idle on " + where +
           ", telling learners so, until SIGTERM or Ctrl-C");
  if (!a.port_file.empty()) write_port_file(a.port_file, served);
  while (!take_interrupt()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  uint64_t told = 0;
  for (const auto& door : doors) told += door->told();
  log_info("idle syncer: stopped by a signal after telling " + std::to_string(told) +
           " learner connection(s) that the run is over");
  return kExitDone;
}

// "i/S": shard i of S, which the topology's syncer.shards must be (or become, from 1).
Status apply_shard(const std::string& text, Topology& t, uint32_t& shard) {
  const auto bad = [&](const std::string& why) {
    return Status::invalid_argument("--shard " + text + ": " + why + " (expected i/S, e.g. --shard 0/2)");
  };
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return bad("no '/'");
  int i = -1, s = -1;
  try {
    size_t used = 0;
    i = std::stoi(text.substr(0, slash), &used);
    if (used != slash) return bad("the shard is not a number");
    s = std::stoi(text.substr(slash + 1), &used);
    if (used != text.size() - slash - 1) return bad("the count is not a number");
  } catch (const std::exception&) {
    return bad("not two numbers");
  }
  if (s < 1 || i < 0 || i >= s) return bad("i counts from 0 to S - 1");
  if (t.syncer.shards != 1 && t.syncer.shards != s)
    return bad("the topology says syncer.shards = " + std::to_string(t.syncer.shards));
  t.syncer.shards = s;
  shard = static_cast<uint32_t>(i);
  return validate(t);
}

int syncer_command(const SyncerArgs& a) {
  auto topology = load_topology(a.file, a.sets);
  if (!topology.ok()) return fail(topology.status());
  uint32_t shard = 0;
  if (!a.shard.empty())
    if (Status s = apply_shard(a.shard, *topology, shard); !s.ok()) return fail(s);
  if (shard != 0 && a.seconds > 0)
    return fail(Status::invalid_argument(
        "--seconds with --shard " + a.shard + ": the run's end is shard 0's (it judges the token budget and the "
        "time; the learners pass its end on to the other shards): give --seconds to shard 0's process"));
  if (!a.shard.empty() && a.curve > 0 && topology->checkpoint.dir.empty())
    return fail(Status::invalid_argument(
        "--curve with --shard " + a.shard + " needs checkpoint.dir: a shard's process never holds the whole model, so "
        "each point is written beside its checkpoints, where `atoll assemble` evaluates it"));
  if (!a.shard.empty() && a.curve > 0 && topology->tokens == 0 && topology->seconds <= 0)
    return fail(Status::invalid_argument(
        "--curve with --shard " + a.shard + " needs the topology's token budget or seconds: every shard plans the "
        "curve's points over them (--seconds is shard 0's alone)"));
  const bool whole = a.shard.empty() && topology->syncer.shards > 1;  // every shard, in this process
  RunOptions options;
  options.data_root = a.data;
  options.seconds = a.seconds;
  options.run_name = a.run_name;
  options.save_model = a.save_model;
  options.evaluation.sample_prompt = a.sample_prompt;
  options.curve_points = a.curve;
  options.cluster.listen = a.listen;
  if (!a.shard.empty()) options.cluster.shard = shard;
  if (Status s = apply_cluster_flags(a.cluster, options.cluster); !s.ok()) return fail(s);
  const bool wait_after = a.after_run == "wait";
  if (wait_after && (a.run_name.empty() || topology->checkpoint.dir.empty()))
    return fail(Status::invalid_argument(
        "--after-run wait needs --run-name and checkpoint.dir: the end of the run is noted beside its checkpoints, "
        "where the syncer started again with that name finds it"));
  const std::string note = wait_after ? over_note(*topology, a, shard) : "";
  auto status = RunStatus::start(a.metrics, options.cluster.token);
  if (!status.ok()) return fail(status.status());
  if (wait_after && std::filesystem::exists(note)) {
    log_warn("the run " + a.run_name + " is over (" + note + "): not starting it again; remove that file to train on");
    return idle(a, options, status->get(), note, {}, whole ? topology->syncer.shards : 1);
  }
  // pause: leave the run to the learners and a later syncer, as a crash would,
  // on purpose: an engine is moving this process (a drained Kubernetes node).
  // Its last checkpoint first, so that the syncer started again loses nothing.
  std::atomic<bool> signalled{false};
  std::function<void(Run&)> on_signal = [&](Run& run) {
    signalled = true;
    run.stop();
  };
  if (a.on_signal == "pause")
    on_signal = [](Run& run) {
      log_warn("signal: pausing the run: a last checkpoint, then exiting " + std::to_string(kExitLost) +
               " without telling the learners; a syncer started with the same --run-name resumes it");
      if (Status s = run.checkpoint_now(kPauseCheckpointSeconds); s.ok())
        log_warn("paused: the last checkpoint is written");
      else
        log_warn("paused without a last checkpoint (" + s.to_string() + "): the next syncer takes newer versions "
                 "from the learners' bases");
      std::fflush(nullptr);
      std::_Exit(kExitLost);
    };
  std::vector<uint16_t> served_ports;
  const int exit = drive(*topology, options, a.report, a.quiet, status->get(), [&](Run& run) {
    served_ports = run.ports();
    if (!a.quiet) {
      const auto at = parse_endpoint(a.listen);
      const size_t open = learner_slots(*topology) - topology->learners.size();
      const std::string which =
          whole ? " (" + std::to_string(topology->syncer.shards) + " shards)"
          : topology->syncer.shards > 1
              ? " shard " + std::to_string(shard) + " of " + std::to_string(topology->syncer.shards)
              : "";
      std::string where;  // every shard's address, as learners --join them
      for (uint16_t port : run.ports()) where += (where.empty() ? "" : ",") + at->host + ":" + std::to_string(port);
      std::printf("atoll syncer%s: serving learners on %s (%zu learners expected%s)\n", which.c_str(),
                  where.c_str(), topology->learners.size(),
                  open ? (", " + std::to_string(open) + " open slots for learners without an id").c_str() : "");
      // The model as the syncer merges it: a model that has embeddings sees here whether model.avg found them.
      if (auto model = make_model(*topology); model.ok())
        if (auto fragments = plan_fragments((*model)->layout(), *topology); fragments.ok())
          std::printf("atoll syncer: %s in %zu fragments; merged by %s\n", (*model)->describe().c_str(),
                      fragments->size(), describe_merge_rules((*model)->layout(), *fragments).c_str());
      std::fflush(stdout);
    }
    if (!a.port_file.empty()) write_port_file(a.port_file, run.ports());
  }, std::move(on_signal));
  if (exit != kExitDone || !wait_after) return exit;
  write_over_note(note);
  if (signalled) return exit;  // stopped by the engine: not idle, it is ending this process
  return idle(a, options, status->get(), note, served_ports, whole ? topology->syncer.shards : 1);
}

}  // namespace

void add_syncer_command(CLI::App& app, int& status) {
  auto a = std::make_shared<SyncerArgs>();
  auto* syncer = app.add_subcommand("syncer", "Hold the syncer of a run whose learners join from other processes");
  syncer->add_option("file", a->file, "Topology file (TOML); none: the built-in default");
  add_set_option(syncer, a->sets);
  add_metrics_flags(syncer, a->metrics);
  syncer->add_option("--listen", a->listen, "HOST:PORT to serve learners on (port 0: any free one)")
      ->capture_default_str();
  syncer->add_option("--run-name", a->run_name,
                     "Checkpoint folder name inside checkpoint.dir; the same name again resumes from its checkpoints "
                     "(default: a fresh run-<date>-<pid>)");
  syncer->add_option("--port-file", a->port_file,
                     "Write the port served on to this file once listening (every shard's, comma-separated, "
                     "when this process holds a syncer of several shards)");
  syncer->add_option("--shard", a->shard,
                     "Hold only shard i of a syncer in S processes (i/S, e.g. 0/2): every S-th fragment from i (i, i+S, "
                     "...), its own checkpoint folder <run-name>/shard-i; learners join every shard. Without it, a "
                     "topology with syncer.shards = S holds every shard here, shard i on --listen's port + i");
  syncer->add_option("--save-model", a->save_model,
                     "At the end, write the global model here as a model file (atoll.load_model() reads it)");
  syncer->add_option("--on-signal", a->on_signal,
                     "What SIGTERM or Ctrl-C does. end: the run ends, learners are told and exit 0. pause: this "
                     "process writes a last checkpoint (waiting up to 20 s for it) and exits 75, and the run goes "
                     "on without it, as after a crash: learners train on and reconnect, and a syncer started with "
                     "the same --run-name restores that checkpoint and takes newer versions from their bases (for "
                     "an engine that moves the syncer)")
      ->check(CLI::IsMember({"end", "pause"}))
      ->capture_default_str();
  syncer->add_option("--after-run", a->after_run,
                     "What happens once the run is over. exit: the process exits 0. wait: it notes the end beside "
                     "the checkpoints (<checkpoint.dir>/<run-name>/RUN-OVER; with shards, in shard-i/, shard-0/ for a process "
                     "holding them all) and stays up until SIGTERM, on every port the run served, telling "
                     "every learner that connects that the run is over (they exit 0), probes alive and not ready; "
                     "started again with that run name, it finds the note and waits at once (for an engine that "
                     "always restarts the syncer, a StatefulSet). Needs --run-name and checkpoint.dir")
      ->check(CLI::IsMember({"exit", "wait"}))
      ->capture_default_str();
  add_cluster_flags(syncer, a->cluster, "learner");
  add_report_option(syncer, a->report);
  add_seconds_option(syncer, a->seconds);
  add_sample_prompt_option(syncer, a->sample_prompt);
  add_curve_option(syncer, a->curve);
  add_data_option(syncer, a->data);
  add_quiet_flag(syncer, a->quiet);
  add_verbose_flag(syncer);
  syncer->footer(
      "\nOnce it listens it prints where, and how many learners it expects (not with -q; --port-file\n"
      "writes the port either way). It reads the held-out part of --data to evaluate the model.\n"
      "Learners join with `atoll learner --join HOST:PORT --id N`, proving the same cluster token\n"
      "(at least 16 bytes, from --token-file or $ATOLL_TOKEN; never printed). Joins with a wrong\n"
      "token, an unknown or duplicate id or another model are refused, logged and counted.\n"
      "With membership.max_learners above the [[learners]] (--set membership.max_learners=8), learners\n"
      "may also join without --id: each gets a free open slot, or is refused as 'full'; SIGTERM on a\n"
      "learner makes it leave in order (its last progress merged; a departure, not a failure).\n"
      "A syncer in S shards (syncer.shards = S): each shard merges, checkpoints and broadcasts its share of\n"
      "the fragments; learners join all of them (--join HOST:PORT0,HOST:PORT1) and push each fragment to its\n"
      "owner. Held in one process (no --shard), the shards listen on PORT, PORT+1, ... and the run has one\n"
      "report, held-out evaluation and --save-model; in S processes (--shard i/S) each writes its own report,\n"
      "and once all have ended `atoll assemble` makes the run's one report and model from their final\n"
      "checkpoints (with --curve, from the points each writes beside them too).\n"
      "The run ends once, at every shard: shard 0 judges the token budget and --seconds, and the learners\n"
      "pass its end (or any shard's, stopped by a signal) on to the others, also to a shard restarted late.\n"
      "A shard that dies pauses only its fragments; restarted with the same --run-name, it restores.\n"
      "Example:\n"
      "  head -c 32 /dev/urandom | base64 > token && chmod 600 token\n"
      "  atoll syncer examples/topologies/default.toml --listen 0.0.0.0:7070 --token-file token --run-name exp1\n"
      "Without --tls-* the traffic is plain TCP, readable and alterable on the path (a warning says so):\n"
      "  atoll certs certs && atoll syncer --listen 0.0.0.0:7070 --token-file token \\\n"
      "    --tls-cert certs/syncer.pem --tls-key certs/syncer.key --tls-ca certs/ca.pem\n"
      "Python learners (atoll.Learner) join the same way, for a TorchScript model of their layout, or\n"
      "for a model atoll does not run: model.kind = \"external\", model.path = a file atoll.save_model()\n"
      "wrote (examples/python/train_gpt.py). Their evaluators' held-out figures reach the report.\n"
      "See docs/across-machines.md and docs/models.md.");
  syncer->callback([a, &status] { status = syncer_command(*a); });
}

}  // namespace atl::cli
