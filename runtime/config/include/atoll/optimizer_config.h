// The optimizers' settings, where a topology (config floor) can hold them:
// AdamW, the inner optimizer (atoll/adamw.h says what each does), and
// Nesterov, the outer one (atoll/nesterov.h).
#pragma once

#include <cstdint>

namespace atl {

struct AdamWConfig {
  float lr = 1e-3f;          // peak learning rate
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  // Schedule: linear warmup from lr/warmup_steps up to lr over warmup_steps,
  // then cosine decay to min_lr_ratio*lr at total_steps, constant after.
  // total_steps = 0 means no decay (constant lr after warmup).
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
  float min_lr_ratio = 0.1f;
  bool muon = false;           // the body's matrices take Muon's step (atoll/adamw.h)
  float muon_momentum = 0.95f;  // mu

  friend bool operator==(const AdamWConfig&, const AdamWConfig&) = default;
};

struct NesterovConfig {
  float lr = 0.7f;
  float momentum = 0.8f;
  int every = 1;  // N of delayed Nesterov: the velocity moves every N-th step (1: every step)

  friend bool operator==(const NesterovConfig&, const NesterovConfig&) = default;
};

}  // namespace atl
