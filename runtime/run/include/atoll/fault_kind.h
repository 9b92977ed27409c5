// FaultKind: what the chaos injector can do to a run.
//
// Here, below the fault plans (atoll/fault_plan.h), because the run's event
// log (atoll/run_event.h) records injections by kind.
#pragma once

#include <cstdint>
#include <string_view>

#include "atoll/status.h"

namespace atl {

enum class FaultKind : uint8_t {
  kKill,              // exit_reason::kill, untrappable
  kCrash,             // an exception inside the learner
  kStall,             // no inner step for `duration`
  kSlow,              // steps `factor` times as long for `duration`
  kPartition,         // messages between the learner and the syncer dropped for `duration`
  kDelay,             // ... delivered `seconds` late
  kDuplicate,         // ... delivered twice
  kReorder,           // ... late by a random time up to `seconds`, so they overtake each other
  kCorrupt,           // ... with a byte flipped
  kKillSyncer,
  kKillCheckpointer,
  // Spot capacity (docs/design.md section 6, "Membership"):
  kJoin,              // a new learner (`speed`, `batch_size`) asks for an open slot and trains
  kLeave,             // the learner departs in order: its last progress is merged, it is not restarted
  kPreempt,           // a leave notice, then a kill after `duration` (the grace) if it is still there
};

// The names of plan files and tapes: "kill", "kill_syncer", ...
const char* fault_kind_name(FaultKind kind);
Result<FaultKind> parse_fault_kind(std::string_view name);
bool targets_learners(FaultKind kind);   // all but kill_syncer and kill_checkpointer
bool is_message_fault(FaultKind kind);   // partition, delay, duplicate, reorder, corrupt
bool is_membership_fault(FaultKind kind); // join, leave, preempt

}  // namespace atl
