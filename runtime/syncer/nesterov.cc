#include "atoll/nesterov.h"

#include <atomic>
#include <cassert>
#include <cfloat>
#include <cmath>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace atl {
namespace {

// One element's step, written once so that both passes of
// nesterov_step_if_finite() and nesterov_step() round alike.
struct Step {
  float lr, mu;
  void operator()(float& th, float& v, float g) const {
    v = mu * v + g;
    th -= lr * (g + mu * v);
  }
};

// One element's step of delayed Nesterov (nesterov.h), for every > 1.
struct DelayedStep {
  float lr, mu, inv_n;
  bool moves_velocity;
  void operator()(float& th, float& v, float& b, float g) const {
    if (!moves_velocity) {
      b += g;
      th -= lr * (g * inv_n);
      return;
    }
    v = mu * v + (b + g) * inv_n;
    b = 0.0f;
    th -= lr * (g * inv_n + mu * v);
  }
};

// Elements per task when a pass splits over threads (about 10 us of work).
constexpr size_t kGrain = size_t{1} << 16;

template <class Body>
void for_ranges(size_t n, const Body& body) {
  if (n < 2 * kGrain) return body(size_t{0}, n);
  tbb::parallel_for(tbb::blocked_range<size_t>(0, n, kGrain),
                    [&](const tbb::blocked_range<size_t>& r) { body(r.begin(), r.end()); });
}

bool finite(float x) { return std::fabs(x) <= FLT_MAX; }

}  // namespace

void nesterov_step(const NesterovConfig& c, std::span<float> theta, std::span<float> velocity,
                   std::span<const float> g) {
  assert(theta.size() == velocity.size() && theta.size() == g.size());
  const Step step{c.lr, c.momentum};
  float* __restrict th = theta.data();
  float* __restrict v = velocity.data();
  const float* __restrict gr = g.data();
  for (size_t i = 0; i < theta.size(); ++i) step(th[i], v[i], gr[i]);
}

bool nesterov_step_if_finite(const NesterovConfig& c, std::span<float> theta, std::span<float> velocity,
                             std::span<const float> g) {
  assert(theta.size() == velocity.size() && theta.size() == g.size());
  const Step step{c.lr, c.momentum};
  const float* th = theta.data();
  const float* v = velocity.data();
  const float* gr = g.data();
  std::atomic<bool> all_finite{true};
  for_ranges(theta.size(), [&](size_t b, size_t e) {
    unsigned bad = 0;  // an integer reduction vectorizes; a bool one does not
    for (size_t i = b; i < e; ++i) {
      float t = th[i], u = v[i];
      step(t, u, gr[i]);
      bad |= static_cast<unsigned>(!finite(t)) | static_cast<unsigned>(!finite(u));
    }
    if (bad != 0) all_finite.store(false, std::memory_order_relaxed);
  });
  if (!all_finite.load()) return false;
  for_ranges(theta.size(), [&](size_t b, size_t e) {
    nesterov_step(c, theta.subspan(b, e - b), velocity.subspan(b, e - b), g.subspan(b, e - b));
  });
  return true;
}

bool delayed_nesterov_step_if_finite(const NesterovConfig& c, uint64_t k, std::span<float> theta,
                                     std::span<float> velocity, std::span<float> pending,
                                     std::span<const float> g) {
  assert(c.every >= 1);
  if (c.every == 1) return nesterov_step_if_finite(c, theta, velocity, g);
  assert(theta.size() == velocity.size() && theta.size() == pending.size() && theta.size() == g.size());
  const auto n = static_cast<uint64_t>(c.every);
  const DelayedStep step{c.lr, c.momentum, 1.0f / static_cast<float>(n), (k + 1) % n == 0};
  std::atomic<bool> all_finite{true};
  for_ranges(theta.size(), [&](size_t b, size_t e) {
    unsigned bad = 0;
    for (size_t i = b; i < e; ++i) {
      float t = theta[i], u = velocity[i], s = pending[i];
      step(t, u, s, g[i]);
      bad |= static_cast<unsigned>(!finite(t)) | static_cast<unsigned>(!finite(u)) | static_cast<unsigned>(!finite(s));
    }
    if (bad != 0) all_finite.store(false, std::memory_order_relaxed);
  });
  if (!all_finite.load()) return false;
  for_ranges(theta.size(), [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) step(theta[i], velocity[i], pending[i], g[i]);
  });
  return true;
}

}  // namespace atl
