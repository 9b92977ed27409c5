// LearnerCore: one learner's replica and bookkeeping, without CAF (docs/design.md section 5).
//
// A learner trains its own replica with AdamW and never waits for another
// learner. For every fragment p it keeps base_p, the global copy it last
// adopted (the anchor of its pushes, and what a restarted syncer recovers
// from), and its progress since: steps, tokens and step time.
//
// The replica is atoll's own (a Model on the Job's data, stepped by step()
// with atoll's AdamW), or one trained outside atoll (create_external(): a
// Python loop, atoll/replica_exchange.h). An external learner's parameters
// here are a host mirror of the user's tensors, current for the fragments
// read at this step boundary (read()); what it adopts is handed out as
// updates (take_updates()) for the training thread to apply, and pushes and
// moments come only from values read at this boundary.
//
// Threading: step() runs on the learner's compute thread; every other method
// runs on the learner actor between steps, never at the same time as step().
// The actor guarantees that by queueing messages while a step is running.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "atoll/adamw.h"
#include "atoll/data_source.h"
#include "atoll/fragments.h"
#include "atoll/job.h"
#include "atoll/learner_replica.h"
#include "atoll/messages.h"
#include "atoll/model.h"
#include "atoll/replica_exchange.h"

namespace atl {

class LearnerCore final : public LearnerReplica {
 public:
  // `spec`: its speed and batch size; default: default_spec(topology, id)
  // (a fixed learner's [[learners]] entry). A learner in an open slot brings
  // its own (atoll/topology.h).
  static Result<std::unique_ptr<LearnerCore>> create(uint32_t id, uint64_t incarnation,
                                                     std::shared_ptr<const Job> job,
                                                     std::optional<LearnerSpec> spec = std::nullopt);
  // A learner whose replica is trained outside atoll, with `layout` (the
  // run's, checked by the caller) and its own labels for the report.
  static Result<std::unique_ptr<LearnerCore>> create_external(uint32_t id, uint64_t incarnation,
                                                              const Topology& topology, const ParamLayout& layout,
                                                              double speed_label, uint32_t batch_label);

  uint32_t id() const override { return id_; }
  uint64_t incarnation() const override { return incarnation_; }
  size_t fragment_count() const override { return fragments_.size(); }
  size_t parameter_count() const override { return params_.size(); }
  const Topology& topology() const { return topology_; }
  const LearnerSpec& spec() const { return spec_; }
  bool external() const { return external_; }

  // Carries the learner's bases once it has some: a restarted syncer recovers
  // the newest global version from them. With a cluster token (joins from
  // another process) it carries join_proof() of it, never the token itself.
  // To syncer shard `shard` it carries only that shard's bases (fragments
  // p % syncer.shards == shard): with one syncer, every base.
  Register make_register(std::string_view cluster_token, uint32_t shard = 0) const override;

  // Adopts the global model. The first welcome sets every fragment's values,
  // version and base, and the peer's AdamW moments when there are some. A
  // later one (after the syncer restarted, or a resync) adopts only fragments
  // at a newer version, keeps the progress of those at the same version (and
  // lets them be pushed again), and never goes back to an older version.
  // Fails, changing nothing, on a shape or decode error.
  Status welcome(const Welcome& welcome) override;

  // This learner's AdamW state for a restarted peer (bf16: 2 x 2 bytes per
  // parameter). Unavailable before the first welcome: it has none worth
  // giving; external: unless the optimizer's moments were read at this boundary.
  Result<Moments> moments_for(const MomentsPull& pull) const override;
  bool welcomed() const override { return welcomed_; }
  // This fragment has a base: a syncer (shard) welcomed us with it. Pulls and
  // broadcasts of it are answered and adopted from then on.
  bool welcomed(uint32_t fragment) const override { return fragment < fragment_welcomed_.size() && fragment_welcomed_[fragment]; }

  // One inner step: a batch, forward, backward, and (decoupled) AdamW.
  // REQUIRES: welcomed(); called on the compute thread only.
  StepResult step();

  // Books a finished step that took `step_seconds` of (emulated) device time.
  void finish_step(const StepResult& result, double step_seconds) override;

  // Push answering a pull: progress on the fragment since its base.
  // Fails for an unknown fragment, and with Unavailable before the first
  // welcome (a pull meant for an earlier incarnation, delayed or reordered).
  // REQUIRES: readable(pull.fragment).
  Result<Push> answer(const Pull& pull) override;

  // Decoupled: fragments that just fell due, pushed unasked once per version
  // (external: those readable now; the others when read at a later boundary).
  // dp and elastic_dp: the gradient of the last step, every step.
  std::vector<Push> due_pushes() override;

  // ---- external replicas (create_external)
  // The values of a fragment as of this step boundary are here: always for
  // atoll's own replica, after read() for an external one.
  bool readable(uint32_t fragment) const override;
  // Takes the fragments and optimizer moments the training thread read at
  // this boundary (a ReplicaStep's). Fails, taking nothing, on a wrong size or
  // an unknown fragment.
  Status read(const std::vector<uint32_t>& fragments, const std::vector<std::vector<float>>& values,
              const std::optional<OptimizerMoments>& moments);
  // The boundary is over: nothing is readable until the next read().
  void end_boundary();
  // Fragments to read at the next boundary: those falling due by then.
  std::set<uint32_t> due_soon() const;
  // What was adopted since the last call, for the training thread to apply.
  std::vector<FragmentUpdate> take_updates();
  std::optional<OptimizerMoments> take_moments();
  // The global values of a fragment as adopted (its base).
  std::span<const float> base(uint32_t fragment) const { return tracks_[fragment].base; }

  // Adopts a new global version of a fragment and resets the fragment's
  // progress: overwrite, blend with alpha, or (carry_progress) keep on top of
  // it the progress the version did not merge. Versions not newer than the
  // one held are ignored. Decoupled: a version that overtook the next one (a
  // reordered or delayed link) is held, not adopted, until the versions
  // between arrive, and then adopted in order; with more than
  // kMaxHeldBroadcasts held, or one held for a sync interval of steps, those
  // between were lost: the newest is adopted (values), or (a difference)
  // Unavailable says to resync. Progress carried for more than
  // kMaxCarriedIntervals sync intervals is dropped (overwrite): a learner
  // that is never merged must not build an unbounded push. Fails on a shape
  // or decode error, changing nothing; with Unavailable before the first
  // welcome (the welcome brings the version) and for a difference to a
  // version this learner does not hold (it missed a broadcast and must
  // register again to resync).
  Status apply(const Broadcast& broadcast) override;
  static constexpr size_t kMaxHeldBroadcasts = 4;
  // Broadcasts held for a version that had not arrived yet, since the start.
  uint64_t broadcasts_held() const { return broadcasts_held_; }

  Progress progress() const override;

  // The reject policy: see LearnerReplica::RejectAction.
  RejectAction on_reject(const Reject& reject, bool registered) override;

  // With the barrier option (and always in dp modes): true while a pushed
  // fragment's next version has not arrived; the learner must not step.
  bool blocked() const override;

  // Welcomes that offered an older version than the one held (and were not followed).
  uint64_t regressions_refused() const override { return regressions_refused_; }
  uint64_t steps() const override { return steps_; }
  uint64_t tokens() const { return tokens_; }
  double loss_ema() const { return loss_ema_; }
  double step_seconds_ema() const { return step_ema_; }
  uint64_t version(uint32_t fragment) const override { return tracks_[fragment].version; }
  const std::vector<Fragment>& fragments() const { return fragments_; }
  std::span<const float> parameters() const { return params_; }

 private:
  struct Track {
    uint64_t version = 0;
    std::vector<float> base;
    uint64_t steps = 0, tokens = 0;
    double seconds = 0.0;
    bool pushed = false;   // pushed unasked (or answered) since adopting `version`
    // carry_progress: the fragment's values and counts at the last push (what
    // the syncer merges if it merges this learner).
    std::vector<float> at_push;
    uint64_t steps_at_push = 0, tokens_at_push = 0;
    double seconds_at_push = 0.0;
  };
  // Adopts `b`, the version after the one held (or, for an absolute one, any newer).
  Status adopt(const Broadcast& b);
  // Adopts the held broadcasts that now follow the version held, in order.
  Status adopt_held(uint32_t fragment);

  LearnerCore(uint32_t id, uint64_t incarnation, std::shared_ptr<const Job> job, LearnerSpec spec,
              std::unique_ptr<Model> model, std::vector<Fragment> fragments);
  LearnerCore(uint32_t id, uint64_t incarnation, const Topology& topology, const ParamLayout& layout,
              std::vector<Fragment> fragments);
  bool data_parallel() const { return topology().mode != Mode::kDecoupled; }
  const ParamLayout& layout() const;
  Push make_push(uint32_t fragment, uint64_t round);
  // External: the training thread's replica takes the same step as the mirror.
  void hand_out(uint32_t fragment, float scale, std::vector<float> offset);

  uint32_t id_;
  uint64_t incarnation_;
  Topology topology_;
  LearnerSpec spec_;
  std::shared_ptr<const Job> job_;   // null for an external replica
  std::unique_ptr<Model> model_;     // null for an external replica
  std::vector<Fragment> fragments_;
  std::unique_ptr<DataSource> stream_;  // null for an external replica
  std::unique_ptr<AdamW> adamw_;        // null for an external replica
  std::vector<float> params_, grads_;
  std::vector<Track> tracks_;
  bool welcomed_ = false;                // every fragment has a base (every syncer shard welcomed it)
  std::vector<bool> fragment_welcomed_;  // by fragment
  uint64_t regressions_refused_ = 0;
  uint64_t steps_ = 0, tokens_ = 0;
  int64_t last_tokens_ = 0;
  double last_seconds_ = 0.0;
  double loss_ema_ = 0.0, step_ema_ = 0.0;
  uint32_t initial_crc_;  // of the seed's initialization: a welcome may leave it out (0: not given)
  // Its speed and batch size as its Register tells the syncer (the report's
  // labels): its spec, or an external learner's own (0: the topology's).
  double speed_label_ = 0.0;
  uint32_t batch_label_ = 0;

  // External replicas.
  bool external_ = false;
  ParamLayout external_layout_;
  std::vector<bool> readable_;                 // by fragment, at this boundary
  std::optional<OptimizerMoments> moments_read_;  // at this boundary
  std::vector<FragmentUpdate> updates_;        // adopted, not yet taken
  std::optional<OptimizerMoments> moments_in_;   // a peer's, for the optimizer

  // A reordered or delayed link.
  // By fragment: broadcasts that arrived ahead of the next version, by version.
  std::vector<std::map<uint64_t, Broadcast>> held_;
  // By fragment: the step count when the oldest held broadcast arrived.
  std::vector<uint64_t> held_since_;
  // By fragment: the version held at the last stale refusals, and how many
  // came while it was held.
  struct StaleMark {
    std::optional<uint64_t> version;
    int refusals = 0;
  };
  std::vector<StaleMark> stale_;
  uint64_t broadcasts_held_ = 0;
};

}  // namespace atl
