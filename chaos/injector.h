// The chaos injector actor (internal to chaos/).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "atoll/fault_plan.h"
#include "atoll/message_faults.h"
#include "run_hooks.h"

namespace atl {

// When each child may be restarted again: a killed learner "recovers" only
// after its fault's recover_after. Read by the supervisors through
// RunHooks::restart_hold. Thread-safe.
class RestartHolds {
 public:
  void hold(const std::string& child, std::chrono::steady_clock::time_point until) {
    std::lock_guard lock(mu_);
    until_[child] = std::max(until_[child], until);
  }
  double remaining_seconds(const std::string& child) const {
    std::lock_guard lock(mu_);
    const auto it = until_.find(child);
    if (it == until_.end()) return 0.0;
    return std::max(0.0, std::chrono::duration<double>(it->second - std::chrono::steady_clock::now()).count());
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::chrono::steady_clock::time_point> until_;
};

struct InjectorArgs {
  FaultPlan plan;
  std::shared_ptr<MessageFaults> gate;
  std::shared_ptr<RestartHolds> holds;
};

// Executes the plan against the run in `context`: timed faults at their
// time, step-triggered ones when the learner's reported steps reach them, and
// seeded Poisson failures; every injection goes to the run's event log. Restarted by its
// supervisor, it skips faults whose time has passed.
caf::actor spawn_injector(caf::actor_system& sys, const RunContext& context, InjectorArgs args);

}  // namespace atl
