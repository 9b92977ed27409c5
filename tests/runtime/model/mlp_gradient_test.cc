// Backward passes against central finite differences: each layer op in double
// precision (tight), then the whole MLP in float (as it trains).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>

#include "atoll/mlp.h"
#include "model/layers.h"
#include "runtime/model/gradient_check.h"
#include "test_support.h"

namespace atl {
namespace {

using layers::Mat;
using layers::Vec;

using testing::check_gradient;
using testing::random_mat;

}  // namespace

BOOST_AUTO_TEST_SUITE(mlp_gradient_test)

BOOST_AUTO_TEST_CASE(linear_backward_matches_finite_differences) {
  Rng rng(1);
  Mat<double> W = random_mat(3, 4, rng), b = random_mat(3, 1, rng), x = random_mat(4, 2, rng);
  const Mat<double> R = random_mat(3, 2, rng);  // loss = sum(y .* R), so dy = R
  const auto loss = [&] {
    Mat<double> y(3, 2);
    layers::linear_forward<double>(W, b.col(0), x, y);
    return y.cwiseProduct(R).sum();
  };
  Mat<double> dW = Mat<double>::Zero(3, 4), dx;
  Vec<double> db = Vec<double>::Zero(3);
  layers::linear_backward<double>(W, x, R, dW, db, &dx);
  check_gradient("linear dW", W, dW, loss);
  check_gradient("linear db", b, db, loss);
  check_gradient("linear dx", x, dx, loss);
  // Parameter gradients accumulate: a second backward doubles them.
  layers::linear_backward<double>(W, x, R, dW, db, nullptr);
  Mat<double> dW1 = Mat<double>::Zero(3, 4);
  Vec<double> db1 = Vec<double>::Zero(3);
  layers::linear_backward<double>(W, x, R, dW1, db1, nullptr);
  BOOST_CHECK(dW.isApprox(2 * dW1));
}

BOOST_AUTO_TEST_CASE(relu_backward_matches_finite_differences) {
  Rng rng(2);
  Mat<double> x = random_mat(4, 3, rng);
  for (auto& v : x.reshaped()) v += v > 0 ? 0.1 : -0.1;  // keep away from the kink
  const Mat<double> R = random_mat(4, 3, rng);
  const auto loss = [&] {
    Mat<double> y(4, 3);
    layers::relu_forward<double>(x, y);
    return y.cwiseProduct(R).sum();
  };
  Mat<double> y(4, 3), dx(4, 3);
  layers::relu_forward<double>(x, y);
  layers::relu_backward<double>(y, R, dx);
  check_gradient("relu dx", x, dx, loss);
}

BOOST_AUTO_TEST_CASE(softmax_cross_entropy_backward_matches_finite_differences) {
  Rng rng(3);
  Mat<double> logits = random_mat(5, 3, rng) * 3.0;
  const std::vector<int32_t> labels = {4, 0, 2};
  Mat<double> probs(5, 3);
  const auto loss = [&] { return layers::softmax_xent_forward<double>(logits, labels, probs); };
  loss();
  BOOST_CHECK_CLOSE(probs.colwise().sum().sum(), 3.0, 1e-10);
  Mat<double> dlogits(5, 3);
  layers::softmax_xent_backward<double>(probs, labels, 1.0, dlogits);
  check_gradient("softmax-xent dlogits", logits, dlogits, loss);
}

BOOST_AUTO_TEST_CASE(whole_mlp_gradient_matches_finite_differences) {
  Mlp mlp(MlpConfig{6, {5, 4}, 3});
  std::vector<float> params(mlp.layout().size()), grads(params.size());
  mlp.init(params, 11);
  Batch batch;
  batch.rows = 4;
  batch.x_cols = 6;
  batch.y_cols = 1;
  batch.x = testing::random_vector(24, 12);
  batch.y = {0, 2, 1, 2};
  const float loss = mlp.forward_backward(params, batch, grads);
  BOOST_CHECK_GT(loss, 0.0f);

  const auto mean_loss = [&] { return mlp.evaluate(params, batch).loss(); };
  BOOST_CHECK_CLOSE(mean_loss(), double(loss), 1e-4);
  const float h = 1e-2f;
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const float keep = params[i];
    params[i] = keep + h;
    const double up = mean_loss();
    params[i] = keep - h;
    const double down = mean_loss();
    params[i] = keep;
    const double numeric = (up - down) / (2.0 * h);
    const double err = std::fabs(numeric - grads[i]);
    worst = std::max(worst, err);
    if (err > 2e-3 + 2e-2 * std::fabs(numeric)) {
      ++bad;
      BOOST_TEST_MESSAGE("param " << i << ": analytic " << grads[i] << " numeric " << numeric);
    }
  }
  BOOST_TEST_MESSAGE("whole mlp: worst absolute error " << worst << " over " << params.size() << " params");
  BOOST_CHECK_EQUAL(bad, 0);
}

BOOST_AUTO_TEST_CASE(training_is_bitwise_identical_wherever_the_buffers_sit) {
  // Equal seeds must give equal runs. Tensor views start at arbitrary
  // offsets, so no op may let memory alignment choose its summation order.
  Mlp mlp(MlpConfig{40, {64}, 10});
  const size_t n = mlp.layout().size();
  Batch batch;
  batch.rows = 16;
  batch.x_cols = 40;
  batch.y_cols = 1;
  batch.x = testing::random_vector(640, 3);
  for (int i = 0; i < 16; ++i) batch.y.push_back(i % 10);
  std::vector<std::vector<float>> results;
  for (size_t offset : {0, 1, 2, 3, 5, 8}) {  // floats past a (16-byte aligned) allocation
    std::vector<float> pbuf(n + 16), gbuf(n + 16);
    std::span<float> params(pbuf.data() + offset, n), grads(gbuf.data() + (offset * 3) % 16, n);
    mlp.init(params, 4);
    for (int step = 0; step < 5; ++step) {
      mlp.forward_backward(params, batch, grads);
      for (size_t i = 0; i < n; ++i) params[i] -= 0.1f * grads[i];
    }
    results.emplace_back(params.begin(), params.end());
  }
  for (size_t r = 1; r < results.size(); ++r) BOOST_CHECK(results[r] == results[0]);
}

BOOST_AUTO_TEST_CASE(same_seed_same_initialization) {
  Mlp mlp(MlpConfig{10, {8}, 3});
  std::vector<float> a(mlp.layout().size()), b(a.size()), c(a.size());
  mlp.init(a, 5);
  mlp.init(b, 5);
  mlp.init(c, 6);
  BOOST_CHECK(a == b);
  BOOST_CHECK(a != c);
  BOOST_CHECK_EQUAL(mlp.describe(), "mlp 10-8-3");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
