// `atoll learner --join HOST:PORT --id N`: one learner in this process,
// trained on the topology the syncer tells it.
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
  double give_up = 60;
  int threads = 0;
  ClusterFlags cluster;
};

int learner_command(const LearnerArgs& a) {
  auto at = parse_endpoint(a.join);
  if (!at.ok()) return fail(at.status());
  RunOptions options;
  options.data_root = a.data;
  options.compute_threads = a.threads;
  options.cluster.join = a.join;
  options.cluster.learner_ids = {a.id};
  options.cluster.give_up_seconds = a.give_up;
  if (Status s = apply_cluster_flags(a.cluster, options.cluster); !s.ok()) return fail(s);
  auto topology = fetch_topology(*at, a.id, options.cluster, a.give_up);
  if (!topology.ok()) {
    std::fprintf(stderr, "atoll: %s\n", topology.status().to_string().c_str());
    return 1;
  }
  return drive(*topology, options, a.report, /*quiet=*/true, MetricsFlags{});
}

}  // namespace

void add_learner_command(CLI::App& app, int& status) {
  auto a = std::make_shared<LearnerArgs>();
  auto* learner = app.add_subcommand("learner", "Run one learner in this process, joining a syncer over the network");
  learner->add_option("--join", a->join, "HOST:PORT of the syncer")->required();
  learner->add_option("--id", a->id, "Learner id, from 0 to the topology's learners - 1")->required();
  learner->add_option("--give-up", a->give_up, "Seconds without a syncer before giving up")
      ->capture_default_str()
      ->check(kPositiveSeconds);
  add_cluster_flags(learner, a->cluster, "syncer");
  learner->add_option("--data", a->data, "Data folder (default: $ATOLL_DATA_DIR or ./data)");
  learner->add_option("--threads", a->threads, "Compute threads (default: one per core)")->check(kThreads);
  learner->add_option("--report", a->report, "Where to write this process's JSON report (empty: none)");
  add_verbose_flag(learner, "Log every connection, registration and refusal");
  learner->footer(
      "\nThe topology comes from the syncer. The learner trains on without the syncer, reconnects\n"
      "with backoff and pushes again; it exits 0 when the syncer says the run is over, 1 when refused\n"
      "(wrong token, unknown id) or when no syncer answered for --give-up seconds.");
  learner->callback([a, &status] { status = learner_command(*a); });
}

}  // namespace atl::cli
