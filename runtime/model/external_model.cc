#include "atoll/external_model.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "atoll/model_file.h"
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

// A missing model file's error says how to write one, and where a relative path is read from.
Status explained(const Status& missing) {
  if (missing.code() != Status::Code::kNotFound) return missing;
  std::error_code ec;
  const std::string cwd = std::filesystem::current_path(ec).string();
  return Status::not_found(std::string(missing.message()) +
                           " (write it with atoll.save_model(module, path) from the module the learners train; a "
                           "relative model.path is read from the folder the syncer runs in, " + cwd + ")");
}

}  // namespace

Result<std::unique_ptr<Model>> load_external_model(const std::string& path, const std::vector<std::string>& avg) {
  auto file = load_model_file(path);
  if (!file.ok()) return explained(file.status());
  auto layout = module_layout(file->tensors, avg);
  if (!layout.ok()) return layout.status().with_context(path);
  std::string description = "external " + (file->description.empty() ? std::string("model") : file->description) +
                            " from " + path + " (" + std::to_string(layout->count()) +
                            " tensors, trained by Python learners)";
  return std::unique_ptr<Model>(
      std::make_unique<ExternalModel>(std::move(*layout), std::move(file->values), std::move(description)));
}

Result<ParamLayout> load_external_layout(const std::string& path, const std::vector<std::string>& avg) {
  auto shapes = load_model_shapes(path);
  if (!shapes.ok()) return explained(shapes.status());
  auto layout = module_layout(*shapes, avg);
  if (!layout.ok()) return layout.status().with_context(path);
  return layout;
}

}  // namespace atl
