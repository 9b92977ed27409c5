// `atoll learner --join HOST:PORT [--id N]`: one learner in this process,
// trained on the topology the syncer tells it. Without --id it asks the
// syncer for a free open slot (open membership, docs/design.md section 6).
// SIGTERM (or Ctrl-C) makes it leave in order: its last progress is pushed
// and merged, then it exits 0.
#include <atomic>
#include <cstdio>
#include <memory>

#include "atoll/cluster.h"
#include "cluster_flags.h"
#include "command.h"
#include "drive.h"

namespace atl::cli {
namespace {

struct LearnerArgs {
  std::string join, report, data;
  uint32_t id = 0;
  bool has_id = false;
  double speed = 0.0;   // 0: the slot's default
  int batch = 0;        // 0: the slot's default
  double give_up = 60;
  double drain = 30;
  int leave_status = kExitDone;
  int threads = 0;
  bool quiet = false;
  ClusterFlags cluster;
  MetricsFlags metrics;
};

// A refusal (77) or no syncer (75): the run started elsewhere and this
// learner cannot join it, not a bad command line (2). A run that is over
// already (an idle syncer said so): nothing to do, done (0).
int refused(const Status& s) {
  if (s.code() == Status::Code::kOver)
    std::printf("atoll learner: nothing to train: %s\n", std::string(s.message()).c_str());
  else
    std::fprintf(stderr, "atoll: %s\n", s.to_string().c_str());
  return exit_status_of(s);
}

int learner_command(const LearnerArgs& a) {
  // A sharded syncer: one address per shard, comma-separated; the topology comes from shard 0.
  auto at = parse_endpoint(std::string_view(a.join).substr(0, a.join.find(',')));
  if (!at.ok()) return fail(at.status());
  RunOptions options;
  options.data_root = a.data;
  options.compute_threads = a.threads;
  options.cluster.join = a.join;
  options.cluster.give_up_seconds = a.give_up;
  if (Status s = apply_cluster_flags(a.cluster, options.cluster); !s.ok()) return fail(s);
  // Probes answer from now on (alive, not ready), also while the syncer is awaited.
  auto served = RunStatus::start(a.metrics, options.cluster.token);
  if (!served.ok()) return fail(served.status());
  Topology topology;
  uint32_t id = a.id;
  if (a.has_id) {
    auto fetched = fetch_topology(*at, a.id, options.cluster, a.give_up);
    if (!fetched.ok()) return refused(fetched.status());
    topology = std::move(*fetched);
  } else {
    auto claim = claim_slot(*at, options.cluster, a.give_up);
    if (!claim.ok()) return refused(claim.status());
    id = claim->learner;
    topology = std::move(claim->topology);
  }
  LearnerSpec spec = default_spec(topology, id);
  if (a.speed > 0) spec.speed = a.speed;
  if (a.batch > 0) spec.batch_size = a.batch;
  options.learner_spec = spec;
  options.cluster.learner_ids = {id};
  if (!a.quiet) {
    std::printf("atoll learner: learner %u (%s slot, speed %g, batch %d) joins the syncer at %s\n", id,
                id < topology.learners.size() ? "fixed" : "open", spec.speed, spec.batch_size, a.join.c_str());
    std::fflush(stdout);
  }
  std::atomic<bool> left{false};
  // Never a progress line: this process's view holds no syncer sample (no
  // rounds, global versions or goodput); the syncer's progress line shows the run.
  const int status = drive(topology, options, a.report, /*quiet=*/true, served->get(), {}, [&](Run& run) {
    left = true;
    run.leave("asked to stop (signal)", a.drain);
  });
  return status == kExitDone && left ? a.leave_status : status;
}

}  // namespace

void add_learner_command(CLI::App& app, int& status) {
  auto a = std::make_shared<LearnerArgs>();
  auto* learner = app.add_subcommand("learner", "Run one learner in this process, joining a syncer over the network");
  learner->add_option("--join", a->join,
                      "HOST:PORT of the syncer; of a sharded syncer, one per shard, comma-separated, shard 0 first")
      ->required();
  auto* id = learner->add_option("--id", a->id,
                                 "Learner id: one of the topology's [[learners]] (0 .. M-1), or a free open slot. "
                                 "Without it the syncer gives the lowest free open slot (membership.max_learners)");
  learner->add_option("--speed", a->speed,
                      "Its relative speed: 0.5 takes twice as long per step (default: its slot's, 1 for an open slot)")
      ->check(CLI::Range(0.01, 100.0));
  learner->add_option("--batch", a->batch,
                      "Its batch size: examples, or windows of model.context bytes, per step (default: its slot's; "
                      "an open slot: the first [[learners]]'s)")
      ->check(CLI::Range(1, 1 << 16));
  learner->add_option("--drain-seconds", a->drain,
                      "On SIGTERM or Ctrl-C: how long to wait for the syncer to merge its last progress before it "
                      "exits anyway")
      ->capture_default_str()
      ->check(kPositiveSeconds);
  learner->add_option("--leave-status", a->leave_status,
                      "Exit status after leaving in order on SIGTERM or Ctrl-C (default 0: a departure, done). "
                      "75 asks an engine that replaces failed members to start it again: a Kubernetes Job "
                      "whose node is drained")
      ->check(CLI::Range(0, 255));
  learner->add_option("--give-up", a->give_up, "Seconds without a syncer before giving up")
      ->capture_default_str()
      ->check(kPositiveSeconds);
  add_cluster_flags(learner, a->cluster, "syncer");
  add_metrics_flags(learner, a->metrics);
  add_data_option(learner, a->data);
  add_threads_option(learner, a->threads);
  add_report_option(learner, a->report);
  add_quiet_flag(learner, a->quiet);
  add_verbose_flag(learner);
  learner->footer(
      "\nIt prints a line when it joins (its id and slot, speed, batch, the syncer) and one when it\n"
      "ends (its newest adopted versions, restarts); with -q only the latter. It keeps no progress\n"
      "line: the syncer's shows the run. Warnings and errors go to stderr either way.\n"
      "The topology comes from the syncer. The learner trains on without the syncer, reconnects\n"
      "with backoff and pushes again. SIGTERM or Ctrl-C makes it leave in order: its last progress\n"
      "goes to the syncer, which merges it (a departure, not a failure); a second signal stops it at\n"
      "once. Exit status, for whatever restarts learners (a Slurm task loop, a Kubernetes Job):\n"
      "   0  the run is over (also when it was over before this learner came: an idle syncer,\n"
      "      atoll syncer --after-run wait, says so), or it left in order: done (--leave-status\n"
      "      changes the latter)\n"
      "   1  it failed otherwise (it gave up on its own learner): restart\n"
      "   2  bad command line: restarting cannot help\n"
      "  75  no syncer reachable for --give-up seconds: restart (the syncer may be back)\n"
      "  77  refused by the syncer (wrong token, unknown id, another model, 'full': no free open\n"
      "      slot), or no TLS handshake with it for --give-up seconds (another CA, a name its\n"
      "      certificate lacks, plain TCP against TLS): restarting cannot help");
  learner->callback([a, id, &status] {
    a->has_id = id->count() > 0;
    status = learner_command(*a);
  });
}

}  // namespace atl::cli
