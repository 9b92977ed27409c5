#include "atoll/nesterov.h"

#include <cassert>

namespace atl {

void nesterov_step(const NesterovConfig& c, std::span<float> theta, std::span<float> velocity,
                   std::span<const float> g) {
  assert(theta.size() == velocity.size() && theta.size() == g.size());
  const float lr = c.lr, mu = c.momentum;
  float* __restrict th = theta.data();
  float* __restrict v = velocity.data();
  const float* __restrict gr = g.data();
  for (size_t i = 0; i < theta.size(); ++i) {
    v[i] = mu * v[i] + gr[i];
    th[i] -= lr * (gr[i] + mu * v[i]);
  }
}

}  // namespace atl
