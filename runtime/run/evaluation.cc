#include "atoll/evaluation.h"

#include <memory>

#include "atoll/transformer.h"

namespace atl {

Result<EvalSums> evaluate_held_out(const Topology& topology, const Job& job, std::span<const float> theta) {
  auto first = make_model(topology);
  if (!first.ok()) return first.status();
  if ((*first)->layout().size() != theta.size())
    return Status::invalid_argument("the model's layout changed during the run: " +
                                       std::to_string((*first)->layout().size()) + " parameters, " +
                                       std::to_string(theta.size()) + " given");
  const uint64_t fingerprint = (*first)->layout().fingerprint();
  return evaluate_all(
      [&]() -> std::unique_ptr<Model> {
        auto m = make_model(topology);
        if (m.ok() && (*m)->layout().fingerprint() == fingerprint) return std::move(*m);
        return nullptr;
      },
      theta, job.eval_batches());
}

std::string sample_text(Model& model, std::span<const float> theta, const EvaluationOptions& options, uint64_t seed) {
  auto* lm = dynamic_cast<Transformer*>(&model);
  if (!lm) return {};
  return lm->sample(theta, options.sample_prompt, options.sample_bytes, options.sample_temperature, seed);
}

}  // namespace atl
