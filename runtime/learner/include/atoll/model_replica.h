// ModelReplica: a learner whose replica is atoll's own Model, trained on the
// Job's data with atoll's AdamW (a LearnerCore; see atoll/learner_core.h).
#pragma once

#include <memory>
#include <optional>

#include "atoll/adamw.h"
#include "atoll/data_source.h"
#include "atoll/job.h"
#include "atoll/learner_core.h"
#include "atoll/model.h"

namespace atl {

class ModelReplica final : public LearnerCore {
 public:
  // `spec`: its speed and batch size; default: default_spec(topology, id)
  // (a fixed learner's [[learners]] entry). A learner in an open slot brings
  // its own (atoll/topology.h). Fails for a model atoll does not run, or an
  // id beyond the topology's slots.
  static Result<std::unique_ptr<ModelReplica>> create(uint32_t id, uint64_t incarnation,
                                                      std::shared_ptr<const Job> job,
                                                      std::optional<LearnerSpec> spec = std::nullopt);

  // One inner step: a batch, forward, backward, and (decoupled) AdamW.
  // REQUIRES: welcomed(); called on the compute thread only.
  StepResult step();

  // Its values are always those of the last step boundary.
  bool readable(uint32_t) const override { return true; }

 private:
  ModelReplica(uint32_t id, uint64_t incarnation, std::shared_ptr<const Job> job, LearnerSpec spec,
               std::unique_ptr<Model> model, std::vector<Fragment> fragments);
  const ParamLayout& layout() const override { return model_->layout(); }
  Result<std::vector<float>> initial_values() const override;
  Result<OptimizerState> optimizer_state() const override;
  Status take_optimizer_state(int64_t step, std::vector<float> m, std::vector<float> v) override;
  void adopted(uint32_t, float, std::vector<float>) override {}  // the values here are the replica
  std::span<const float> gradient() const override { return grads_; }

  std::shared_ptr<const Job> job_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<DataSource> stream_;
  std::unique_ptr<AdamW> adamw_;
  std::vector<float> grads_;
};

}  // namespace atl
