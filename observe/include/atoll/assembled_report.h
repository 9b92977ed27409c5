// The report of a run whose syncer shards ran in processes of their own,
// from the figures in each shard's final checkpoint (atoll/syncer_figures.h).
// Folded the way a process holding every shard folds their live samples
// (merge_shard_samples, fold_view, report_from_view), so that the two reports
// read alike: tokens, goodput, rounds, bytes, merges per learner and per
// shard. The model's figures (held-out loss, sample, description, data) are
// the caller's, who put the model together.
//
// Each shard counts seconds from the run's start as it saw it; the figures
// are put on one clock, the earliest start's (wall clocks, to the ms).
// Not in the figures, so 0 here: the processes' supervisor events
// (restarts, re-integration times), checkpoints written and refusals at the
// doors, each counted by its process. The syncer's CPU is each shard's last
// process's.
#pragma once

#include <cstdint>
#include <vector>

#include "atoll/report.h"
#include "atoll/syncer_figures.h"
#include "atoll/topology.h"

namespace atl {

struct ShardFigures {
  uint32_t shard = 0;
  SyncerFigures figures;
  std::vector<uint64_t> versions;  // per fragment of the plan: the shard's own, 0 elsewhere
  uint64_t parameters = 0;         // of the model, in the fragments it owns
  uint32_t fragments = 0;
};

// `shards`: one per syncer shard of `topology`, in shard order.
Report assembled_report(const Topology& topology, const std::vector<ShardFigures>& shards);

// When figures `f` of one of `shards` were taken, on the run's clock (the
// earliest start of `shards`): for figures taken during the run, such as a
// curve's points.
double run_seconds(const SyncerFigures& f, const std::vector<ShardFigures>& shards);

}  // namespace atl
