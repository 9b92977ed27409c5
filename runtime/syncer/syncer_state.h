// SyncerState: what SyncerCore and its round protocol share (internal).
//
// The core owns it; the protocol of the run's mode reads and changes it
// through a reference. Nothing here decides when a round happens.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "atoll/fragments.h"
#include "atoll/messages.h"
#include "atoll/model.h"
#include "atoll/syncer_core.h"
#include "atoll/topology.h"

namespace atl {

inline double seconds_between(SteadyTime a, SteadyTime b) {
  return std::chrono::duration<double>(b - a).count();
}

// A fragment's global copy: Theta_p, its outer momentum and its version.
struct GlobalFragment {
  std::vector<float> values, momentum;
  // Delayed Nesterov (outer.momentum_every > 1): the outer gradients summed
  // since the velocity last moved. Empty: zeros (sized at the first round).
  std::vector<float> pending;
  uint64_t version = 0;
  // What learners hold for `version` with int broadcast codecs (broadcasts
  // are differences to it). Empty when unknown (after a restore or a
  // recovery): the next broadcast then sends the values.
  std::vector<float> held;
  bool initial = true;  // values are the seed's initialization (learners can make them)
  // The newest broadcast: when it went out, and the learners connected then
  // that have not yet reported it adopted (SyncerStats::adopted_*).
  SteadyTime broadcast_at{};
  std::vector<bool> adopting;  // by learner
  uint32_t adopting_left = 0;
};

// A push that passed the core's checks, decoded: a learner's progress on a
// fragment since `base_version` (dp: the gradient of one step).
struct Answer {
  uint64_t base_version = 0;
  uint64_t steps = 0, tokens = 0;
  double seconds = 0.0;            // device time of those steps
  std::span<const float> delta;  // theta - base; dp: the gradient. In SyncerState::decoded: valid until the next push
};

struct SyncerState {
  Topology topology;
  std::unique_ptr<Model> model;  // the layout and the initialization; never trained here
  std::vector<Fragment> fragments;
  std::vector<GlobalFragment> global;  // by fragment
  std::vector<LearnerRecord> learners;  // by learner id
  SyncerStats stats;
  SteadyTime created;  // this syncer's start (recovery window)
  SteadyTime start;    // the run's start (time base of statistics)
  uint32_t fixed = 0;  // the topology's [[learners]]: slots below are fixed, the others open
  uint32_t merging = 0;  // learners whose last answers are being merged (Leaving::kMerging)
  uint32_t shard = 0;    // of topology.syncer.shards: this core owns the fragments p with shard_of(p) == shard
  // Room for the largest fragment, reused by every push and round so that a
  // round touches no fresh memory (on huge pages where the kernel allows):
  // `decoded` holds a push's payload until it is folded in, `work` a round's
  // merged gradient and then its broadcast's difference. Sized by reserve_scratch().
  std::vector<float> decoded, work;

  const ParamLayout& layout() const { return model->layout(); }
  // Sizes `decoded` and `work` for the largest fragment.
  void reserve_scratch();
  // The first n floats of a scratch vector. REQUIRES: n <= the largest fragment.
  static std::span<float> scratch(std::vector<float>& v, size_t n) { return {v.data(), n}; }
  double elapsed(SteadyTime now) const { return seconds_between(start, now); }
  bool open_slot(uint32_t m) const { return m >= fixed; }
  bool owns(uint32_t p) const { return shard_of(p, topology.syncer.shards) == shard; }

  // Connected and not leaving: pulled, counted as due, timed for the grace.
  bool present(uint32_t m) const {
    return learners[m].connected && learners[m].leaving == LearnerRecord::Leaving::kNo;
  }
  // Whether a round may wait for learner m (docs/design.md section 6): a
  // fixed member unless it failed and is not back (K = M must not hang on a
  // dead learner; one still joining counts), an open slot's member once it
  // is present and qualified. Leavers and non-members never.
  // (K capped at those that count is DecoupledRounds', kept per message.)
  bool counts_toward_quorum(uint32_t m) const;
  // The slowest present learner's moving-average step time (0: none yet).
  double slowest_step_seconds() const;

  // A Reject to `learner`, counted and noted.
  void refuse(uint32_t learner, RejectReason reason, uint32_t fragment, std::string detail, SyncerEffects& fx);

  // Broadcasts differences to `held` (int broadcast codecs, decoupled mode).
  bool delta_broadcasts() const;
  // A fragment's current version as a welcome gives it: the values learners hold.
  FragmentValues held_values(uint32_t p) const;
  // The broadcast of a fragment's new version (updates `held`), sent at `now`.
  Broadcast broadcast(uint32_t p, std::vector<uint32_t> merged, SteadyTime now);
  // The current version of fragment p again, whole, for `learner`, which lost
  // a broadcast (Broadcast::repair): as its welcome would give it.
  Broadcast repair(uint32_t p, uint32_t learner) const;
  // What was merged of `learner`'s progress on fragment p, as a push's
  // `through` (FragmentValues::kUnknownMerged where this syncer cannot know).
  uint64_t merged_through(uint32_t learner, uint32_t p) const;

  // Books that a push of `learner` was merged; the first one after it came
  // back is a recovery event ("first_merge").
  void note_merged(uint32_t learner, SteadyTime now, SyncerEffects& fx);
};

}  // namespace atl
