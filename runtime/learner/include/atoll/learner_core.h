// LearnerCore: what every learner replica with parameters keeps, without CAF
// (docs/design.md section 5): the replica's values and, for every fragment p,
// base_p, the global copy it last adopted (the anchor of its pushes, and what a
// restarted syncer recovers from), beside a FragmentLedger that keeps its
// counts (version, progress since the base, pushes) and decides by the
// protocol's rules. It adopts welcomes and broadcasts, answers pulls and finds
// pushes due. Two kinds derive from it and differ only in where the replica lives:
//
//   ModelReplica     atoll's own Model on the Job's data, stepped by step() with
//                    atoll's AdamW (atoll/model_replica.h)
//   ExchangeReplica  trained in a Python loop: the values here are a host mirror
//                    of the user's tensors, current for the fragments read at
//                    this step boundary; what it adopts is handed out as
//                    updates (atoll/exchange_replica.h, atoll/replica_exchange.h)
//
// Threading: a ModelReplica's step() runs on the learner's compute thread;
// every other method runs on the learner's protocol thread between steps,
// never at the same time as step(). LearnerSession guarantees that by
// queueing messages while a step is running.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "atoll/fragment_ledger.h"
#include "atoll/fragments.h"
#include "atoll/learner_replica.h"
#include "atoll/messages.h"
#include "atoll/param_layout.h"
#include "atoll/topology.h"

namespace atl {

class LearnerCore : public LearnerReplica {
 public:
  LearnerCore(const LearnerCore&) = delete;  // its ledger reads its topology
  LearnerCore& operator=(const LearnerCore&) = delete;

  uint32_t id() const override { return id_; }
  uint64_t incarnation() const override { return incarnation_; }
  size_t fragment_count() const override { return fragments_.size(); }
  size_t parameter_count() const override { return params_.size(); }
  const Topology& topology() const { return topology_; }
  const LearnerSpec& spec() const { return spec_; }

  // Carries the learner's bases once it has some: a restarted syncer recovers
  // the newest global version from them. With a cluster token (joins from
  // another process) it carries join_proof() of it, never the token itself.
  // To syncer shard `shard` it carries only that shard's bases (fragments
  // p % syncer.shards == shard): with one syncer, every base.
  Register make_register(std::string_view cluster_token, uint32_t shard = 0) const override;
  void registering(uint32_t shard) override { ledger_.registering(shard); }

  // Adopts the global model. The first welcome sets every fragment's values,
  // version and base, and the peer's AdamW moments when there are some. A
  // later one (after the syncer restarted, or a resync) adopts only fragments
  // at a newer version, keeps the progress of those at the same version (and
  // lets one pushed before the last Register be pushed again: that push may
  // have been lost with the old link), and never goes back to an older version.
  // Fails, changing nothing, on a shape or decode error.
  Status welcome(const Welcome& welcome) override;

  // This learner's AdamW state for a restarted peer (bf16: 2 x 2 bytes per
  // parameter); to a shard of a syncer in shards, of that shard's fragments
  // only. Unavailable before the first welcome: it has none worth giving;
  // external: unless the optimizer's moments were read at this boundary.
  Result<Moments> moments_for(const MomentsPull& pull) const override;
  bool welcomed() const override { return ledger_.welcomed(); }
  // This fragment has a base: a syncer (shard) welcomed us with it. Pulls and
  // broadcasts of it are answered and adopted from then on.
  bool welcomed(uint32_t fragment) const override { return fragment < ledger_.size() && ledger_.track(fragment).welcomed; }

  // Books a finished step that took `step_seconds` of (emulated) device time.
  void finish_step(const StepResult& result, double step_seconds) override;

  // Push answering a pull: progress on the fragment since its base.
  // Fails for an unknown fragment, and with Unavailable before the first
  // welcome (a pull meant for an earlier incarnation, delayed or reordered).
  // REQUIRES: readable(pull.fragment).
  Result<Push> answer(const Pull& pull) override;
  bool push_in_flight(const Pull& pull) const override;
  bool has_progress(uint32_t fragment) const override { return unmerged_steps(fragment) > 0; }
  // Steps of progress on the fragment not yet merged, carried over versions included.
  uint64_t unmerged_steps(uint32_t fragment) const { return ledger_.track(fragment).steps; }

  // Decoupled: fragments that just fell due, pushed unasked once per version
  // (external: those readable now; the others when read at a later boundary).
  // dp and elastic_dp: the gradient of the last step, every step.
  std::vector<Push> due_pushes() override;

  // The values of a fragment as of this step boundary are here.
  bool readable(uint32_t fragment) const override = 0;
  // Fragments that fall due at the next boundary.
  std::set<uint32_t> due_soon() const;
  // The global values of a fragment as adopted (its base).
  std::span<const float> base(uint32_t fragment) const { return values_[fragment].base; }

  // Adopts a new global version of a fragment and resets the fragment's
  // progress: overwrite, blend with alpha, or (carry_progress) keep on top of
  // it the progress the version did not merge. Versions not newer than the
  // one held are ignored. Decoupled: a version that overtook the next one (a
  // reordered or delayed link) is held, not adopted, until the versions
  // between arrive, and then adopted in order; with more than
  // kMaxHeldBroadcasts held, or one held for a sync interval of steps, those
  // between were lost: the newest is adopted (values), or (a difference)
  // Unavailable says to resync. Progress carried for more than
  // FragmentLedger::kMaxCarriedIntervals sync intervals is dropped (overwrite): a learner
  // that is never merged must not build an unbounded push. Fails on a shape
  // or decode error, changing nothing; with Unavailable before the first
  // welcome (the welcome brings the version) and for a difference to a
  // version this learner does not hold (it missed a broadcast and must
  // register again to resync).
  // A repair (Broadcast::repair) is adopted at once, as a welcome's values.
  Status apply(const Broadcast& broadcast) override;
  static constexpr size_t kMaxHeldBroadcasts = 4;
  // Broadcasts held for a version that had not arrived yet, since the start.
  uint64_t broadcasts_held() const { return broadcasts_held_; }
  // Repairs adopted (versions it lost, sent again whole), since the start.
  uint64_t repairs_adopted() const { return repairs_adopted_; }

  Progress progress() const override;

  // The reject policy: see LearnerReplica::RejectAction.
  RejectAction on_reject(const Reject& reject, bool registered) override;

  // With the barrier option (and always in dp modes): true while a pushed
  // fragment's next version has not arrived; the learner must not step.
  bool blocked() const override;

  // Welcomes that offered an older version than the one held (and were not followed).
  uint64_t regressions_refused() const override { return ledger_.regressions_refused(); }
  uint64_t steps() const override { return ledger_.steps(); }
  uint64_t tokens() const { return ledger_.tokens(); }
  double loss_ema() const { return loss_ema_; }
  double step_seconds_ema() const { return ledger_.step_seconds_ema(); }
  uint64_t version(uint32_t fragment) const override { return ledger_.track(fragment).version; }
  const std::vector<Fragment>& fragments() const { return fragments_; }
  std::span<const float> parameters() const { return params_; }

 protected:
  // `parameters`: floats in the model; `initial_crc`: of the seed's
  // initialization, which a welcome may then leave out (0: not given);
  // `speed_label`, `batch_label`: as its Register tells the syncer (0: the topology's).
  LearnerCore(uint32_t id, uint64_t incarnation, const Topology& topology, LearnerSpec spec,
              std::vector<Fragment> fragments, size_t parameters, uint32_t initial_crc, double speed_label,
              uint32_t batch_label);

  // ---- what the kinds of replica provide
  virtual const ParamLayout& layout() const = 0;
  // The seed's initialization of every parameter, for fragments a welcome
  // leaves out (only offered to a learner whose Register gave initial_crc).
  virtual Result<std::vector<float>> initial_values() const = 0;
  // Its optimizer's state for a restarted peer; Unavailable when it has none to give now.
  virtual Result<OptimizerState> optimizer_state() const = 0;
  // A peer's optimizer state, from the first welcome.
  virtual Status take_optimizer_state(int64_t step, std::vector<float> m, std::vector<float> v) = 0;
  // The fragment's values here just became scale * values + offset (the
  // replica elsewhere, if any, takes the same step).
  virtual void adopted(uint32_t fragment, float scale, std::vector<float> offset) = 0;
  // dp modes: the gradient of the last step, pushed whole.
  virtual std::span<const float> gradient() const = 0;

  std::vector<float> params_;  // the replica's values (a mirror for an ExchangeReplica)

 private:
  // Fragment p's values beside its counts in the ledger (its pushes in
  // flight carry their values there).
  struct Values {
    std::vector<float> base;  // the global values of the version held
    // eager_updates: what a push is measured from, less base (empty: zero).
    // An eager adoption keeps a share of the progress on top of base; the
    // next push still sends that progress whole.
    std::vector<float> push_offset;
  };

  // Adopts `b`, the version after the one held (or, for an absolute one, any newer).
  Status adopt(const Broadcast& b);
  // Fragment p takes the global values of `version`. With carry_progress and
  // `may_carry`, the progress that version did not merge stays on top of
  // them: all of it when `merged_through` is empty (none of this learner's
  // progress since `since` was merged), else what followed its push through
  // that step (with eager_updates, its share of a merge of `merged_learners`).
  // Otherwise (or when that push is no longer remembered) the progress is
  // dropped, or blended with blend_alpha.
  void move_onto(uint32_t p, uint64_t version, std::vector<float> global, bool may_carry,
                 std::optional<uint64_t> merged_through, size_t merged_learners);
  // Fragment p, welcomed before, takes a newer `version` given whole (a
  // welcome's or a repair's; eager updates count every [[learners]] entry as
  // merged), keeping the progress the syncer did not merge:
  // `merged_through` is what it merged of this learner's in all
  // (FragmentValues::kUnknownMerged: unknown, the progress is dropped).
  void catch_up(uint32_t p, uint64_t version, std::vector<float> global, uint64_t merged_through);
  // Adopts the held broadcasts that now follow the version held, in order.
  Status adopt_held(uint32_t fragment);

  bool data_parallel() const { return topology().mode != Mode::kDecoupled; }
  Push make_push(uint32_t fragment, uint64_t round);

  uint32_t id_;
  uint64_t incarnation_;
  Topology topology_;
  LearnerSpec spec_;
  std::vector<Fragment> fragments_;
  FragmentLedger ledger_;  // reads topology_
  std::vector<Values> values_;  // by fragment
  // A syncer in shards: the peer's moments as each shard's welcome brought
  // its part, taken once every shard has welcomed (and only if each gave one).
  struct MomentParts {
    std::vector<bool> from;  // by shard; empty: none yet
    int64_t step = 0;
    std::vector<float> m, v;
  } moment_parts_;
  int64_t last_tokens_ = 0;
  double last_seconds_ = 0.0;
  double loss_ema_ = 0.0;
  uint32_t initial_crc_;
  double speed_label_;
  uint32_t batch_label_;

  // A reordered or delayed link.
  // By fragment: broadcasts that arrived ahead of the next version, by version.
  std::vector<std::map<uint64_t, Broadcast>> held_;
  // By fragment: the step count when the oldest held broadcast arrived.
  std::vector<uint64_t> held_since_;
  uint64_t broadcasts_held_ = 0;
  uint64_t repairs_adopted_ = 0;
};

}  // namespace atl
