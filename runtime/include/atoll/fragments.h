// Fragments: the units of synchronization.
//
// The P fragments partition a layout's tensors: every tensor is in exactly one
// fragment. Assignment is greedy balanced bin-packing (largest tensor first,
// ties by name, into the currently lightest fragment, ties by lowest id), so it
// is deterministic and every replica computes the same plan from the same
// layout. On the wire and at the syncer a fragment is one contiguous float
// vector: its tensors back to back, in layout order (the pieces below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "atoll/param_layout.h"
#include "atoll/status.h"

namespace atl {

// How the syncer merges a fragment's outer gradients (merge.h).
enum class MergeRule : uint8_t {
  kAvg = 0,  // token-weighted mean; fragments with an embedding or output head
  kRda = 1,  // per tensor: weighted mean norm along the weighted mean direction
};

const char* merge_rule_name(MergeRule rule);

struct Fragment {
  // One tensor inside the fragment vector.
  struct Piece {
    int tensor;              // index in the layout
    size_t param_offset;     // where it lives in the full parameter buffer
    size_t fragment_offset;  // where it lives in the fragment vector
    size_t size;             // floats
  };

  int id = 0;
  MergeRule rule = MergeRule::kRda;
  std::vector<Piece> pieces;  // ascending layout index
  size_t size = 0;            // floats in the fragment vector
};

// Splits `layout` into `count` fragments. Fails if count < 1 or if there are
// fewer tensors than fragments (a fragment would be empty).
Result<std::vector<Fragment>> plan_fragments(const ParamLayout& layout, int count);

// Which tensors each merge rule takes, for a person to check before a run:
//   "weighted mean for transformer.wte.weight, transformer.wpe.weight (2 of 12
//    fragments, 6 tensors with those beside them); RDA for the other 44 tensors"
// A fragment is averaged when it holds an embedding or an output head (a
// tensor named by model.avg); when none is, it says so, since a model with
// embeddings then wants model.avg set.
std::string describe_merge_rules(const ParamLayout& layout, const std::vector<Fragment>& fragments);

// Inner steps after adopting `version` of fragment `fragment` at which it falls
// due: H for every version but the first, (fragment + 1) * H / P for version 0,
// so that fragments are staggered and about P/H fall due per step.
uint64_t steps_until_due(int fragment, int fragments, int sync_every, uint64_t version);

// The syncer shard that owns fragment `fragment` when the syncer runs as
// `shards` processes (topology.h's syncer.shards, >= 1): the one that holds,
// merges, checkpoints and broadcasts it, and the one every push of it goes to.
// The one place this rule is written.
inline uint32_t shard_of(uint32_t fragment, int syncer_shards) {
  const auto shards = static_cast<uint32_t>(syncer_shards);
  return fragment % shards;
}

// Copies the fragment's tensors out of a full buffer into `out` (fragment.size floats).
void gather(const Fragment& fragment, std::span<const float> params, std::span<float> out);
// Copies `values` (fragment.size floats) into the fragment's tensors of a full buffer.
void scatter(const Fragment& fragment, std::span<const float> values, std::span<float> params);

}  // namespace atl
