#include "atoll/external_model.h"

#include <algorithm>
#include <limits>

#include "atoll/module_layout.h"

namespace atl {
namespace {

class ExternalModel final : public Model {
 public:
  ExternalModel(ParamLayout layout, std::vector<float> initial, std::string description)
      : layout_(std::move(layout)), initial_(std::move(initial)), description_(std::move(description)) {}

  std::string describe() const override { return description_; }
  const ParamLayout& layout() const override { return layout_; }
  void init(std::span<float> params, uint64_t /*seed*/) const override {
    std::copy(initial_.begin(), initial_.end(), params.begin());
  }
  float forward_backward(std::span<const float>, const Batch&, std::span<float> grads) override {
    std::fill(grads.begin(), grads.end(), 0.0f);
    return std::numeric_limits<float>::quiet_NaN();
  }
  EvalSums evaluate(std::span<const float>, const Batch& batch) override {
    EvalSums e;
    e.loss_sum = std::numeric_limits<double>::quiet_NaN();
    e.count = std::max<int64_t>(1, batch.tokens);
    e.predicts = false;
    return e;
  }

 private:
  ParamLayout layout_;
  std::vector<float> initial_;
  std::string description_;
};

}  // namespace

Result<std::unique_ptr<Model>> make_external_model(const std::vector<NamedShape>& tensors, std::vector<float> values,
                                                   const std::vector<std::string>& avg, std::string description) {
  auto layout = module_layout(tensors, avg);
  if (!layout.ok()) return layout.status();
  if (values.size() != layout->size())
    return Status::invalid_argument("the tensors hold " + std::to_string(layout->size()) + " values, " +
                                    std::to_string(values.size()) + " were given");
  return std::unique_ptr<Model>(std::make_unique<ExternalModel>(std::move(*layout), std::move(values), std::move(description)));
}

}  // namespace atl
