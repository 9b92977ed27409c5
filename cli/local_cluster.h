// LocalCluster: one run as local processes, as `atoll run --processes` does.
//
//   atl::LocalClusterOptions o;
//   o.atoll = "/usr/bin/atoll";                 // the executable to start
//   o.learners = 4;                             // the topology's learner count
//   auto cluster = atl::LocalCluster::start(o); // the syncer listens; learners join
//   ... cluster->stop() from a signal handler's watcher: the run ends in order ...
//   int status = (*cluster)->wait();            // the syncer's exit status
//
// The syncer is `atoll syncer` on 127.0.0.1 (a free port; a sharded syncer:
// every shard in that process, each on a port of its own), each learner an
// `atoll learner`, all with a fresh cluster token in their environment (never
// on a command line). Each child has a process group of its own, so a
// terminal's Ctrl-C reaches only the caller, and dies with the caller (even
// by SIGKILL): no orphans. Not thread-safe: one thread drives it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "atoll/status.h"

namespace atl {

struct LocalClusterOptions {
  std::string atoll;                 // path of the atoll executable
  size_t learners = 0;               // learner processes: one per learner of the topology
  // The topology's syncer.shards: one `atoll syncer` holds them all, each on
  // its own port, and writes the run's one report.
  size_t shards = 1;
  std::string topology_file;         // empty: the built-in default
  std::vector<std::string> sets;     // --set key=value, each
  std::string report_path;           // the syncer writes the run's report (and plots) here
  double seconds = 0;                // > 0: --seconds
  std::string data;                  // --data
  bool quiet = false, verbose = false;  // -q and -v on every process
  // Over TLS 1.3 with the certificates in this folder (made there by
  // make_certificates() when it has none).
  std::string tls_dir;
  std::string link;                  // --link on every process (an emulated wide-area link)
  std::optional<std::string> sample_prompt;  // --sample-prompt for the syncer (unset: its default)
  int curve = 0;                              // --curve for the syncer (0: none)
  // The syncer serves its status page and metrics here (--metrics); they
  // want the cluster token, which then goes to `token_file` (mode 600),
  // /metrics not with `metrics_public` (--metrics-public).
  std::string metrics;
  bool metrics_public = false;
  std::string token_file;
  double listen_timeout_seconds = 60;  // for the syncer to load its data and listen
  double learner_end_seconds = 15;     // for each learner to end after the syncer did
};

class LocalCluster {
 public:
  // Starts the syncer, waits until it listens, then starts the learners.
  // `interrupted` is asked while waiting: true kills the syncer and fails.
  static Result<std::unique_ptr<LocalCluster>> start(const LocalClusterOptions& options,
                                                     const std::function<bool()>& interrupted = {});
  ~LocalCluster();  // kills (SIGKILL) whatever still runs
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  uint16_t port() const;  // where the syncer (shard 0) serves learners
  // SIGINT to the syncer (every shard): it ends the run in order, tells the learners, writes the report.
  void stop();
  // SIGKILL to every process.
  void kill();
  // Waits for the syncer (every shard) to end, calling `poll` every 50 ms (to
  // stop() or kill() on a signal); then gives each learner learner_end_seconds
  // to end (then SIGTERM, then SIGKILL). Returns the syncer's exit status (a
  // signal: 128 + it; shards: the first non-zero).
  int wait(const std::function<void()>& poll = {});
  // Learners that did not end cleanly (stopped, or a non-zero status); after wait().
  int learners_failed() const;

 private:
  LocalCluster() = default;
  std::vector<pid_t> syncers_;  // the syncer process; -1: reaped
  std::vector<pid_t> learners_;
  uint16_t port_ = 0;
  int learners_failed_ = 0;
  double learner_end_seconds_ = 15;
};

}  // namespace atl
