// AdamW (inner), its schedule, and Nesterov (outer) against values worked out
// by hand from the update rules in adamw.h and nesterov.h.
#include <boost/test/unit_test.hpp>

#include <vector>

#include "atoll/adamw.h"
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

}  // namespace

BOOST_AUTO_TEST_SUITE(optimizer_test)

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

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
