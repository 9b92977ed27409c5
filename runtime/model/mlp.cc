#include "atoll/mlp.h"

#include <cassert>
#include <cmath>

#include "atoll/rng.h"
#include "layers.h"

namespace atl {

using layers::Mat;

struct Mlp::Scratch {
  std::vector<Mat<float>> hidden;  // hidden[i] = output of layer i, after ReLU
  Mat<float> logits, probs, delta, next_delta;
};

namespace {
// The batch's examples as an (inputs, rows) matrix, without a copy.
Eigen::Map<const Mat<float>> inputs_of(const Batch& batch) {
  return {batch.x.data(), batch.x_cols, batch.rows};
}
}  // namespace

Mlp::Mlp(MlpConfig config) : config_(std::move(config)), scratch_(std::make_unique<Scratch>()) {
  widths_.push_back(config_.inputs);
  for (int h : config_.hidden) widths_.push_back(h);
  widths_.push_back(config_.classes);
  const int n = static_cast<int>(widths_.size()) - 1;
  for (int i = 0; i < n; ++i) {
    const auto role = i == n - 1 ? TensorRole::kHead : TensorRole::kBody;
    const size_t u = static_cast<size_t>(i);
    layout_.add("layer" + std::to_string(i) + ".weight", widths_[u + 1], widths_[u], role, true);
    layout_.add("layer" + std::to_string(i) + ".bias", widths_[u + 1], 1, role, false);
  }
}

Mlp::~Mlp() = default;

std::string Mlp::describe() const {
  std::string s = "mlp ";
  for (size_t i = 0; i < widths_.size(); ++i) {
    if (i) s += '-';
    s += std::to_string(widths_[i]);
  }
  return s;
}

void Mlp::init(std::span<float> params, uint64_t seed) const {
  assert(params.size() == layout_.size());
  Rng rng(seed);
  for (const auto& t : layout_.tensors()) {
    auto v = layers::view_vec(params, t);
    if (!t.decay) {  // bias
      v.setZero();
      continue;
    }
    // He initialization for ReLU layers, 1/sqrt(fan_in) for the head.
    const double gain = t.role == TensorRole::kHead ? 1.0 : 2.0;
    const double stddev = std::sqrt(gain / t.cols);
    for (auto& x : v) x = static_cast<float>(stddev * rng.normal());
  }
}

double Mlp::forward(std::span<const float> params, const Batch& batch) {
  assert(batch.x_cols == config_.inputs && batch.rows > 0);
  auto& s = *scratch_;
  const int layers_n = static_cast<int>(widths_.size()) - 1;
  s.hidden.resize(static_cast<size_t>(layers_n - 1));
  for (int i = 0; i < layers_n; ++i) {
    const auto W = layers::view(params, layout_.tensor(2 * i));
    const auto b = layers::view_vec(params, layout_.tensor(2 * i + 1));
    const bool last = i + 1 == layers_n;
    Mat<float>& out = last ? s.logits : s.hidden[static_cast<size_t>(i)];
    out.resize(W.rows(), batch.rows);
    if (i == 0)
      layers::linear_forward<float>(W, b, inputs_of(batch), out);
    else
      layers::linear_forward<float>(W, b, s.hidden[static_cast<size_t>(i - 1)], out);
    if (!last) layers::relu_forward<float>(out, out);
  }
  s.probs.resize(s.logits.rows(), s.logits.cols());
  const std::span<const int32_t> labels(batch.y.data(), static_cast<size_t>(batch.rows));
  return layers::softmax_xent_forward<float>(s.logits, labels, s.probs);
}

float Mlp::forward_backward(std::span<const float> params, const Batch& batch,
                            std::span<float> grads) {
  assert(grads.size() == layout_.size());
  const double loss_sum = forward(params, batch);
  auto& s = *scratch_;
  std::fill(grads.begin(), grads.end(), 0.0f);
  const std::span<const int32_t> labels(batch.y.data(), static_cast<size_t>(batch.rows));
  s.delta.resize(s.probs.rows(), s.probs.cols());
  layers::softmax_xent_backward<float>(s.probs, labels, 1.0f / static_cast<float>(batch.rows), s.delta);
  for (int i = static_cast<int>(widths_.size()) - 2; i >= 0; --i) {
    const auto& wt = layout_.tensor(2 * i);
    const auto& bt = layout_.tensor(2 * i + 1);
    if (i == 0) {
      layers::linear_backward<float>(layers::view(params, wt), inputs_of(batch), s.delta,
                                     layers::view(grads, wt), layers::view_vec(grads, bt), nullptr);
      break;
    }
    const Mat<float>& x = s.hidden[static_cast<size_t>(i - 1)];
    layers::linear_backward<float>(layers::view(params, wt), x, s.delta, layers::view(grads, wt),
                                   layers::view_vec(grads, bt), &s.next_delta);
    layers::relu_backward<float>(x, s.next_delta, s.next_delta);
    std::swap(s.delta, s.next_delta);
  }
  return static_cast<float>(loss_sum / batch.rows);
}

EvalSums Mlp::evaluate(std::span<const float> params, const Batch& batch) {
  EvalSums sums;
  sums.loss_sum = forward(params, batch);
  sums.count = batch.rows;
  for (Eigen::Index j = 0; j < scratch_->probs.cols(); ++j) {
    Eigen::Index arg;
    scratch_->probs.col(j).maxCoeff(&arg);
    if (arg == batch.y[static_cast<size_t>(j)]) ++sums.correct;
  }
  return sums;
}

}  // namespace atl
