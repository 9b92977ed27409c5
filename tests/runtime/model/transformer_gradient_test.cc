// The transformer's backward passes against finite differences: each new op
// in double precision (tight), the whole model in float along one random
// direction per tensor. Then: it learns a small committed text, and equal
// seeds give bit-identical training.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>

#include "atoll/adamw.h"
#include "atoll/data_source.h"
#include "atoll/transformer.h"
#include "model/layers.h"
#include "runtime/model/gradient_check.h"
#include "test_support.h"

namespace atl {
namespace {

using layers::Mat;
using layers::Vec;

using testing::check_gradient;
using testing::random_mat;
using testing::text_batch;

}  // namespace

BOOST_AUTO_TEST_SUITE(transformer_gradient_test)

BOOST_AUTO_TEST_CASE(layernorm_backward_matches_finite_differences) {
  Rng rng(1);
  Mat<double> x = random_mat(6, 4, rng), w = random_mat(6, 1, rng), b = random_mat(6, 1, rng);
  const Mat<double> R = random_mat(6, 4, rng);
  Vec<double> mean(4), rstd(4);
  const auto loss = [&] {
    Mat<double> y(6, 4);
    layers::layernorm_forward<double>(x, w.col(0), b.col(0), y, mean, rstd);
    return y.cwiseProduct(R).sum();
  };
  loss();
  Mat<double> dx = Mat<double>::Zero(6, 4);
  Vec<double> dw = Vec<double>::Zero(6), db = Vec<double>::Zero(6);
  layers::layernorm_backward<double>(x, w.col(0), mean, rstd, R, dx, dw, db);
  check_gradient("layernorm dx", x, dx, loss);
  check_gradient("layernorm dw", w, dw, loss);
  check_gradient("layernorm db", b, db, loss);
}

BOOST_AUTO_TEST_CASE(gelu_backward_matches_finite_differences) {
  Rng rng(2);
  Mat<double> x = random_mat(5, 3, rng) * 2.0;
  const Mat<double> R = random_mat(5, 3, rng);
  const auto loss = [&] {
    Mat<double> y(5, 3);
    layers::gelu_forward<double>(x, y);
    return y.cwiseProduct(R).sum();
  };
  Mat<double> dx(5, 3);
  layers::gelu_backward<double>(x, R, dx);
  check_gradient("gelu dx", x, dx, loss);
}

BOOST_AUTO_TEST_CASE(causal_attention_backward_matches_finite_differences) {
  Rng rng(3);
  const int B = 2, T = 5, H = 2, C = 4;
  Mat<double> qkv = random_mat(3 * C, B * T, rng);
  const Mat<double> R = random_mat(C, B * T, rng);
  Mat<double> probs(T, T * B * H);
  const auto loss = [&] {
    Mat<double> out(C, B * T);
    layers::attention_forward<double>(qkv, B, T, H, out, probs);
    return out.cwiseProduct(R).sum();
  };
  loss();
  // Causality: a query never weighs a later key, and its weights sum to 1.
  for (Eigen::Index col = 0; col < probs.cols(); ++col) {
    const Eigen::Index i = col % T;
    BOOST_CHECK_CLOSE(probs.col(col).head(i + 1).sum(), 1.0, 1e-9);
    BOOST_CHECK_EQUAL(probs.col(col).tail(T - i - 1).cwiseAbs().sum(), 0.0);
  }
  Mat<double> dqkv(3 * C, B * T);
  layers::attention_backward<double>(qkv, probs, R, B, T, H, dqkv);
  check_gradient("attention dqkv", qkv, dqkv, loss);
}

BOOST_AUTO_TEST_CASE(embedding_backward_matches_finite_differences) {
  Rng rng(4);
  const int T = 3;
  Mat<double> wte = random_mat(4, 6, rng), wpe = random_mat(4, T, rng);
  const std::vector<int32_t> tokens = {5, 0, 5, 2, 2, 1};
  const Mat<double> R = random_mat(4, 6, rng);
  const auto loss = [&] {
    Mat<double> x(4, 6);
    layers::embedding_forward<double>(wte, wpe, tokens, T, x);
    return x.cwiseProduct(R).sum();
  };
  Mat<double> dwte = Mat<double>::Zero(4, 6), dwpe = Mat<double>::Zero(4, T);
  layers::embedding_backward<double>(R, tokens, T, dwte, dwpe);
  check_gradient("embedding dwte", wte, dwte, loss);
  check_gradient("embedding dwpe", wpe, dwpe, loss);
}

BOOST_AUTO_TEST_CASE(whole_model_gradient_matches_directional_derivatives_for_every_tensor) {
  Transformer model(TransformerConfig{2, 16, 2, 8, 256});
  std::vector<float> params(model.layout().size()), grads(params.size());
  model.init(params, 5);
  Rng jitter(8);
  for (auto& p : params) p += 0.05f * static_cast<float>(jitter.normal());  // off the symmetric init (norm gains of 1)
  const Batch batch = text_batch("the quick brown fox jumps over the lazy dog; ", 3, 8, 0);
  model.forward_backward(params, batch, grads);
  const auto mean_loss = [&] { return model.evaluate(params, batch).loss(); };
  Rng rng(6);
  int bad = 0;
  for (const auto& t : model.layout().tensors()) {
    // One random unit direction within this tensor.
    std::vector<double> u(t.size());
    double norm = 0;
    for (auto& x : u) {
      x = rng.normal();
      norm += x * x;
    }
    norm = std::sqrt(norm);
    double analytic = 0;
    for (size_t i = 0; i < u.size(); ++i) analytic += grads[t.offset + i] * (u[i] /= norm);
    const double h = 1e-2;
    const auto shift = [&](double s) {
      for (size_t i = 0; i < u.size(); ++i) params[t.offset + i] += static_cast<float>(s * u[i]);
    };
    shift(h);
    const double up = mean_loss();
    shift(-2 * h);
    const double down = mean_loss();
    shift(h);
    const double numeric = (up - down) / (2 * h);
    const double err = std::fabs(numeric - analytic);
    if (err > 2e-3 + 3e-2 * std::fabs(numeric)) {
      ++bad;
      BOOST_TEST_MESSAGE(t.name << ": analytic " << analytic << " numeric " << numeric);
    }
  }
  BOOST_CHECK_EQUAL(bad, 0);
}

BOOST_AUTO_TEST_CASE(a_tiny_model_learns_the_fixture_text) {
  const std::string text = testing::sotu_excerpt();
  BOOST_REQUIRE_GT(text.size(), 5000u);
  Transformer model(TransformerConfig{2, 32, 2, 32, 256});
  std::vector<float> params(model.layout().size()), grads(params.size());
  model.init(params, 1);
  AdamWConfig c;
  c.lr = 3e-3f;
  AdamW opt(model.layout(), c);
  auto bytes = std::make_shared<std::vector<uint8_t>>(text.begin(), text.end());
  TextStream stream(bytes, 32, 7);
  float first = 0, last = 0;
  const int steps = 300;
  for (int s = 0; s < steps; ++s) {
    const float loss = model.forward_backward(params, stream.next(8), grads);
    opt.update(params, grads);
    if (s == 0) first = loss;
    if (s >= steps - 20) last += loss / 20;
  }
  BOOST_TEST_MESSAGE("loss " << first << " -> " << last << " nats per byte");
  BOOST_CHECK_CLOSE(first, std::log(256.0), 5.0);  // starts near uniform over bytes
  BOOST_CHECK_LT(last, 2.5);                      // learned: English letters and words
  const std::string sample = model.sample(params, "Fellow-Citizens", 40, 0.5, 3);
  BOOST_TEST_MESSAGE("sample: " << sample);
  BOOST_CHECK_EQUAL(sample.size(), 40u);
}

BOOST_AUTO_TEST_CASE(equal_seeds_give_bit_identical_training) {
  const std::string text = testing::sotu_excerpt();
  const auto run = [&] {
    Transformer model(TransformerConfig{2, 16, 2, 16, 256});
    std::vector<float> params(model.layout().size()), grads(params.size());
    model.init(params, 9);
    AdamW opt(model.layout(), {});
    auto bytes = std::make_shared<std::vector<uint8_t>>(text.begin(), text.end());
    TextStream stream(bytes, 16, 11);
    for (int s = 0; s < 10; ++s) {
      model.forward_backward(params, stream.next(4), grads);
      opt.update(params, grads);
    }
    return params;
  };
  BOOST_CHECK(run() == run());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
