#include "atoll/adamw.h"

#include "atoll/muon.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numbers>
#include <string>

namespace atl {

float scheduled_lr(const AdamWConfig& c, int64_t step) {
  if (c.warmup_steps > 0 && step < c.warmup_steps)
    return c.lr * static_cast<float>(step + 1) / static_cast<float>(c.warmup_steps);
  if (c.total_steps <= c.warmup_steps) return c.lr;
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) /
                                            static_cast<double>(c.total_steps - c.warmup_steps));
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return static_cast<float>(c.lr * (c.min_lr_ratio + (1.0 - c.min_lr_ratio) * cosine));
}

AdamW::AdamW(const ParamLayout& layout, AdamWConfig config)
    : config_(config), m_(layout.size(), 0.0f), v_(layout.size(), 0.0f) {
  for (const auto& t : layout.tensors()) {
    if (config_.muon && t.role == TensorRole::kBody && t.rows > 1 && t.cols > 1 && t.dims.size() <= 2) {
      ranges_.push_back({t.offset, t.offset + t.size(), t.decay, t.rows, t.cols});
      direction_.resize(std::max(direction_.size(), t.size()));
    } else if (!ranges_.empty() && ranges_.back().rows == 0 && ranges_.back().decay == t.decay &&
               ranges_.back().end == t.offset) {
      ranges_.back().end += t.size();
    } else {
      ranges_.push_back({t.offset, t.offset + t.size(), t.decay});
    }
  }
}

void AdamW::update(std::span<float> params, std::span<const float> grads) {
  assert(params.size() == m_.size() && grads.size() == m_.size());
  const float lr = scheduled_lr(config_, step_);
  const float b1 = config_.beta1, b2 = config_.beta2, eps = config_.eps;
  const double t = static_cast<double>(step_ + 1);
  const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b1), t)));
  const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b2), t)));
  float* __restrict p = params.data();
  const float* __restrict g = grads.data();
  float* __restrict m = m_.data();
  float* __restrict v = v_.data();
  for (const auto& r : ranges_) {
    if (r.rows > 0) {
      muon_update(r, lr, params, grads);
      continue;
    }
    const float shrink = r.decay ? 1.0f - lr * config_.weight_decay : 1.0f;
    for (size_t i = r.begin; i < r.end; ++i) {
      m[i] = b1 * m[i] + (1.0f - b1) * g[i];
      v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
      p[i] = p[i] * shrink - lr * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
    }
  }
  ++step_;
}

void AdamW::muon_update(const Range& r, float lr, std::span<float> params, std::span<const float> grads) {
  const float mu = config_.muon_momentum;
  const size_t n = r.end - r.begin;
  float* __restrict p = params.data() + r.begin;
  const float* __restrict g = grads.data() + r.begin;
  float* __restrict m = m_.data() + r.begin;
  float* __restrict d = direction_.data();
  for (size_t i = 0; i < n; ++i) {
    m[i] = mu * m[i] + g[i];
    d[i] = g[i] + mu * m[i];  // Nesterov
  }
  const std::span<float> direction(d, n);
  newton_schulz5(direction, r.rows, r.cols, direction);
  const float shrink = r.decay ? 1.0f - lr * config_.weight_decay : 1.0f;
  const float step = lr * muon_scale(r.rows, r.cols);
  for (size_t i = 0; i < n; ++i) p[i] = p[i] * shrink - step * d[i];
}

Status AdamW::load_state(int64_t step, std::span<const float> m, std::span<const float> v) {
  if (m.size() != m_.size() || v.size() != v_.size())
    return Status::invalid_argument("optimizer state has " + std::to_string(m.size()) + "/" +
                                    std::to_string(v.size()) + " moments, expected " +
                                    std::to_string(m_.size()));
  if (step < 0) return Status::invalid_argument("optimizer state has a negative step");
  for (size_t i = 0; i < m.size(); ++i)
    if (!std::isfinite(m[i]) || !std::isfinite(v[i]) || v[i] < 0.0f)
      return Status::invalid_argument("optimizer state has a non-finite moment at " +
                                      std::to_string(i));
  m_.assign(m.begin(), m.end());
  v_.assign(v.begin(), v.end());
  step_ = step;
  return {};
}

}  // namespace atl
