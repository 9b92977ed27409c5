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
#include "atoll/compute_pool.h"
#include "atoll/event_tape.h"
#include "atoll/message_faults.h"
#include "atoll/job.h"
#include "atoll/run.h"
#include "atoll/run_board.h"
#include "atoll/topology.h"
#include "directory.h"

namespace atl {

struct SyncerArgs {
  Topology topology;
  std::shared_ptr<Directory> directory;
  std::shared_ptr<RunBoard> board;
  // Restore from the directory's checkpointer at start, and send it checkpoints.
  bool use_checkpointer = true;
  // Housekeeping period (live metrics, time-based checkpoints); 0: none, for
  // deterministic tests, whose scheduler would otherwise never run dry.
  double tick_seconds = 0.1;
  // When the run started: statistics keep this time base across restarts.
  std::optional<std::chrono::steady_clock::time_point> run_started;
  std::shared_ptr<MessageFaults> faults;  // the send path's interposition point (null: none)
  std::shared_ptr<EventTape> tape;        // recoveries observed (null: none)
  std::string cluster_token;              // required of every Register (empty: none)
};
caf::actor spawn_syncer(caf::actor_system& sys, SyncerArgs args);

struct LearnerArgs {
  uint32_t id = 0;
  uint64_t incarnation = 1;
  std::shared_ptr<const Job> job;
  std::shared_ptr<Directory> directory;
  ComputePool* pool = nullptr;  // outlives every learner
  std::shared_ptr<RunBoard> board;  // re-integration times, adopted versions
  std::shared_ptr<MessageFaults> faults;  // the send path's interposition point (null: none)
  std::string cluster_token;  // proven in every Register (empty: one process, none needed)
};
caf::actor spawn_learner(caf::actor_system& sys, LearnerArgs args);

// Runs on its own thread: fsync must not stall the scheduler.
caf::actor spawn_checkpointer(caf::actor_system& sys, std::shared_ptr<CheckpointStore> store,
                              std::shared_ptr<Directory> directory, std::shared_ptr<RunBoard> board);

struct ChildSpec {
  std::string name;  // "learner 3", "syncer": also the key of its restart count
  std::function<caf::actor(caf::actor_system&, uint64_t incarnation)> start;
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
  std::shared_ptr<RunBoard> board;
  std::shared_ptr<EventTape> tape;  // restarts are recorded here (null: none)
  std::shared_ptr<Directory> directory;  // the supervisor enters itself under `name` (null: not)
  // Extra seconds to wait before restarting a child (a fault's recovery time).
  std::function<double(const std::string& child)> restart_hold;
};
caf::actor spawn_supervisor(caf::actor_system& sys, SupervisorSpec spec);

// ---- across processes (cluster.cc; atoll/cluster.h says how it fits)

// Loads CAF's middleman with heartbeats: a peer silent for `timeout_seconds`
// is dropped (CAF 0.17 has heartbeats off by default).
// With cluster.tls(), CAF's openssl module too.
void enable_network(caf::actor_system_config& cfg, const RunOptions::Cluster& cluster);

struct GatewayArgs {
  Topology topology;
  std::shared_ptr<Directory> directory;  // where the current syncer is found
  std::shared_ptr<RunBoard> board;       // refusals are counted here
  std::string cluster_token;
  size_t max_message_bytes = 0;          // larger packets are dropped unread
};
caf::actor spawn_gateway(caf::actor_system& sys, GatewayArgs args);
// Publishes `gateway` on host:port (0: any), over TLS if `tls`; the port it got.
Result<uint16_t> publish_gateway(caf::actor_system& sys, const caf::actor& gateway, const std::string& host,
                                 uint16_t port, bool tls);

struct SyncerLinkArgs {
  std::string host;
  uint16_t port = 0;
  std::shared_ptr<Directory> directory;  // the gateway is entered as the syncer
  std::shared_ptr<RunBoard> board;       // fail()ed after give_up_seconds without a connection
  double give_up_seconds = 60.0;
  bool tls = false;
};
caf::actor spawn_syncer_link(caf::actor_system& sys, SyncerLinkArgs args);

}  // namespace atl
