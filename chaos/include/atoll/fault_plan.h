// FaultPlan: a seeded script of faults, and what must still hold (docs/design.md section 8).
//
//   name = "a learner killed mid-run comes back"
//   topology = "../topologies/synthetic.toml"   # relative to the plan; omit: the built-in default
//   set = ["tokens=400000"]                      # overrides, as `atoll run --set`
//   seconds = 8                                  # run length (0: the topology's budget)
//   seed = 7                                     # random faults and message faults
//   modes = ["decoupled", "dp"]                  # run under each (default: the topology's); two or
//                                                # more run on dedicated hardware unless `set`
//                                                # names hardware (atoll/step_pacer.h)
//   replay = "tapes/kill_learner-decoupled.jsonl"  # also inject, at their times, the faults that
//                                                  # hit in this event tape (random ones included)
//
//   [[fault]]
//   kind = "kill"          # kill crash stall slow partition delay duplicate reorder corrupt
//                          # kill_syncer kill_checkpointer join leave preempt
//   at = 2.0               # seconds after the start ...
//   at_step = 500          # ... or when `learner` reaches this inner step (one of the two)
//   learner = 1            # a learner id, or "*" for every learner (join: none, the syncer gives a slot)
//   recover_after = 1.0    # kill, crash, kill_*: seconds before the supervisor may restart it
//   duration = 2.0         # stall, slow, partition, delay, duplicate, reorder, corrupt
//   factor = 3.0           # slow: steps take factor times as long
//   seconds = 0.05         # delay: added latency; reorder: the window
//   probability = 1.0      # delay, duplicate, reorder, corrupt: share of messages
//   speed = 1.0            # join: the newcomers' speed ...
//   batch_size = 8         # ... and batch size (default: an open slot's, atoll/topology.h)
//   count = 2              # join: how many learners join
//   grace = 2.0            # preempt: the notice before the kill (a leave, then a kill if still there)
//   shard = 1              # kill_syncer, kill_checkpointer: which shard of a syncer in shards (default 0)
//
//   [random]               # Poisson failures, per learner, seeded
//   kind = "kill"          # kill or crash (each fixed learner), or preempt (each open slot's
//                          # learner: spot capacity; a replacement joins after the recovery)
//   mtbf_seconds = 30      # preempt: the mean lifetime of a spot learner
//   grace = 2              # preempt: the notice before the kill
//   recovery = "uniform"   # fixed (recovery_seconds) | uniform (recovery_min..max) | exponential (mean recovery_seconds)
//   recovery_min = 4
//   recovery_max = 6
//
//   [invariants]
//   versions_never_decrease = true      # the global version of a fragment never goes down (after a
//                                       # restarted syncer has recovered)
//   finite = true                       # the global parameters and the held-out loss stay finite
//   no_adopted_version_lost = true      # the final global versions are the newest any learner adopted
//   all_faults_injected = true          # every planned (timed or step) fault fired: a run that ended
//                                       # before one did tested nothing about it
//   reintegrate_within_seconds = 5      # every killed or crashed learner is welcomed back within this
//                                       # (from the moment its recovery was allowed)
//   min_goodput = 0.5                   # goodput >= min_goodput x the share of time the learners were
//                                       # alive (a restart's wall time depends on the machine's load)
//   max_eval_loss_increase = 0.05       # over the same run without faults (which is run too)
//
// A bad plan is refused with the file, the line and the key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "atoll/fault_kind.h"
#include "atoll/status.h"
#include "atoll/topology.h"

namespace atl {

struct Fault {
  FaultKind kind = FaultKind::kKill;
  double at = -1.0;          // seconds after the start; < 0 when triggered by a step
  uint64_t at_step = 0;
  int learner = -1;          // -1: every learner
  double recover_after = 0.0;
  double duration = 0.0;
  double factor = 1.0;
  double seconds = 0.0;
  double probability = 1.0;
  double speed = 0.0;        // join: 0: the open slot's default
  int batch_size = 0;        // join: 0: the open slot's default
  int count = 1;             // join: learners that join
  uint32_t shard = 0;        // kill_syncer, kill_checkpointer: of syncer.shards
  std::string where;         // "plan.toml:12", for messages
};

struct RandomFaults {
  enum class Recovery { kFixed, kUniform, kExponential };
  FaultKind kind = FaultKind::kKill;
  double mtbf_seconds = 0.0;
  Recovery recovery = Recovery::kFixed;
  double recovery_seconds = 5.0;             // fixed, or the exponential's mean
  double recovery_min = 4.0, recovery_max = 6.0;  // uniform
  double grace = 2.0;                        // preempt: the notice before the kill
};

struct Invariants {
  bool versions_never_decrease = true;
  bool finite = true;
  bool no_adopted_version_lost = true;
  bool all_faults_injected = true;
  double reintegrate_within_seconds = 0.0;  // 0: not checked
  double min_goodput = 0.0;                 // 0: not checked
  std::optional<double> max_eval_loss_increase;
};

struct FaultPlan {
  std::string name;
  std::string path;
  Topology topology;
  std::vector<Mode> modes;  // at least one
  double seconds = 0.0;
  uint64_t seed = 1;
  std::vector<Fault> faults;
  std::optional<RandomFaults> random;
  Invariants invariants;
};

// Reads a plan, its topology (relative to the plan's folder) and overrides.
Result<FaultPlan> load_fault_plan(const std::string& path);
// The same from text; `path` names it in errors and anchors relative paths.
Result<FaultPlan> parse_fault_plan(std::string_view text, const std::string& path);

// The faults an event tape (atoll/run_event.h) records as injected and hit,
// as timed faults at their recorded times. Errors name the file and line.
Result<std::vector<Fault>> faults_from_tape(const std::string& path);
// The same from text; `path` names it in errors.
Result<std::vector<Fault>> parse_fault_tape(std::string_view text, const std::string& path);

}  // namespace atl
