#include "atoll/model.h"

#include <algorithm>
#include <limits>

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

namespace atl {
namespace {

EvalSums with_batch_stats(EvalSums b) {
  const double mean = b.loss();
  b.batches = 1;
  b.batch_loss_sum = mean;
  b.batch_loss_sq_sum = mean * mean;
  return b;
}

}  // namespace

EvalSums evaluate_all(Model& model, std::span<const float> params, const std::vector<Batch>& batches) {
  EvalSums total;
  for (const auto& b : batches) total += with_batch_stats(model.evaluate(params, b));
  return total;
}

EvalSums evaluate_all(const ModelFactory& make, std::span<const float> params, const std::vector<Batch>& batches) {
  tbb::enumerable_thread_specific<std::unique_ptr<Model>> models([&] { return make(); });
  std::vector<EvalSums> each(batches.size());
  tbb::parallel_for(size_t{0}, batches.size(), [&](size_t i) {
    if (const auto& model = models.local()) {
      each[i] = with_batch_stats(model->evaluate(params, batches[i]));
    } else {
      each[i].loss_sum = std::numeric_limits<double>::quiet_NaN();
      each[i].count = std::max<int64_t>(1, batches[i].tokens);
    }
  });
  EvalSums total;
  for (const auto& e : each) total += e;
  return total;
}

}  // namespace atl
