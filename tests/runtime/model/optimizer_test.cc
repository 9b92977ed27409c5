// AdamW (inner), its schedule, and Nesterov and delayed Nesterov (outer)
// against values worked out by hand from the update rules in adamw.h and
// nesterov.h, and delayed Nesterov against Nesterov on the mean gradient.
#include <boost/test/unit_test.hpp>

#include <Eigen/Dense>
#include <cmath>
#include <vector>

#include "atoll/adamw.h"
#include "atoll/muon.h"
#include "atoll/nesterov.h"

namespace atl {
namespace {

// One decayed weight and one bias, so both branches of the update run.
ParamLayout two_scalars() {
  ParamLayout layout;
  layout.add("w", 1, 1, TensorRole::kBody, /*decay=*/true);
  layout.add("b", 1, 1, TensorRole::kBody, /*decay=*/false);
  return layout;
}

// Deterministic values in [-1, 1], of full rank as a matrix (a sine of i
// alone would make every matrix of rank 2).
std::vector<float> wavy(size_t n, float phase) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * static_cast<float>(i * i) + phase);
  return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optimizer_test)

// NS5 brings every singular value of a tall and of a wide matrix into about
// [0.7, 1.2] (the quintic's band), keeps the singular vectors (its product
// with the matrix is symmetric positive), and leaves a zero matrix zero.
BOOST_AUTO_TEST_CASE(newton_schulz_orthogonalizes_tall_and_wide_matrices) {
  for (const auto& [rows, cols] : {std::pair{12, 5}, std::pair{5, 12}, std::pair{7, 7}}) {
    const std::vector<float> m = wavy(static_cast<size_t>(rows * cols), 0.3f);
    std::vector<float> o(m.size());
    newton_schulz5(m, rows, cols, o);
    const Eigen::Map<const Eigen::MatrixXf> M(m.data(), rows, cols), O(o.data(), rows, cols);
    const Eigen::VectorXf s = Eigen::JacobiSVD<Eigen::MatrixXf>(O).singularValues();
    BOOST_CHECK_MESSAGE(s.minCoeff() > 0.6f && s.maxCoeff() < 1.3f,
                        rows << "x" << cols << ": singular values " << s.transpose());
    // O = U S' V^T for M = U S V^T: O^T M = V S' S V^T, symmetric and positive definite.
    const Eigen::MatrixXf p = O.transpose() * M;
    BOOST_CHECK_LE((p - p.transpose()).norm(), 1e-3f * p.norm());
    BOOST_CHECK_GT(Eigen::SelfAdjointEigenSolver<Eigen::MatrixXf>(p).eigenvalues().minCoeff(), -1e-4f);
  }
  std::vector<float> zero(6, 0.0f), out(6, 1.0f);
  newton_schulz5(zero, 2, 3, out);
  BOOST_CHECK(out == zero);
}

// With muon, a body matrix takes Muon's step and every other tensor AdamW's,
// bit for bit what AdamW alone gives them.
BOOST_AUTO_TEST_CASE(muon_steps_the_body_matrices_and_adamw_the_rest) {
  ParamLayout layout;
  layout.add("emb", 6, 3, TensorRole::kEmbedding, true);
  layout.add("w", 4, 3, TensorRole::kBody, true);
  layout.add("b", 4, 1, TensorRole::kBody, false);
  AdamWConfig c;
  c.lr = 0.01f;
  c.weight_decay = 0.1f;
  c.muon_momentum = 0.9f;
  AdamW adamw(layout, c);
  c.muon = true;
  AdamW muon(layout, c);
  std::vector<float> p0 = wavy(layout.size(), 0.0f), pa = p0, pm = p0;
  const std::vector<float> g1 = wavy(layout.size(), 1.0f), g2 = wavy(layout.size(), 2.0f);
  adamw.update(pa, g1);
  adamw.update(pa, g2);
  muon.update(pm, g1);
  muon.update(pm, g2);
  const TensorSpec& w = layout.tensor(1);
  for (size_t i = 0; i < layout.size(); ++i)
    if (i < w.offset || i >= w.offset + w.size()) BOOST_CHECK_EQUAL(pm[i], pa[i]);

  // By hand: m1 = g1, m2 = 0.9 g1 + g2; each step along NS5(g + 0.9 m).
  std::vector<float> expect(p0.begin() + w.offset, p0.begin() + w.offset + w.size());
  std::vector<float> m(w.size(), 0.0f), d(w.size());
  for (const auto* g : {&g1, &g2}) {
    for (size_t i = 0; i < w.size(); ++i) {
      m[i] = 0.9f * m[i] + (*g)[w.offset + i];
      d[i] = (*g)[w.offset + i] + 0.9f * m[i];
    }
    newton_schulz5(d, 4, 3, d);
    for (size_t i = 0; i < w.size(); ++i)
      expect[i] = expect[i] * (1.0f - 0.01f * 0.1f) - 0.01f * 0.2f * std::sqrt(4.0f) * d[i];
  }
  for (size_t i = 0; i < w.size(); ++i) BOOST_CHECK_CLOSE(pm[w.offset + i], expect[i], 1e-3);
  for (size_t i = 0; i < w.size(); ++i) BOOST_CHECK_EQUAL(muon.second_moment()[w.offset + i], 0.0f);
}

BOOST_AUTO_TEST_CASE(adamw_matches_hand_computed_steps) {
  AdamWConfig c;
  c.lr = 0.1f;
  c.beta1 = 0.9f;
  c.beta2 = 0.999f;
  c.eps = 1e-8f;
  c.weight_decay = 0.1f;
  const auto layout = two_scalars();
  AdamW opt(layout, c);
  std::vector<float> p = {1.0f, 2.0f};

  // Step 1, g = 0.5 for both:
  //   w: decay 1 - 0.1*0.1 -> 0.99; m = 0.05, v = 0.00025; m^ = 0.5, v^ = 0.25;
  //      0.99 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.890000002
  //   b: no decay; 2 - 0.1 * 1 = 1.9
  std::vector<float> g = {0.5f, 0.5f};
  opt.update(p, g);
  BOOST_CHECK_CLOSE(p[0], 0.890000002f, 1e-4);
  BOOST_CHECK_CLOSE(p[1], 1.9f, 1e-4);
  BOOST_CHECK_EQUAL(opt.step(), 1);

  // Step 2, g = -1 for w:
  //   decay: 0.890000002 * 0.99 = 0.881100002
  //   m = 0.9*0.05 - 0.1 = -0.055 ; m^ = -0.055 / 0.19 = -0.289473684
  //   v = 0.999*0.00025 + 0.001 = 0.00124975 ; v^ = 0.00124975 / 0.001999 = 0.625187594
  //   w = 0.881100002 + 0.1 * 0.289473684 / 0.790688... = 0.917710354
  g = {-1.0f, 0.0f};
  opt.update(p, g);
  BOOST_CHECK_CLOSE(p[0], 0.917710354f, 1e-4);
}

BOOST_AUTO_TEST_CASE(schedule_warms_up_then_follows_the_cosine) {
  AdamWConfig c;
  c.lr = 1.0f;
  c.warmup_steps = 10;
  c.total_steps = 110;
  c.min_lr_ratio = 0.1f;
  BOOST_CHECK_CLOSE(scheduled_lr(c, 0), 0.1f, 1e-4);   // 1/10 of the way up
  BOOST_CHECK_CLOSE(scheduled_lr(c, 9), 1.0f, 1e-4);   // top of warmup
  BOOST_CHECK_CLOSE(scheduled_lr(c, 10), 1.0f, 1e-4);  // cosine starts at the peak
  BOOST_CHECK_CLOSE(scheduled_lr(c, 60), 0.55f, 1e-4); // halfway: 0.1 + 0.9 * 0.5
  BOOST_CHECK_CLOSE(scheduled_lr(c, 110), 0.1f, 1e-4); // floor
  BOOST_CHECK_CLOSE(scheduled_lr(c, 500), 0.1f, 1e-4); // stays at the floor
  c.total_steps = 0;                                    // no decay
  BOOST_CHECK_CLOSE(scheduled_lr(c, 500), 1.0f, 1e-4);
}

BOOST_AUTO_TEST_CASE(adamw_state_can_be_handed_over_and_bad_state_is_refused) {
  const auto layout = two_scalars();
  AdamW a(layout, {}), b(layout, {});
  std::vector<float> pa = {1.0f, 1.0f}, pb = pa, g = {0.3f, -0.2f};
  a.update(pa, g);
  a.update(pa, g);
  BOOST_REQUIRE(b.load_state(a.step(), a.first_moment(), a.second_moment()).ok());
  pb = pa;
  a.update(pa, g);
  b.update(pb, g);
  BOOST_CHECK_EQUAL(pa[0], pb[0]);  // same state, same update, bit for bit
  BOOST_CHECK_EQUAL(pa[1], pb[1]);

  const std::vector<float> short_m = {0.0f};
  BOOST_CHECK(!b.load_state(1, short_m, short_m).ok());
  const std::vector<float> nan_m = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  const std::vector<float> ok_v = {0.0f, 0.0f};
  const Status s = b.load_state(1, nan_m, ok_v);
  BOOST_CHECK(!s.ok());
  BOOST_CHECK(s.message().find("non-finite") != std::string_view::npos);
  BOOST_CHECK_EQUAL(b.step(), 3);  // unchanged by the refused loads
}

BOOST_AUTO_TEST_CASE(nesterov_matches_hand_computed_steps) {
  const NesterovConfig c{0.5f, 0.9f};
  std::vector<float> theta = {1.0f}, v = {0.0f};
  // v = 0.2 ; theta = 1 - 0.5 * (0.2 + 0.9*0.2) = 0.81
  std::vector<float> g = {0.2f};
  nesterov_step(c, theta, v, g);
  BOOST_CHECK_CLOSE(v[0], 0.2f, 1e-4);
  BOOST_CHECK_CLOSE(theta[0], 0.81f, 1e-4);
  // v = 0.18 + 0.1 = 0.28 ; theta = 0.81 - 0.5 * (0.1 + 0.252) = 0.634
  g = {0.1f};
  nesterov_step(c, theta, v, g);
  BOOST_CHECK_CLOSE(v[0], 0.28f, 1e-4);
  BOOST_CHECK_CLOSE(theta[0], 0.634f, 1e-4);
}

BOOST_AUTO_TEST_CASE(nesterov_without_momentum_is_plain_sgd) {
  const NesterovConfig c{0.7f, 0.0f};
  std::vector<float> theta = {1.0f, -2.0f}, v = {0.0f, 0.0f}, g = {0.5f, -1.0f};
  nesterov_step(c, theta, v, g);
  BOOST_CHECK_CLOSE(theta[0], 1.0f - 0.35f, 1e-4);
  BOOST_CHECK_CLOSE(theta[1], -2.0f + 0.7f, 1e-4);
}

BOOST_AUTO_TEST_CASE(delayed_nesterov_matches_hand_computed_steps) {
  const NesterovConfig c{0.5f, 0.9f, 2};
  std::vector<float> theta = {1.0f}, v = {0.0f}, b = {0.0f};
  // step 0 (plain): b = 0.2 ; theta = 1 - 0.5 * 0.2/2 = 0.95 ; v stays 0
  std::vector<float> g = {0.2f};
  BOOST_REQUIRE(delayed_nesterov_step_if_finite(c, 0, theta, v, b, g));
  BOOST_CHECK_CLOSE(theta[0], 0.95f, 1e-4);
  BOOST_CHECK_EQUAL(v[0], 0.0f);
  BOOST_CHECK_CLOSE(b[0], 0.2f, 1e-4);
  // step 1 (velocity): v = 0 + (0.2 + 0.1)/2 = 0.15 ; theta = 0.95 - 0.5 * (0.1/2 + 0.9*0.15) = 0.8575 ; b = 0
  g = {0.1f};
  BOOST_REQUIRE(delayed_nesterov_step_if_finite(c, 1, theta, v, b, g));
  BOOST_CHECK_CLOSE(v[0], 0.15f, 1e-4);
  BOOST_CHECK_CLOSE(theta[0], 0.8575f, 1e-4);
  BOOST_CHECK_EQUAL(b[0], 0.0f);
}

BOOST_AUTO_TEST_CASE(delayed_nesterov_every_step_is_nesterov_bit_for_bit) {
  const NesterovConfig plain{0.7f, 0.6f, 1};
  std::vector<float> t1 = {1.0f, -0.3f, 2.5f}, v1(3, 0.0f);
  std::vector<float> t2 = t1, v2 = v1, b;  // unused with every = 1
  const std::vector<std::vector<float>> grads = {{0.3f, -0.1f, 0.7f}, {0.11f, 0.2f, -0.9f}, {-0.05f, 0.4f, 0.33f}};
  for (uint64_t k = 0; k < grads.size(); ++k) {
    BOOST_REQUIRE(nesterov_step_if_finite(plain, t1, v1, grads[k]));
    BOOST_REQUIRE(delayed_nesterov_step_if_finite(plain, k, t2, v2, b, grads[k]));
    for (size_t i = 0; i < t1.size(); ++i) {
      BOOST_CHECK_EQUAL(t1[i], t2[i]);
      BOOST_CHECK_EQUAL(v1[i], v2[i]);
    }
  }
}

BOOST_AUTO_TEST_CASE(delayed_nesterov_over_n_steps_is_one_nesterov_step_on_the_mean) {
  // The velocity sees only the mean of each group of N gradients, whatever their order.
  const int n = 4;
  const NesterovConfig delayed{0.6f, 0.8f, n}, plain{0.6f, 0.8f, 1};
  std::vector<float> t1 = {0.5f, -1.0f}, v1 = {0.1f, 0.0f}, t2 = t1, v2 = v1, b(2, 0.0f);
  const std::vector<std::vector<float>> grads = {
      {0.4f, -0.2f}, {0.0f, 0.3f}, {-0.1f, 0.1f}, {0.2f, 0.6f}, {0.3f, 0.3f}, {0.1f, -0.5f}, {0.0f, 0.2f}, {0.4f, 0.0f}};
  for (uint64_t k = 0; k < grads.size(); ++k) {
    BOOST_REQUIRE(delayed_nesterov_step_if_finite(delayed, k, t2, v2, b, grads[k]));
    if ((k + 1) % n != 0) continue;
    std::vector<float> mean(2, 0.0f);
    for (size_t j = k + 1 - n; j <= k; ++j)
      for (size_t i = 0; i < mean.size(); ++i) mean[i] += grads[j][i] / n;
    nesterov_step(plain, t1, v1, mean);
    for (size_t i = 0; i < t1.size(); ++i) {
      BOOST_CHECK_SMALL(t1[i] - t2[i], 1e-5f);
      BOOST_CHECK_SMALL(v1[i] - v2[i], 1e-5f);
    }
  }
}

BOOST_AUTO_TEST_CASE(delayed_nesterov_refuses_an_overflow_and_changes_nothing) {
  const NesterovConfig c{0.7f, 0.9f, 3};
  // The sum of the gradients overflows: on a plain step (k = 0) and on a velocity step (k = 2).
  std::vector<float> theta = {1.0f, 2.0f}, v = {0.5f, 0.5f}, b = {3e38f, 0.2f};
  const std::vector<float> huge = {3e38f, 1.0f};
  for (uint64_t k : {uint64_t{0}, uint64_t{2}}) {
    BOOST_CHECK(!delayed_nesterov_step_if_finite(c, k, theta, v, b, huge));
    BOOST_CHECK_EQUAL(theta[0], 1.0f);
    BOOST_CHECK_EQUAL(theta[1], 2.0f);
    BOOST_CHECK_EQUAL(v[0], 0.5f);
    BOOST_CHECK_EQUAL(b[0], 3e38f);
    BOOST_CHECK_EQUAL(b[1], 0.2f);
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
