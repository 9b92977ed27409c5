// `atoll syncer`: the syncer of a run whose learners join from other processes.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>

#include "atoll/cluster.h"
#include "atoll/log.h"
#include "atoll/topology_file.h"
#include "cluster_flags.h"
#include "command.h"
#include "drive.h"

namespace atl::cli {
namespace {

struct SyncerArgs {
  std::string file, report = output("report.json"), data;
  std::vector<std::string> sets;
  std::string listen = "127.0.0.1:7070", port_file, run_name, save_model, shard;
  std::string on_signal = "end";
  double seconds = 0;
  bool quiet = false;
  ClusterFlags cluster;
  MetricsFlags metrics;
};

// Written whole under another name, then renamed: readers never see half a number.
void write_port_file(const std::string& path, uint16_t port) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << port << "\n";
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) log_error("cannot write the port file " + path + ": " + ec.message());
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
  RunOptions options;
  options.data_root = a.data;
  options.seconds = a.seconds;
  options.run_name = a.run_name;
  options.save_model = a.save_model;
  options.cluster.listen = a.listen;
  options.cluster.shard = shard;
  if (Status s = apply_cluster_flags(a.cluster, options.cluster); !s.ok()) return fail(s);
  // pause: leave the run to the learners and a later syncer, as a crash would,
  // on purpose: an engine is moving this process (a drained Kubernetes node).
  std::function<void(Run&)> on_signal;
  if (a.on_signal == "pause")
    on_signal = [](Run&) {
      log_warn("signal: pausing the run: exiting " + std::to_string(kExitLost) +
               " without telling the learners; a syncer started with the same --run-name resumes it");
      std::fflush(nullptr);
      std::_Exit(kExitLost);
    };
  return drive(*topology, options, a.report, a.quiet, a.metrics, [&](Run& run) {
    if (!a.quiet) {
      const auto at = parse_endpoint(a.listen);
      const size_t open = learner_slots(*topology) - topology->learners.size();
      const std::string which =
          topology->syncer.shards > 1
              ? " shard " + std::to_string(shard) + " of " + std::to_string(topology->syncer.shards)
              : "";
      std::printf("atoll syncer%s: serving learners on %s:%u (%zu learners expected%s)\n", which.c_str(),
                  at->host.c_str(), run.port(), topology->learners.size(),
                  open ? (", " + std::to_string(open) + " open slots for learners without an id").c_str() : "");
      std::fflush(stdout);
    }
    if (!a.port_file.empty()) write_port_file(a.port_file, run.port());
  }, std::move(on_signal));
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
  syncer->add_option("--port-file", a->port_file, "Write the port served on to this file once listening");
  syncer->add_option("--shard", a->shard,
                     "Hold shard i of a syncer in S processes (i/S, e.g. 0/2): the fragments p with p % S == i, "
                     "its own checkpoint folder <run-name>/shard-i; learners join every shard");
  syncer->add_option("--save-model", a->save_model,
                     "At the end, write the global model here as a model file (atoll.load_model() reads it)");
  syncer->add_option("--on-signal", a->on_signal,
                     "What SIGTERM or Ctrl-C does. end: the run ends, learners are told and exit 0. pause: this "
                     "process exits 75 at once and the run goes on without it, as after a crash: learners train "
                     "on and reconnect, and a syncer started with the same --run-name restores the checkpoint and "
                     "takes newer versions from their bases (for an engine that moves the syncer)")
      ->check(CLI::IsMember({"end", "pause"}))
      ->capture_default_str();
  add_cluster_flags(syncer, a->cluster, "learner");
  add_report_option(syncer, a->report);
  add_seconds_option(syncer, a->seconds);
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
      "A syncer in S processes (--shard i/S): each shard merges, checkpoints and broadcasts its share of the\n"
      "fragments; learners join all of them (--join HOST:PORT0,HOST:PORT1) and push each fragment to its\n"
      "owner. A shard that dies pauses only its fragments; restarted with the same --run-name, it restores.\n"
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
