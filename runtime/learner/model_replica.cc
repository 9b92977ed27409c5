#include "atoll/model_replica.h"

#include <algorithm>
#include <cassert>
#include <string>

#include "atoll/cpu_clock.h"

namespace atl {
namespace {

AdamWConfig inner_config(const Topology& t, uint32_t id, const LearnerSpec& spec) {
  AdamWConfig c = t.inner;
  if (c.total_steps == 0 && t.tokens > 0) {
    // Spread the cosine over this learner's expected share of the token
    // budget: with the fixed learners, and itself if it holds an open slot.
    const auto rate = [&](const LearnerSpec& l) { return l.speed * static_cast<double>(tokens_per_step(t, l)); };
    double total = id < t.learners.size() ? 0.0 : rate(spec);
    for (const LearnerSpec& l : t.learners) total += rate(l);
    const double steps = static_cast<double>(t.tokens) * rate(spec) / total / static_cast<double>(tokens_per_step(t, spec));
    c.total_steps = std::max<int64_t>(c.warmup_steps + 1, static_cast<int64_t>(steps));
  }
  return c;
}

}  // namespace

Result<std::unique_ptr<ModelReplica>> ModelReplica::create(uint32_t id, uint64_t incarnation,
                                                           std::shared_ptr<const Job> job,
                                                           std::optional<LearnerSpec> spec) {
  const Topology& t = job->topology();
  if (t.model.kind == ModelKind::kExternal)
    return Status::invalid_argument("model.kind = \"external\": atoll does not run this model; its learners are "
                                    "Python processes (atoll.Learner) that join the syncer");
  if (id >= learner_slots(t))
    return Status::invalid_argument("learner " + std::to_string(id) + " does not exist: the topology has " +
                                    std::to_string(learner_slots(t)) + " learner slots");
  auto model = make_model(t);
  if (!model.ok()) return model.status();
  auto fragments = plan_fragments((*model)->layout(), t);
  if (!fragments.ok()) return fragments.status();
  return std::unique_ptr<ModelReplica>(new ModelReplica(id, incarnation, std::move(job),
                                                        spec.value_or(default_spec(t, id)), std::move(*model),
                                                        std::move(*fragments)));
}

ModelReplica::ModelReplica(uint32_t id, uint64_t incarnation, std::shared_ptr<const Job> job, LearnerSpec spec,
                           std::unique_ptr<Model> model, std::vector<Fragment> fragments)
    : LearnerCore(id, incarnation, job->topology(), spec, std::move(fragments), model->layout().size(),
                  parameters_crc(initial_parameters(*model, job->topology())), spec.speed,
                  static_cast<uint32_t>(spec.batch_size)),
      job_(std::move(job)),
      model_(std::move(model)),
      stream_(job_->make_stream(id, incarnation)),
      adamw_(std::make_unique<AdamW>(model_->layout(), inner_config(job_->topology(), id, spec))),
      grads_(params_.size()) {}

LearnerReplica::StepResult ModelReplica::step() {
  assert(welcomed());
  const double start = thread_cpu_seconds();
  const Batch batch = stream_->next(spec().batch_size);
  StepResult r;
  r.loss = model_->forward_backward(params_, batch, grads_);
  if (topology().mode == Mode::kDecoupled) adamw_->update(params_, grads_);  // dp modes: the syncer steps
  r.tokens = batch.tokens;
  r.compute_seconds = thread_cpu_seconds() - start;
  return r;
}

Result<std::vector<float>> ModelReplica::initial_values() const { return initial_parameters(*model_, topology()); }

Result<OptimizerState> ModelReplica::optimizer_state() const {
  return OptimizerState{adamw_->step(), encode_payload(Codec::kBf16, 0, adamw_->first_moment()),
                        encode_payload(Codec::kBf16, 0, adamw_->second_moment())};
}

Status ModelReplica::take_optimizer_state(int64_t step, std::vector<float> m, std::vector<float> v) {
  return adamw_->load_state(step, m, v);
}

}  // namespace atl
