// Mlp: a multi-layer perceptron classifier (ReLU hidden layers, softmax
// cross-entropy), the fast model for MNIST.
//
// Tensors: layer{i}.weight (out, in) and layer{i}.bias (out, 1). The last
// layer is the output head (merged by weighted mean); weights decay, biases don't.
#pragma once

#include <vector>

#include "atoll/model.h"

namespace atl {

struct MlpConfig {
  int inputs = 784;
  std::vector<int> hidden = {256};
  int classes = 10;
};

class Mlp final : public Model {
 public:
  explicit Mlp(MlpConfig config);
  ~Mlp() override;

  std::string describe() const override;
  const ParamLayout& layout() const override { return layout_; }
  void init(std::span<float> params, uint64_t seed) const override;
  float forward_backward(std::span<const float> params, const Batch& batch,
                         std::span<float> grads) override;
  EvalSums evaluate(std::span<const float> params, const Batch& batch) override;

 private:
  struct Scratch;
  // Runs the forward pass; leaves activations and probabilities in scratch_.
  double forward(std::span<const float> params, const Batch& batch);

  MlpConfig config_;
  ParamLayout layout_;
  std::vector<int> widths_;  // inputs, hidden..., classes
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace atl
