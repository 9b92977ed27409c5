// Run: a running topology in this process. The embedding API.
//
//   atl::Topology t;                       // or atl::load_topology("file.toml")
//   t.learners.resize(2);
//   auto run = atl::Run::start(t);         // learners, syncer, checkpointer, supervisors
//   if (!run.ok()) { ... run.status() ... }
//   ... (*run)->view() from any thread, while it runs ...
//   auto report = (*run)->wait();          // until the token budget or time limit
//
// Everything the `atoll` command does goes through this class. It needs no
// CAF headers: the actors live behind it. Thread-safety: view(), stop(),
// kill_learner(), stall_learner(), add_learner(), leave_learner() and leave()
// may be called from any thread; wait() from one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "atoll/door.h"
#include "atoll/evaluation.h"
#include "atoll/replica_exchange.h"
#include "atoll/report.h"
#include "atoll/run_view.h"
#include "atoll/status.h"
#include "atoll/topology.h"

namespace atl {

struct RunHooks;  // for layers above the actors (chaos/); see actors/run_hooks.h

struct RunOptions {
  // Where scripts/setup unpacked the data sets. Empty: $ATOLL_DATA_DIR, else ./data.
  std::string data_root;
  // Threads that run learners' inner steps; 0: one per core.
  int compute_threads = 0;
  // CAF scheduler threads (messages, timers, supervision); they are mostly idle.
  int control_threads = 2;
  // > 0: stop after this many seconds, overriding the topology's `seconds`.
  double seconds = 0.0;
  // This run's checkpoint folder inside topology.checkpoint.dir; empty:
  // "run-<yyyymmdd-hhmmss>-<pid>", so a fresh run never restores another's.
  std::string run_name;
  // > 1: the report's curve evaluates the global model at this many points
  // of the run (equal steps of the token budget, or of the time limit), the
  // end included. Snapshots are taken during the run and evaluated after it.
  int curve_points = 0;
  // Non-empty: at the end, the syncer's global model is written here as a
  // model file (atoll/model_file.h; atoll.load_model() reads it), atomically.
  std::string save_model;
  // The held-out evaluation after the run: the prompt of a language model's
  // sample in the report, its length and temperature (atoll/evaluation.h).
  EvaluationOptions evaluation;
  // Restart intensity of every supervisor: more than max_restarts failures of
  // one child within restart_window_seconds and it is given up on.
  int max_restarts = 10;
  double restart_window_seconds = 10.0;

  // Across processes (atoll/cluster.h). Neither `listen` nor `join`: the
  // whole run in this process.
  struct Cluster {
    // "HOST:PORT": this process holds the syncer and checkpointer and
    // serves learners there (port 0: any free port; see Run::port()). A
    // sharded syncer held whole: shard i at PORT + i (port 0: each a free
    // port; Run::ports()).
    std::string listen;
    // "HOST:PORT": this process holds learners `learner_ids`; the syncer is there.
    // A sharded syncer (syncer.shards = S): S addresses, comma-separated, shard 0 first.
    std::string join;
    // Listening with syncer.shards = S: the one shard this process holds (0
    // to S - 1). Unset: every shard (and so the whole model: its report,
    // evaluation and --save-model are the run's).
    std::optional<uint32_t> shard;
    std::vector<uint32_t> learner_ids;
    // Required with listen or join; never printed (atoll/cluster_token.h).
    std::string token;
    double heartbeat_seconds = 1.0;
    double connection_timeout_seconds = 5.0;  // a peer silent this long is dropped
    double give_up_seconds = 60.0;            // joined: no syncer for this long ends the run
    double handshake_seconds = 10.0;          // TLS and the token's proof, per connection
    int max_unauthenticated_per_address = 16; // connections not yet through their handshake
    // TLS 1.3 (atoll/door.h) when set: this process's certificate and key
    // (PEM), and the CA every peer's certificate must be signed by. Both
    // sides verify each other; all processes of a run use TLS or none does.
    std::string tls_certificate, tls_key, tls_ca;
    // Joining: the name the syncer's certificate must carry (default: the
    // host joined). Listening: the common name of learner certificates
    // (default "atoll-learner").
    std::string tls_name;
    bool tls() const { return !tls_certificate.empty(); }
    // An emulated wide-area link on this process's sends (atoll/door.h).
    LinkShape link;
  } cluster;

  // The speed and batch size of this process's learners (a learner process
  // in an open slot brings its own). Unset: their slots' defaults
  // (default_spec(), atoll/topology.h).
  std::optional<LearnerSpec> learner_spec;

  // Joining with one learner id: that learner trains outside atoll (a Python
  // loop, atoll.Learner) through this exchange (atoll/replica_exchange.h), and
  // no data is loaded here. Null: atoll's own learners on the topology's data.
  std::shared_ptr<ReplicaExchange> external;
};

// The folder a syncer of `topology` keeps its checkpoints in:
// checkpoint.dir/<run_name>, and /shard-<i> in it for one shard of a sharded
// syncer (each shard its own lock). Empty when checkpoints are off.
std::string checkpoint_folder(const Topology& topology, const std::string& run_name, uint32_t shard);

class Run {
 public:
  // Loads the data, checks the topology against the model, and starts every
  // actor. Fails with a message naming the problem (a missing data set, a
  // fragment count the model cannot fill, ...).
  static Result<std::unique_ptr<Run>> start(const Topology& topology, RunOptions options = {},
                                            const RunHooks* hooks = nullptr);

  ~Run();  // stops the run if wait() was not called
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  const Topology& topology() const;
  // Why the run could not go on (a refusal, a lost syncer); empty: no failure.
  std::string failure() const;
  // The port the syncer serves learners on (cluster.listen; shard 0's, or
  // the one shard's held here); 0 otherwise.
  uint16_t port() const;
  // Every shard's held here, in shard order (empty: not listening).
  const std::vector<uint16_t>& ports() const;
  // Where this run writes checkpoints (empty when disabled).
  const std::string& checkpoint_dir() const;
  // What the run shows now (atoll/run_view.h): figures, learners, the time
  // series so far and the newest events. After wait(), the final view, with
  // the held-out evaluation.
  RunView view() const;
  // True once the token budget is reached or stop() was called.
  bool finished() const;
  // Ends the run early; wait() then returns the report.
  void stop();

  // Blocks until the token budget is reached, the time limit passes or stop()
  // is called; then waits for the syncer's last rounds (outer.final_flush),
  // stops every actor, evaluates the syncer's global parameters on the
  // held-out data and returns the report. Call once.
  Result<Report> wait();

  // The syncer's global parameters at the end (layout order), after wait()
  // returned; empty if the syncer was not there to ask.
  const std::vector<float>& parameters() const;

  // Kills learner `id` (exit_reason::kill, untrappable) as a failure would;
  // its supervisor restarts it. False if it is not running.
  bool kill_learner(uint32_t id);
  // Learner `id` takes no inner step for `seconds` (a stall fault). False if
  // it is not running.
  bool stall_learner(uint32_t id, double seconds);

  // Open membership (docs/design.md section 6), in the syncer's process: a
  // new learner with `spec` claims the lowest free open slot and trains;
  // returns its id, or the syncer's reason (full: every open slot is taken,
  // membership.max_learners). Like a kill, it goes on the run's event log.
  Result<uint32_t> add_learner(const LearnerSpec& spec);
  // Learner `id` departs in order: no more steps, its last progress pushed
  // and merged (waiting up to drain_seconds for the syncer to say so), then
  // it stops and is not restarted; a departure, not a failure. False if it
  // is not running here.
  bool leave_learner(uint32_t id, const std::string& reason, double drain_seconds = 30.0);
  // Every learner of this process leaves (a learner process asked to stop:
  // SIGTERM, a preemption notice); the run is over here once they are gone,
  // at most drain_seconds (and a little) later.
  void leave(const std::string& reason, double drain_seconds = 30.0);

  // The syncer here writes a checkpoint of now (fsynced) and this waits for
  // it, up to `seconds`, without ending the run: learners are not told. For a
  // syncer that pauses (an engine moves its process): the syncer started
  // again with the same run name restores it. Fails when no syncer runs here,
  // checkpoints are off (checkpoint.dir empty) or the write did not succeed.
  Status checkpoint_now(double seconds = 30.0);

 private:
  struct Impl;
  explicit Run(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace atl
