// The global model put together from checkpoints: one per syncer shard,
// each holding the fragments that shard owns (shard_of()). For a syncer in
// shards that ran in processes of their own, where no process ever held the
// whole model: `atoll assemble` reads each shard's final checkpoint (every
// syncer writes one when its run ends) and evaluates and saves the result.
//
// Checked before a value is taken: every checkpoint belongs to the layout
// and the fragment plan given, each holds exactly its shard's fragments at
// their sizes, and every fragment of the plan comes from exactly one of
// them. Errors name the shard and what does not fit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "atoll/checkpoint.h"
#include "atoll/fragments.h"
#include "atoll/status.h"

namespace atl {

struct AssembledModel {
  std::vector<float> theta;        // the whole model, the layout's order
  std::vector<uint64_t> versions;  // the global version of each fragment
  std::vector<uint64_t> rounds;    // by shard: rounds its checkpoint counts
};

// `by_shard[i]`: shard i's checkpoint, of `by_shard.size()` shards.
// `layout_fingerprint` and `plan` are the run's (ParamLayout::fingerprint(),
// plan_fragments()); `parameters` the layout's size.
Result<AssembledModel> assemble_from_checkpoints(std::span<const CheckpointState> by_shard,
                                                 uint64_t layout_fingerprint, const std::vector<Fragment>& plan,
                                                 size_t parameters);

}  // namespace atl
