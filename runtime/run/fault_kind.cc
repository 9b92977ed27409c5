#include "atoll/fault_kind.h"

#include <string>

namespace atl {
namespace {

constexpr FaultKind kAllKinds[] = {FaultKind::kKill,      FaultKind::kCrash,     FaultKind::kStall,
                                   FaultKind::kSlow,      FaultKind::kPartition, FaultKind::kDelay,
                                   FaultKind::kDuplicate, FaultKind::kReorder,   FaultKind::kCorrupt,
                                   FaultKind::kKillSyncer, FaultKind::kKillCheckpointer, FaultKind::kJoin,
                                   FaultKind::kLeave,     FaultKind::kPreempt};

}  // namespace

const char* fault_kind_name(FaultKind k) {
  switch (k) {
    case FaultKind::kKill: return "kill";
    case FaultKind::kCrash: return "crash";
    case FaultKind::kStall: return "stall";
    case FaultKind::kSlow: return "slow";
    case FaultKind::kPartition: return "partition";
    case FaultKind::kDelay: return "delay";
    case FaultKind::kDuplicate: return "duplicate";
    case FaultKind::kReorder: return "reorder";
    case FaultKind::kCorrupt: return "corrupt";
    case FaultKind::kKillSyncer: return "kill_syncer";
    case FaultKind::kKillCheckpointer: return "kill_checkpointer";
    case FaultKind::kJoin: return "join";
    case FaultKind::kLeave: return "leave";
    case FaultKind::kPreempt: return "preempt";
  }
  return "unknown";
}

Result<FaultKind> parse_fault_kind(std::string_view name) {
  std::string expected;
  for (FaultKind k : kAllKinds) {
    if (name == fault_kind_name(k)) return k;
    expected += std::string(expected.empty() ? "" : ", ") + fault_kind_name(k);
  }
  return Status::invalid_argument("unknown fault kind '" + std::string(name) + "' (expected " + expected + ")");
}

bool targets_learners(FaultKind k) { return k != FaultKind::kKillSyncer && k != FaultKind::kKillCheckpointer; }

bool is_membership_fault(FaultKind k) {
  return k == FaultKind::kJoin || k == FaultKind::kLeave || k == FaultKind::kPreempt;
}

bool is_message_fault(FaultKind k) {
  return k == FaultKind::kPartition || k == FaultKind::kDelay || k == FaultKind::kDuplicate ||
         k == FaultKind::kReorder || k == FaultKind::kCorrupt;
}

}  // namespace atl
