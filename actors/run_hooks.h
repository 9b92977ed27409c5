// RunHooks: how a layer above the actors (chaos/) plugs into a Run without
// the actors depending on it. Internal: atoll/run.h only forward-declares it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "atoll/message_faults.h"
#include "atoll/run_records.h"
#include "atoll/topology.h"
#include "directory.h"

namespace atl {

// What an extra actor of the run can reach.
struct RunContext {
  Topology topology;
  std::shared_ptr<Directory> directory;
  std::shared_ptr<RunRecords> records;
  std::chrono::steady_clock::time_point started;
};

struct RunHooks {
  // Every packet between learners and the syncer passes here (null: none).
  std::shared_ptr<MessageFaults> message_faults;
  // The run's event log, e.g. one that writes a tape (null: the run keeps one in memory).
  std::shared_ptr<RunLog> log;
  // Extra seconds a supervisor waits before restarting `child` (a fault's
  // recovery time); null: none.
  std::function<double(const Child& child)> restart_hold;
  // Extra children of the root supervisor, e.g. the chaos injector.
  std::vector<std::pair<std::string, std::function<caf::actor(caf::actor_system&, const RunContext&)>>> children;
};

}  // namespace atl
