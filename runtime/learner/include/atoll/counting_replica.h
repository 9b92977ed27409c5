// CountingReplica: a learner's replica without parameters, for the cluster
// simulator (atoll/simulation.h). It keeps what the protocol needs of a
// replica, each fragment's version and progress since (steps, tokens, step
// time), by LearnerCore's rules, and pushes a zero difference of the
// fragment's real size, so that the syncer it talks to merges real fragments.
//
// Not kept, as it has no values: bases (its Register carries none, so a
// restarted syncer cannot recover from it), a non-finite replica (never
// kRestart), and broadcasts that overtake one another (the simulator's links
// deliver in order).
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "atoll/learner_replica.h"
#include "atoll/topology.h"

namespace atl {

class CountingReplica final : public LearnerReplica {
 public:
  // What every counting replica of a run shares: made once.
  struct Model {
    Topology topology;
    size_t parameters = 0;
    uint64_t fingerprint = 0;   // of the run's layout, as a real learner's Register gives it
    uint32_t initial_crc = 0;   // of the seed's initialization: welcomes of version 0 carry no values
    std::vector<Payload> zero_deltas;  // by fragment: what every push carries
    std::vector<OptimizerState> moments;  // handed a peer, by syncer shard (its fragments' size)
  };

  CountingReplica(uint32_t id, uint64_t incarnation, std::shared_ptr<const Model> model);

  uint32_t id() const override { return id_; }
  uint64_t incarnation() const override { return incarnation_; }
  size_t fragment_count() const override { return tracks_.size(); }
  size_t parameter_count() const override { return model_->parameters; }
  Register make_register(std::string_view cluster_token, uint32_t shard) const override;
  Status welcome(const Welcome& welcome) override;
  bool welcomed() const override { return welcomed_; }
  bool welcomed(uint32_t fragment) const override { return fragment < tracks_.size() && tracks_[fragment].welcomed; }
  Result<Moments> moments_for(const MomentsPull& pull) const override;
  void finish_step(const StepResult& result, double step_seconds) override;
  bool readable(uint32_t) const override { return true; }
  Result<Push> answer(const Pull& pull) override;
  bool push_in_flight(const Pull& pull) const override {  // LearnerCore's rule
    return !pull.last && pull.fragment < tracks_.size() && tracks_[pull.fragment].unasked &&
           pull.version == tracks_[pull.fragment].version;
  }
  bool has_progress(uint32_t fragment) const override { return tracks_[fragment].steps > 0; }
  std::vector<Push> due_pushes() override;
  Status apply(const Broadcast& broadcast) override;
  Progress progress() const override;
  RejectAction on_reject(const Reject& reject, bool registered) override;
  bool blocked() const override;
  uint64_t steps() const override { return steps_; }
  uint64_t version(uint32_t fragment) const override { return tracks_[fragment].version; }
  uint64_t regressions_refused() const override { return regressions_refused_; }

 private:
  struct Track {  // one fragment, as LearnerCore counts it
    bool welcomed = false;
    uint64_t version = 0;
    uint64_t steps = 0, tokens = 0;
    double seconds = 0.0;
    bool pushed = false;
    bool unasked = false;     // LearnerCore's: that push went unasked
    uint64_t due_from = 0;  // LearnerCore's: due counts the learner's steps since
    uint64_t since = 0;  // progress over the learner's steps (since, now]
    struct InFlight {  // a push not yet known merged, and the counts when it went
      uint64_t through = 0, steps = 0, tokens = 0;
      double seconds = 0.0;
    };
    std::deque<InFlight> in_flight;  // oldest first, at most kMaxInFlight
    std::optional<uint64_t> stale_version;  // the version held at the last stale refusals
    int stale_refusals = 0;                 // how many came while it was held
  };
  Push make_push(uint32_t fragment, uint64_t round);
  void move_onto(Track& t, const Broadcast& b, bool may_carry);
  // LearnerCore::catch_up, on counts: a newer version given whole (a welcome's or a repair's).
  void catch_up(Track& t, uint32_t fragment, uint64_t version, uint64_t merged_through);

  uint32_t id_;
  uint64_t incarnation_;
  std::shared_ptr<const Model> model_;
  double speed_;  // its topology entry's: with outer.sync_by_speed, it scales H as LearnerCore's does
  std::vector<Track> tracks_;
  bool welcomed_ = false;
  uint64_t steps_ = 0, tokens_ = 0;
  double step_ema_ = 0.0;
  double credit_lag_ = 0.0;  // steps from a push to the broadcast that merged it, moving average
  uint64_t credits_ = 0;
  uint64_t regressions_refused_ = 0;
};

}  // namespace atl
