// The actors of a run and how to spawn them (internal to actors/).
//
//   root supervisor (one_for_one)
//   ├── syncer supervisor (rest_for_one): checkpointer, syncer
//   └── learner supervisor (one_for_one): learner 0 ... learner M-1
//
// Each actor's state and behavior live in their own file; this header only
// says what each needs to start. Actors find each other through the
// Directory, because a restart changes a handle.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "atoll/checkpoint.h"
#include "atoll/cluster.h"
#include "atoll/compute_pool.h"
#include "atoll/door.h"
#include "atoll/message_faults.h"
#include "atoll/replica_exchange.h"
#include "atoll/job.h"
#include "atoll/run.h"
#include "atoll/run_records.h"
#include "atoll/step_pacer.h"
#include "atoll/topology.h"
#include "directory.h"

namespace atl {

struct SyncerArgs {
  Topology topology;
  std::shared_ptr<Directory> directory;
  std::shared_ptr<RunRecords> records;  // its samples, counted bytes, recoveries, the seal
  // Restore from the directory's checkpointer at start, and send it checkpoints.
  bool use_checkpointer = true;
  // Housekeeping period (live metrics, time-based checkpoints); 0: none, for
  // deterministic tests, whose scheduler would otherwise never run dry.
  double tick_seconds = 0.1;
  // When the run started: statistics keep this time base across restarts.
  std::optional<std::chrono::steady_clock::time_point> run_started;
  std::shared_ptr<MessageFaults> faults;  // the send path's interposition point (null: none)
  std::string cluster_token;              // required of every Register (empty: none)
  uint32_t shard = 0;                     // of topology.syncer.shards (SyncerCore::owns)
  // The shards this process runs (1, or syncer.shards): the run's records are
  // sealed once each of them sealed its own.
  size_t shards_here = 1;
};
caf::actor spawn_syncer(caf::actor_system& sys, SyncerArgs args);

struct LearnerArgs {
  uint32_t id = 0;
  uint64_t incarnation = 1;
  std::shared_ptr<const Job> job;
  std::shared_ptr<Directory> directory;
  ComputePool* pool = nullptr;  // outlives every learner
  std::shared_ptr<RunRecords> records;  // re-integrations, adopted versions, regressions refused
  std::shared_ptr<MessageFaults> faults;  // the send path's interposition point (null: none)
  std::string cluster_token;  // proven in every Register (empty: one process, none needed)
  // Trained outside atoll, through this exchange (null: atoll's own replica on `job`'s data).
  std::shared_ptr<ReplicaExchange> external;
  // Its speed and batch size (unset: its slot's default, atoll/topology.h).
  std::optional<LearnerSpec> spec;
  // Started again by its supervisor after a failure (its welcome is a
  // re-integration), not for the first time (a newcomer's is not).
  bool restarted = false;
  std::shared_ptr<StepPacer> pacer;  // dedicated hardware: paces its steps (null: shared)
};
caf::actor spawn_learner(caf::actor_system& sys, LearnerArgs args);

// Runs on its own thread: fsync must not stall the scheduler. Entered in
// the directory as Directory::checkpointer_name(shard): each syncer shard
// writes its own folder.
caf::actor spawn_checkpointer(caf::actor_system& sys, std::shared_ptr<CheckpointStore> store,
                              std::shared_ptr<Directory> directory, std::shared_ptr<RunRecords> records,
                              uint32_t shard = 0);

struct ChildSpec {
  Child child;  // its name() is its key in the directory and in logs
  // `started`: how many times the supervisor has started it, this one included (1: the first).
  std::function<caf::actor(caf::actor_system&, uint64_t started)> start;
};

// Supervision like OTP's: monitors (never links: exit_reason::kill cannot be
// trapped), restart with exponential backoff, and a restart intensity: a
// child that fails more than max_restarts times within window_seconds is
// given up on and reported, not restarted forever. A child that stops in
// order (exit_reason::normal or user_shutdown) is not restarted.
struct SupervisorSpec {
  enum class Strategy {
    kOneForOne,  // restart the failed child only
    kRestForOne, // restart the failed child and every child started after it
  };
  std::string name;
  Strategy strategy = Strategy::kOneForOne;
  int max_restarts = 10;
  double window_seconds = 10.0;
  double backoff_initial = 0.05;  // seconds; doubles with each restart inside the window
  double backoff_max = 2.0;
  std::vector<ChildSpec> children;
  std::shared_ptr<RunRecords> records;   // restarts and give-ups are logged here (null: none)
  std::shared_ptr<Directory> directory;  // the supervisor enters itself under `name` (null: not)
  // Extra seconds to wait before restarting a child (a fault's recovery time).
  std::function<double(const Child& child)> restart_hold;
  // A learner supervisor in the syncer's process takes newcomers (join): how
  // to start learner `id` with `spec`. Null: it takes none.
  std::function<ChildSpec(uint32_t id, const LearnerSpec& spec)> make_learner;
};
caf::actor spawn_supervisor(caf::actor_system& sys, SupervisorSpec spec);

// ---- across processes (cluster.cc; atoll/cluster.h says how it fits)

// The door's options for this process, from the run's cluster options.
DoorOptions door_options(const RunOptions::Cluster& cluster, uint32_t learners, size_t max_frame_bytes);

// A door and the actor that receives its events. The door outlives every
// actor that sends through it: drain it after they are done.
struct DoorService {
  caf::actor actor;
  std::shared_ptr<Door> door;
  uint16_t port = 0;  // serve_learners(): the port bound
};

struct GatewayArgs {
  Topology topology;
  uint32_t shard = 0;                    // the syncer shard its learners reach (Directory::syncer_name)
  std::vector<NamedShape> layout;        // the model's, for learners that ask for the topology
  std::shared_ptr<Directory> directory;  // where the current syncer is found
  std::shared_ptr<RunRecords> records;   // refusals are counted here
  size_t max_message_bytes = 0;          // the largest frame a learner may send
  std::shared_ptr<Door> door;            // set by serve_learners()
};
// The syncer's process: a door on `at` whose learners reach the syncer
// through the gateway and their stand-ins.
Result<DoorService> serve_learners(caf::actor_system& sys, GatewayArgs args, const Endpoint& at,
                                   const RunOptions::Cluster& cluster);

struct SyncerLinkArgs {
  std::string host;
  uint16_t port = 0;
  std::vector<uint32_t> learners;        // of this process: one connection each
  std::shared_ptr<Directory> directory;  // each stand-in enters itself as its learner's syncer
  std::shared_ptr<RunRecords> records;   // fail()ed after give_up_seconds without a connection
  double give_up_seconds = 60.0;
  size_t max_message_bytes = 0;          // the largest frame the syncer may send
  std::shared_ptr<Door> door;            // set by join_syncer()
  uint32_t shard = 0;                    // the syncer shard at host:port
};
// A learner process: one connection per learner to the syncer at host:port,
// kept (reconnecting with backoff) until the run ends or give_up_seconds.
Result<DoorService> join_syncer(caf::actor_system& sys, SyncerLinkArgs args, const RunOptions::Cluster& cluster,
                                uint32_t learners);

}  // namespace atl
