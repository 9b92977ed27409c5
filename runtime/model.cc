#include "atoll/model.h"

namespace atl {

EvalSums evaluate_all(Model& model, std::span<const float> params, const std::vector<Batch>& batches) {
  EvalSums total;
  for (const auto& b : batches) total += model.evaluate(params, b);
  return total;
}

}  // namespace atl
