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

#include "atoll/event_tape.h"
#include "atoll/message_faults.h"
#include "atoll/run_board.h"
#include "atoll/topology.h"
#include "directory.h"

namespace atl {

// What an extra actor of the run can reach.
struct RunContext {
  Topology topology;
  std::shared_ptr<Directory> directory;
  std::shared_ptr<RunBoard> board;
  std::chrono::steady_clock::time_point started;
};

struct RunHooks {
  // Every packet between learners and the syncer passes here (null: none).
  std::shared_ptr<MessageFaults> message_faults;
  // Supervisors and the syncer record restarts and recoveries here (null: none).
  std::shared_ptr<EventTape> tape;
  // Extra seconds a supervisor waits before restarting `child` (a fault's
  // recovery time); null: none.
  std::function<double(const std::string& child)> restart_hold;
  // Extra children of the root supervisor, e.g. the chaos injector.
  std::vector<std::pair<std::string, std::function<caf::actor(caf::actor_system&, const RunContext&)>>> children;
};

}  // namespace atl
