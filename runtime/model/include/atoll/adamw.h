// AdamW: the inner optimizer every learner runs on its own replica.
//
// Decoupled weight decay (Loshchilov & Hutter) as in PyTorch's AdamW:
//   p <- p - lr*wd*p                      (only tensors with decay = true)
//   m <- b1*m + (1-b1)*g ;  v <- b2*v + (1-b2)*g^2
//   p <- p - lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)      t = step + 1
// with lr from the schedule below. The moments are kept across broadcasts and
// can be copied to a restarted peer (a fresh one makes its first update huge).
//
// With `muon`, the body's matrices (TensorRole::kBody, rows and cols > 1)
// take Muon's step instead (atoll/muon.h), as Moonlight does:
//   m <- mu*m + g ;  p <- p - lr*wd*p - lr * muon_scale * NS5(g + mu*m)
// at the same scheduled lr; m is its momentum and v stays 0. Embeddings, the
// head, biases and norms keep AdamW.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "atoll/optimizer_config.h"
#include "atoll/param_layout.h"
#include "atoll/status.h"

namespace atl {

// The learning rate of 0-based step `step`.
float scheduled_lr(const AdamWConfig& config, int64_t step);

class AdamW {
 public:
  AdamW(const ParamLayout& layout, AdamWConfig config);

  // One update of `params` with `grads` at the scheduled rate of step(); then step()++.
  // REQUIRES: both spans have layout.size() floats.
  void update(std::span<float> params, std::span<const float> grads);

  int64_t step() const { return step_; }
  const AdamWConfig& config() const { return config_; }
  std::span<const float> first_moment() const { return m_; }
  std::span<const float> second_moment() const { return v_; }
  // Adopts another replica's state (same layout). Fails on a size mismatch or
  // non-finite moments, leaving this optimizer unchanged.
  Status load_state(int64_t step, std::span<const float> m, std::span<const float> v);

 private:
  struct Range {
    size_t begin, end;
    bool decay;
    int rows = 0, cols = 0;  // a matrix that takes Muon's step; 0: AdamW's
  };
  void muon_update(const Range& r, float lr, std::span<float> params, std::span<const float> grads);
  AdamWConfig config_;
  std::vector<Range> ranges_;  // consecutive tensors merged when they share `decay`
  std::vector<float> m_, v_;
  std::vector<float> direction_;  // Muon's scratch: the largest matrix
  int64_t step_ = 0;
};

}  // namespace atl
