// ExchangeReplica: a learner whose replica is trained outside atoll, in a
// Python loop (a LearnerCore; see atoll/learner_core.h). Its values here are
// a host mirror of the user's tensors, current for the fragments the loop
// read at this step boundary (read()); what it adopts is handed out as
// updates (take_updates()) for the training thread to apply, and pushes and
// moments come only from values read at this boundary. The loop talks to it
// through a ReplicaExchange (atoll/replica_exchange.h), which LearnerSession
// keeps in step.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "atoll/learner_core.h"
#include "atoll/replica_exchange.h"

namespace atl {

class ExchangeReplica final : public LearnerCore {
 public:
  // With `layout` (the run's, checked by the caller) and its own labels for
  // the report. Fails unless the run is decoupled without a barrier: the
  // user's steps never wait.
  static Result<std::unique_ptr<ExchangeReplica>> create(uint32_t id, uint64_t incarnation, const Topology& topology,
                                                         const ParamLayout& layout, double speed_label,
                                                         uint32_t batch_label);

  // Takes the fragments and optimizer moments the training thread read at
  // this boundary (a ReplicaStep's). Fails, taking nothing, on a wrong size or
  // an unknown fragment.
  Status read(const std::vector<uint32_t>& fragments, const std::vector<std::vector<float>>& values,
              const std::optional<OptimizerMoments>& moments);
  // The boundary is over: nothing is readable until the next read().
  void end_boundary();
  bool readable(uint32_t fragment) const override;
  // What was adopted since the last call, for the training thread to apply.
  std::vector<FragmentUpdate> take_updates();
  std::optional<OptimizerMoments> take_moments();

 private:
  ExchangeReplica(uint32_t id, uint64_t incarnation, const Topology& topology, const ParamLayout& layout,
                  std::vector<Fragment> fragments, double speed_label, uint32_t batch_label);
  const ParamLayout& layout() const override { return layout_; }
  Result<std::vector<float>> initial_values() const override;
  Result<OptimizerState> optimizer_state() const override;
  Status take_optimizer_state(int64_t step, std::vector<float> m, std::vector<float> v) override;
  void adopted(uint32_t fragment, float scale, std::vector<float> offset) override;
  std::span<const float> gradient() const override { return {}; }  // never in dp modes (create)

  ParamLayout layout_;
  std::vector<bool> readable_;                    // by fragment, at this boundary
  std::optional<OptimizerMoments> moments_read_;  // at this boundary
  std::vector<FragmentUpdate> updates_;           // adopted, not yet taken
  std::optional<OptimizerMoments> moments_in_;    // a peer's, for the optimizer
};

}  // namespace atl
