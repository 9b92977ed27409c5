// CountingReplica: a learner's replica without parameters, for the cluster
// simulator (atoll/simulation.h). It keeps what the protocol needs of a
// replica, each fragment's version and progress since (steps, tokens, step
// time), in a FragmentLedger that follows the same rules as LearnerCore's,
// and pushes a zero difference of the fragment's real size, so that the
// syncer it talks to merges real fragments.
//
// Not kept, as it has no values: bases (its Register carries none, so a
// restarted syncer cannot recover from it), a non-finite replica (never
// kRestart), and broadcasts that overtake one another (the simulator's links
// deliver in order).
#pragma once

#include <memory>
#include <vector>

#include "atoll/fragment_ledger.h"
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
  size_t fragment_count() const override { return ledger_.size(); }
  size_t parameter_count() const override { return model_->parameters; }
  Register make_register(std::string_view cluster_token, uint32_t shard) const override;
  void registering(uint32_t shard) override { ledger_.registering(shard); }
  Status welcome(const Welcome& welcome) override;
  bool welcomed() const override { return ledger_.welcomed(); }
  bool welcomed(uint32_t fragment) const override { return fragment < ledger_.size() && ledger_.track(fragment).welcomed; }
  Result<Moments> moments_for(const MomentsPull& pull) const override;
  void finish_step(const StepResult& result, double step_seconds) override;
  bool readable(uint32_t) const override { return true; }
  Result<Push> answer(const Pull& pull) override;
  bool push_in_flight(const Pull& pull) const override { return ledger_.push_in_flight(pull); }
  bool has_progress(uint32_t fragment) const override { return ledger_.track(fragment).steps > 0; }
  std::vector<Push> due_pushes() override;
  Status apply(const Broadcast& broadcast) override;
  Progress progress() const override { return ledger_.progress(id_, incarnation_, 0.0f); }
  RejectAction on_reject(const Reject& reject, bool registered) override { return ledger_.on_reject(reject, registered); }
  bool blocked() const override { return ledger_.blocked(); }
  uint64_t steps() const override { return ledger_.steps(); }
  uint64_t version(uint32_t fragment) const override { return ledger_.track(fragment).version; }
  uint64_t regressions_refused() const override { return ledger_.regressions_refused(); }

 private:
  Push make_push(uint32_t fragment, uint64_t round) {
    return ledger_.push(fragment, round, id_, incarnation_, model_->zero_deltas[fragment]);
  }
  // A version given whole (a welcome's or a repair's), on counts.
  void catch_up(uint32_t fragment, uint64_t version, uint64_t merged_through);

  uint32_t id_;
  uint64_t incarnation_;
  std::shared_ptr<const Model> model_;
  FragmentLedger ledger_;
};

}  // namespace atl
