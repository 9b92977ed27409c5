// Fragments: the units of synchronization.
//
// The P fragments partition a layout's parameters: every float is in exactly
// one fragment. Pieces are placed by greedy balanced bin-packing (largest
// first, ties by tensor name and then by position in the tensor, into the
// currently lightest fragment, ties by lowest id), so the plan is
// deterministic and every replica computes the same one from the same layout
// and topology. A piece is a whole tensor, except in a syncer in shards: there
// a tensor larger than T = ceil(total / P) floats is split into blocks of
// whole rows (row_floats() below) of at most T floats each, the remainder its
// own block, so that no shard holds a big tensor whole and the shards (which
// own fragment p % S) hold about equal parts. A single syncer holds every
// fragment, so its plans keep whole tensors: the plans runs always had. On
// the wire and at the syncer a fragment is one contiguous float vector: its
// pieces back to back, in layout order (the pieces below).
//
// A split tensor stays right everywhere because everything past the plan
// works on pieces or on whole fragment vectors: gather()/scatter() copy a
// piece's own range, codecs quantize the fragment vector in blocks that never
// knew tensors, checkpoints store fragment vectors (a restore checks each
// one's size against this plan), and RDA takes each piece's norm on its own,
// so a split tensor's blocks are merged by RDA as tensors of their own.
//
// The merge rule is a piece's: a piece of an embedding or output head is
// averaged, and so is a whole tensor in the same fragment (the rule plans of
// whole tensors have always had); a block of a split body tensor is merged by
// RDA wherever it was packed, so that a split leaves no block of the body
// averaged for a head's sake.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "atoll/param_layout.h"
#include "atoll/status.h"

namespace atl {

// How the syncer merges a piece's outer gradients (merge.h).
enum class MergeRule : uint8_t {
  kAvg = 0,  // token-weighted mean; pieces of an embedding or output head
  kRda = 1,  // per piece: weighted mean norm along the weighted mean direction
};

const char* merge_rule_name(MergeRule rule);

struct Fragment {
  // One tensor, or one block of a split tensor, inside the fragment vector.
  // All offsets and sizes are in floats, and
  // param_offset == layout.tensor(tensor).offset + tensor_offset.
  struct Piece {
    int tensor;                // index in the layout
    size_t param_offset;       // where it lives in the full parameter buffer
    size_t fragment_offset;    // where it lives in the fragment vector
    size_t size;               // floats; the tensor's size unless it is split
    size_t tensor_offset = 0;  // where it starts in its tensor: 0 unless a later block, a multiple of row_floats()
    MergeRule rule = MergeRule::kRda;  // kAvg: of an embedding or head, or whole beside one
  };

  int id = 0;
  // kAvg when every piece is averaged (the fragment is then one weighted
  // mean); kRda otherwise, each piece merged by its own rule.
  MergeRule rule = MergeRule::kRda;
  std::vector<Piece> pieces;         // ascending (tensor, tensor_offset)
  size_t size = 0;                   // floats in the fragment vector
};

// Floats of `fragment` that are averaged (pieces with rule kAvg).
size_t averaged_floats(const Fragment& fragment);
// Sets every piece's rule (and the fragment's) to `rule`: outer.force_avg, outer.force_rda.
void force_rule(Fragment& fragment, MergeRule rule);

// The floats of one row of `t` in storage order, the unit a split tensor is
// cut in, so that a block is a sub-tensor: a row along dims[0] of a row-major
// tensor (cols floats), a column of atoll's own column-major matrices (rows
// floats), one value of a vector (cols == 1).
size_t row_floats(const TensorSpec& t);

// Splits `layout` into `count` fragments for a syncer in `syncer_shards`
// shards (see the top of this file: tensors are split only when it is > 1).
// Fails if count < 1 or if there are fewer tensors than fragments (the job
// caps the count at the tensors: job.h).
Result<std::vector<Fragment>> plan_fragments(const ParamLayout& layout, int count, int syncer_shards = 1);

// A fingerprint of the plan: every fragment's pieces (tensor, where in the
// tensor, how many floats, where in the fragment), so that two plans
// with fragments of the same sizes but other contents differ. Checkpoints
// carry it: fragment vectors mean nothing under another plan.
uint64_t plan_fingerprint(const std::vector<Fragment>& fragments);

// The tensors a plan splits, for a person: "layer1.weight in 6 blocks,
// layer2.weight in 2 blocks"; "" when every tensor is whole.
std::string describe_splits(const ParamLayout& layout, const std::vector<Fragment>& fragments);

// Floats each of `syncer_shards` shards holds (shard_of()), indexed by shard.
std::vector<size_t> shard_parameters(const std::vector<Fragment>& fragments, int syncer_shards);

// Which tensors each merge rule takes, for a person to check before a run:
//   "weighted mean for transformer.wte.weight, transformer.wpe.weight (2 of 12
//    fragments); RDA for the other 44 tensors"
// A piece is averaged when it is of an embedding or an output head (a tensor
// named by model.avg), or a whole tensor beside one; when none is, it says
// so, since a model with embeddings then wants model.avg set. A split tensor
// counts once. Body tensors averaged with the heads are counted ("6 tensors
// with those beside them").
std::string describe_merge_rules(const ParamLayout& layout, const std::vector<Fragment>& fragments);

// Inner steps after adopting `version` of fragment `fragment` at which it falls
// due: H for every version but the first, (g + 1) * H / G for version 0, where
// the fragments go in G = ceil(P / stream) groups of `stream` consecutive ids
// (outer.stream; clamped to [1, P]) and g = fragment / stream is this one's:
// groups are staggered, about G/H fall due per step, and a group's fragments
// fall due together, to be pushed back to back.
uint64_t steps_until_due(int fragment, int fragments, int stream, int sync_every, uint64_t version);

// The syncer shard that owns fragment `fragment` when the syncer runs as
// `shards` processes (topology.h's syncer.shards, >= 1): the one that holds,
// merges, checkpoints and broadcasts it, and the one every push of it goes to.
// The one place this rule is written.
inline uint32_t shard_of(uint32_t fragment, int syncer_shards) {
  const auto shards = static_cast<uint32_t>(syncer_shards);
  return fragment % shards;
}

// Copies the fragment's pieces out of a full buffer into `out` (fragment.size floats).
void gather(const Fragment& fragment, std::span<const float> params, std::span<float> out);
// Copies `values` (fragment.size floats) into the fragment's pieces of a full buffer.
void scatter(const Fragment& fragment, std::span<const float> values, std::span<float> params);

}  // namespace atl
