// Model: what the runtime needs from a trainable model.
//
// A model owns its layout and its scratch memory (activations), never its
// parameters: those are flat buffers owned by a learner or the syncer and
// passed in as spans. A Model object is used by one thread at a time; each
// learner builds its own. A service embedding atoll can bring its own model by
// implementing this interface.
#pragma once

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numbers>
#include <span>
#include <string>
#include <vector>

#include "atoll/batch.h"
#include "atoll/param_layout.h"

namespace atl {

// Sums over evaluated examples; add them up across batches, divide at the end.
struct EvalSums {
  double loss_sum = 0.0;   // natural-log cross-entropy summed over predictions
  int64_t correct = 0;     // argmax hits
  int64_t count = 0;       // predictions: examples (classifier) or bytes (LM)
  // Batch means of the loss, summed and squared (evaluate_all fills them):
  // the batch is the unit of the standard error, because the windows of one
  // batch are neighbours in the text and not independent of each other.
  int64_t batches = 0;
  double batch_loss_sum = 0.0, batch_loss_sq_sum = 0.0;
  bool predicts = true;    // false: the model gives its loss only, so accuracy() is NaN

  EvalSums& operator+=(const EvalSums& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    predicts = predicts && o.predicts;
    count += o.count;
    batches += o.batches;
    batch_loss_sum += o.batch_loss_sum;
    batch_loss_sq_sum += o.batch_loss_sq_sum;
    return *this;
  }
  double loss() const { return count ? loss_sum / static_cast<double>(count) : 0.0; }
  double accuracy() const {
    if (!predicts) return std::numeric_limits<double>::quiet_NaN();
    return count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0;
  }
  double bits_per_byte() const { return loss() / std::numbers::ln2; }
  // Standard error of loss() (nats), from the spread of the batch means; 0
  // with fewer than two batches.
  double loss_stderr() const {
    if (batches < 2) return 0.0;
    const double n = static_cast<double>(batches), mean = batch_loss_sum / n;
    const double var = std::max(0.0, (batch_loss_sq_sum / n - mean * mean) * n / (n - 1));
    return std::sqrt(var / n);
  }
};

class Model {
 public:
  virtual ~Model() = default;

  // Human-readable description, e.g. "mlp 784-256-10".
  virtual std::string describe() const = 0;
  virtual const ParamLayout& layout() const = 0;

  // Writes a fresh initialization into params (layout().size() floats);
  // the same seed gives the same values.
  virtual void init(std::span<float> params, uint64_t seed) const = 0;

  // Forward and backward pass on `batch`. Overwrites `grads` with the gradient
  // of the mean loss over the batch and returns that mean loss.
  virtual float forward_backward(std::span<const float> params, const Batch& batch,
                                 std::span<float> grads) = 0;

  // Forward pass only, for evaluation.
  virtual EvalSums evaluate(std::span<const float> params, const Batch& batch) = 0;
};

// Evaluates `params` on every batch, with batch statistics.
EvalSums evaluate_all(Model& model, std::span<const float> params, const std::vector<Batch>& batches);

// The same on every core: each thread evaluates with its own model from
// `make`. Sums are added in batch order, so the result does not depend on
// the number of threads. A thread whose `make` returns null (a model file
// gone or changed mid-run) counts its batches as NaN loss: the result says
// so instead of the process ending.
using ModelFactory = std::function<std::unique_ptr<Model>()>;
EvalSums evaluate_all(const ModelFactory& make, std::span<const float> params, const std::vector<Batch>& batches);

}  // namespace atl
