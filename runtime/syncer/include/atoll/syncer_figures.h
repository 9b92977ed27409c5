// SyncerFigures: what a syncer (or one shard of it) has counted of the run
// so far, carried in each of its checkpoints (CheckpointState::figures).
//
// Two readers: a syncer restarted in a new process continues them
// (SyncerCore::continue_from), so its counts and its clock go on from the
// run's start instead of from zero; and `atoll assemble` folds every shard's
// final figures into one report, as a process holding every shard does with
// their live samples (atoll/assembled_report.h).
//
// Times (round ends, welcomes, evaluations, memberships) are seconds since
// `started_unix_ms`, the run's start as the syncer counts it: a restarted
// syncer takes its predecessor's. Encoded as a Cap'n Proto SyncerFigures
// (schema/checkpoint.capnp); the plain counts go by name (kSyncerCounts), so
// a count added later reads as 0 from an older checkpoint.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "atoll/status.h"
#include "atoll/syncer_stats.h"

namespace atl {

struct SyncerFigures {
  int64_t started_unix_ms = 0;   // the run's start, as this syncer counts its seconds
  double seconds = 0.0;          // since then, when the figures were taken
  uint64_t tokens = 0;           // trained by every learner, all incarnations
  double allocated_seconds = 0.0;  // learner time allocated to the run so far
  double cpu_seconds = 0.0;      // the syncer thread's, in the process that took them
  SyncerStats stats;
  // By learner id. What a report shows and a continuing syncer needs:
  // counts, labels, membership. Not connections, pending requests or
  // per-fragment progress (learners send those again when they register).
  std::vector<LearnerRecord> learners;
};

std::vector<uint8_t> encode_figures(const SyncerFigures& figures);
// Names what does not decode, or a value no syncer writes (a time or sum
// not finite or negative, a start beyond wall-clock reach): Corruption. A
// count of an unknown name is skipped.
Result<SyncerFigures> decode_figures(std::span<const uint8_t> bytes);

}  // namespace atl
