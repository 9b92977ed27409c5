#include "atoll/transformer.h"

#include <cassert>
#include <cmath>

#include "atoll/rng.h"
#include "layers.h"

namespace atl {

using layers::Mat;
using layers::Vec;

struct Transformer::Workspace {
  struct Layer {
    Mat<float> x_in, ln1, qkv, probs, att, x_mid, ln2, fc, gelu;
    Vec<float> mean1, rstd1, mean2, rstd2;
  };
  std::vector<Layer> layers;
  Mat<float> x_out, lnf, logits, probs;
  Vec<float> meanf, rstdf;
  std::vector<int32_t> tokens, targets;
  int B = 0, T = 0;
  // backward scratch
  Mat<float> dx, d1, d2, dqkv, dfc;
};

Transformer::Transformer(TransformerConfig c) : config_(c), ws_(std::make_unique<Workspace>()) {
  assert(c.width % c.heads == 0);
  const int C = c.width;
  wte_ = layout_.add("wte", C, c.vocab, TensorRole::kEmbedding, true);
  wpe_ = layout_.add("wpe", C, c.context, TensorRole::kEmbedding, true);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "h" + std::to_string(l) + ".";
    Block b;
    b.ln1w = layout_.add(p + "ln1.w", C, 1, TensorRole::kBody, false);
    b.ln1b = layout_.add(p + "ln1.b", C, 1, TensorRole::kBody, false);
    b.qkvw = layout_.add(p + "attn.qkv.weight", 3 * C, C, TensorRole::kBody, true);
    b.qkvb = layout_.add(p + "attn.qkv.bias", 3 * C, 1, TensorRole::kBody, false);
    b.projw = layout_.add(p + "attn.proj.weight", C, C, TensorRole::kBody, true);
    b.projb = layout_.add(p + "attn.proj.bias", C, 1, TensorRole::kBody, false);
    b.ln2w = layout_.add(p + "ln2.w", C, 1, TensorRole::kBody, false);
    b.ln2b = layout_.add(p + "ln2.b", C, 1, TensorRole::kBody, false);
    b.fcw = layout_.add(p + "mlp.fc.weight", 4 * C, C, TensorRole::kBody, true);
    b.fcb = layout_.add(p + "mlp.fc.bias", 4 * C, 1, TensorRole::kBody, false);
    b.fcprojw = layout_.add(p + "mlp.proj.weight", C, 4 * C, TensorRole::kBody, true);
    b.fcprojb = layout_.add(p + "mlp.proj.bias", C, 1, TensorRole::kBody, false);
    blocks_.push_back(b);
  }
  lnfw_ = layout_.add("lnf.w", C, 1, TensorRole::kBody, false);
  lnfb_ = layout_.add("lnf.b", C, 1, TensorRole::kBody, false);
  head_ = layout_.add("head", c.vocab, C, TensorRole::kHead, true);
}

Transformer::~Transformer() = default;

std::string Transformer::describe() const {
  return "transformer " + std::to_string(config_.layers) + "x" + std::to_string(config_.width) + ", " +
         std::to_string(config_.heads) + " heads, context " + std::to_string(config_.context);
}

void Transformer::init(std::span<float> params, uint64_t seed) const {
  assert(params.size() == layout_.size());
  Rng rng(seed);
  // GPT-2: N(0, 0.02); projections into the residual stream scaled by 1/sqrt(2L).
  const double residual = 0.02 / std::sqrt(2.0 * config_.layers);
  for (const auto& t : layout_.tensors()) {
    auto v = layers::view_vec(params, t);
    if (t.name.ends_with(".w")) v.setOnes();          // layer norm gains
    else if (!t.decay) v.setZero();                   // biases, norm offsets
    else {
      const bool to_residual = t.name.ends_with("attn.proj.weight") || t.name.ends_with("mlp.proj.weight");
      const double sd = to_residual ? residual : 0.02;
      for (auto& x : v) x = static_cast<float>(sd * rng.normal());
    }
  }
}

double Transformer::forward(std::span<const float> params, std::span<const int32_t> tokens,
                            std::span<const int32_t> targets, int B, int T) {
  auto& ws = *ws_;
  const int C = config_.width, H = config_.heads, L = config_.layers;
  const Eigen::Index N = static_cast<Eigen::Index>(B) * T;
  ws.B = B;
  ws.T = T;
  ws.layers.resize(static_cast<size_t>(L));
  const auto P = [&](int i) { return layers::view(params, layout_.tensor(i)); };
  const auto V = [&](int i) { return layers::view_vec(params, layout_.tensor(i)); };
  Mat<float> x(C, N);
  layers::embedding_forward<float>(P(wte_), P(wpe_), tokens, T, x);
  for (int l = 0; l < L; ++l) {
    auto& a = ws.layers[static_cast<size_t>(l)];
    const Block& b = blocks_[static_cast<size_t>(l)];
    a.x_in = std::move(x);
    a.ln1.resize(C, N);
    a.mean1.resize(N);
    a.rstd1.resize(N);
    layers::layernorm_forward<float>(a.x_in, V(b.ln1w), V(b.ln1b), a.ln1, a.mean1, a.rstd1);
    a.qkv.resize(3 * C, N);
    layers::linear_forward<float>(P(b.qkvw), V(b.qkvb), a.ln1, a.qkv);
    a.att.resize(C, N);
    a.probs.resize(T, static_cast<Eigen::Index>(T) * B * H);
    layers::attention_forward<float>(a.qkv, B, T, H, a.att, a.probs);
    a.x_mid.resize(C, N);
    layers::linear_forward<float>(P(b.projw), V(b.projb), a.att, a.x_mid);
    a.x_mid += a.x_in;
    a.ln2.resize(C, N);
    a.mean2.resize(N);
    a.rstd2.resize(N);
    layers::layernorm_forward<float>(a.x_mid, V(b.ln2w), V(b.ln2b), a.ln2, a.mean2, a.rstd2);
    a.fc.resize(4 * C, N);
    layers::linear_forward<float>(P(b.fcw), V(b.fcb), a.ln2, a.fc);
    a.gelu.resize(4 * C, N);
    layers::gelu_forward<float>(a.fc, a.gelu);
    x.resize(C, N);
    layers::linear_forward<float>(P(b.fcprojw), V(b.fcprojb), a.gelu, x);
    x += a.x_mid;
  }
  ws.x_out = std::move(x);
  ws.lnf.resize(C, N);
  ws.meanf.resize(N);
  ws.rstdf.resize(N);
  layers::layernorm_forward<float>(ws.x_out, V(lnfw_), V(lnfb_), ws.lnf, ws.meanf, ws.rstdf);
  ws.logits.resize(config_.vocab, N);
  ws.logits.noalias() = P(head_) * ws.lnf;
  if (targets.empty()) return 0.0;
  ws.probs.resize(config_.vocab, N);
  return layers::softmax_xent_forward<float>(ws.logits, targets, ws.probs);
}

namespace {

// A batch of rows x (T+1) bytes as N = rows * T inputs and targets.
void split_rows(const Batch& batch, std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
  const int T = batch.y_cols - 1;
  tokens.resize(static_cast<size_t>(batch.rows) * static_cast<size_t>(T));
  targets.resize(tokens.size());
  for (int r = 0; r < batch.rows; ++r)
    for (int t = 0; t < T; ++t) {
      const size_t row = static_cast<size_t>(r) * static_cast<size_t>(batch.y_cols);
      tokens[static_cast<size_t>(r * T + t)] = batch.y[row + static_cast<size_t>(t)];
      targets[static_cast<size_t>(r * T + t)] = batch.y[row + static_cast<size_t>(t) + 1];
    }
}

}  // namespace

float Transformer::forward_backward(std::span<const float> params, const Batch& batch, std::span<float> grads) {
  assert(grads.size() == layout_.size() && batch.y_cols - 1 <= config_.context);
  auto& ws = *ws_;
  split_rows(batch, ws.tokens, ws.targets);
  const int B = batch.rows, T = batch.y_cols - 1, C = config_.width, H = config_.heads;
  const Eigen::Index N = static_cast<Eigen::Index>(B) * T;
  const double loss_sum = forward(params, ws.tokens, ws.targets, B, T);

  std::fill(grads.begin(), grads.end(), 0.0f);
  const auto P = [&](int i) { return layers::view(params, layout_.tensor(i)); };
  const auto V = [&](int i) { return layers::view_vec(params, layout_.tensor(i)); };
  const auto G = [&](int i) { return layers::view(grads, layout_.tensor(i)); };
  const auto GV = [&](int i) { return layers::view_vec(grads, layout_.tensor(i)); };

  Mat<float> dlogits(config_.vocab, N);
  layers::softmax_xent_backward<float>(ws.probs, ws.targets, 1.0f / static_cast<float>(N), dlogits);
  G(head_).noalias() += dlogits * ws.lnf.transpose();
  ws.d1.noalias() = P(head_).transpose() * dlogits;  // d lnf
  ws.dx.setZero(C, N);
  layers::layernorm_backward<float>(ws.x_out, V(lnfw_), ws.meanf, ws.rstdf, ws.d1, ws.dx, GV(lnfw_), GV(lnfb_));
  for (int l = config_.layers - 1; l >= 0; --l) {
    auto& a = ws.layers[static_cast<size_t>(l)];
    const Block& b = blocks_[static_cast<size_t>(l)];
    // MLP: x_out = x_mid + W2 gelu(W1 ln2(x_mid) + b1) + b2
    layers::linear_backward<float>(P(b.fcprojw), a.gelu, ws.dx, G(b.fcprojw), GV(b.fcprojb), &ws.dfc);
    layers::gelu_backward<float>(a.fc, ws.dfc, ws.dfc);
    layers::linear_backward<float>(P(b.fcw), a.ln2, ws.dfc, G(b.fcw), GV(b.fcb), &ws.d1);
    layers::layernorm_backward<float>(a.x_mid, V(b.ln2w), a.mean2, a.rstd2, ws.d1, ws.dx, GV(b.ln2w), GV(b.ln2b));
    // attention: x_mid = x_in + Wp att(Wqkv ln1(x_in) + bqkv) + bp
    layers::linear_backward<float>(P(b.projw), a.att, ws.dx, G(b.projw), GV(b.projb), &ws.d2);
    ws.dqkv.resize(3 * C, N);
    layers::attention_backward<float>(a.qkv, a.probs, ws.d2, B, T, H, ws.dqkv);
    layers::linear_backward<float>(P(b.qkvw), a.ln1, ws.dqkv, G(b.qkvw), GV(b.qkvb), &ws.d1);
    layers::layernorm_backward<float>(a.x_in, V(b.ln1w), a.mean1, a.rstd1, ws.d1, ws.dx, GV(b.ln1w), GV(b.ln1b));
  }
  layers::embedding_backward<float>(ws.dx, ws.tokens, T, G(wte_), G(wpe_));
  return static_cast<float>(loss_sum / static_cast<double>(N));
}

EvalSums Transformer::evaluate(std::span<const float> params, const Batch& batch) {
  auto& ws = *ws_;
  split_rows(batch, ws.tokens, ws.targets);
  EvalSums sums;
  sums.loss_sum = forward(params, ws.tokens, ws.targets, batch.rows, batch.y_cols - 1);
  sums.count = static_cast<int64_t>(ws.targets.size());
  for (Eigen::Index n = 0; n < ws.probs.cols(); ++n) {
    Eigen::Index arg;
    ws.probs.col(n).maxCoeff(&arg);
    if (arg == ws.targets[static_cast<size_t>(n)]) ++sums.correct;
  }
  return sums;
}

std::string Transformer::sample(std::span<const float> params, std::string_view prompt, int bytes,
                                double temperature, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> text(prompt.begin(), prompt.end());
  for (auto& c : text) c &= 0xff;
  if (text.empty()) text.push_back('\n');
  std::string out;
  for (int i = 0; i < bytes; ++i) {
    const size_t T = std::min(text.size(), static_cast<size_t>(config_.context));
    const std::span<const int32_t> window(text.data() + text.size() - T, T);
    forward(params, window, {}, 1, static_cast<int>(T));
    const auto logits = ws_->logits.col(static_cast<Eigen::Index>(T) - 1);
    const double mx = logits.maxCoeff();
    std::vector<double> p(static_cast<size_t>(config_.vocab));
    double sum = 0;
    for (size_t k = 0; k < p.size(); ++k) sum += p[k] = std::exp((logits(static_cast<Eigen::Index>(k)) - mx) / temperature);
    double u = rng.uniform() * sum;
    size_t next = 0;
    while (next + 1 < p.size() && (u -= p[next]) > 0) ++next;
    text.push_back(static_cast<int32_t>(next));
    out.push_back(static_cast<char>(next));
  }
  return out;
}

double Transformer::train_flops(int64_t rows) const {
  const double C = config_.width, T = config_.context, L = config_.layers, V = config_.vocab;
  const double tokens = static_cast<double>(rows) * T;
  // Matrix weights used once per token: qkv 3C^2, proj C^2, fc 4C^2, proj 4C^2 per layer; head V*C.
  const double matrix = L * 12 * C * C + V * C;
  // Attention: K^T Q and V P per layer, each T * C per token (half masked, counted whole).
  const double attention = L * 2 * T * C;
  // Forward 2 FLOPs per multiply-add; backward twice the forward.
  return 6.0 * tokens * (matrix + attention);
}

}  // namespace atl
