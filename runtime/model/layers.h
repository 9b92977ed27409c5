// Layer ops: each forward next to its backward, written plainly with Eigen.
//
// Internal header (not installed). Shapes use one column per example:
//   B examples, I inputs, O outputs; x is (I, B), y is (O, B).
// Backward functions ADD into parameter gradients (dW, db), so paths that
// share a parameter combine; zeroing is the caller's job. Input gradients
// (dx) are overwritten. Templated on the scalar so tests can check every
// backward against finite differences in double precision.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include <Eigen/Core>

#include "atoll/param_layout.h"

namespace atl::layers {

template <class S> using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
template <class S> using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;
template <class S> using In = Eigen::Ref<const Mat<S>>;
template <class S> using Out = Eigen::Ref<Mat<S>>;
template <class S> using VecIn = Eigen::Ref<const Vec<S>>;
template <class S> using VecOut = Eigen::Ref<Vec<S>>;

// A tensor of a flat parameter (or gradient) buffer as a column-major matrix.
template <class S>
Eigen::Map<Mat<S>> view(std::span<S> buffer, const TensorSpec& t) {
  return {buffer.data() + t.offset, t.rows, t.cols};
}
template <class S>
Eigen::Map<const Mat<S>> view(std::span<const S> buffer, const TensorSpec& t) {
  return {buffer.data() + t.offset, t.rows, t.cols};
}
template <class S>
Eigen::Map<Vec<S>> view_vec(std::span<S> buffer, const TensorSpec& t) {
  return {buffer.data() + t.offset, static_cast<Eigen::Index>(t.size())};
}
template <class S>
Eigen::Map<const Vec<S>> view_vec(std::span<const S> buffer, const TensorSpec& t) {
  return {buffer.data() + t.offset, static_cast<Eigen::Index>(t.size())};
}

// ---- linear: y = W x + b          W (O, I), b (O), x (I, B), y (O, B)
template <class S>
void linear_forward(In<S> W, VecIn<S> b, In<S> x, Out<S> y) {
  y.noalias() = W * x;
  y.colwise() += b;
}
// dW += dy x^T ; db += rowsum(dy) ; dx = W^T dy (skipped when dx is null)
template <class S>
void linear_backward(In<S> W, In<S> x, In<S> dy, Out<S> dW, VecOut<S> db, Mat<S>* dx) {
  dW.noalias() += dy * x.transpose();
  // Column by column, not dy.rowwise().sum(): Eigen peels unaligned leading
  // rows of that reduction into a path with another summation order, so the
  // result would depend on where db sits in memory and equal seeds would not
  // give equal runs.
  for (Eigen::Index j = 0; j < dy.cols(); ++j) db += dy.col(j);
  if (dx) dx->noalias() = W.transpose() * dy;
}

// ---- relu: y = max(x, 0)
template <class S>
void relu_forward(In<S> x, Out<S> y) {
  y = x.cwiseMax(S(0));
}
// dx = dy where y > 0 (in place on dy allowed)
template <class S>
void relu_backward(In<S> y, In<S> dy, Out<S> dx) {
  dx = (y.array() > S(0)).select(dy, S(0));
}

// ---- softmax cross-entropy over columns: logits (C, B), labels (B)
// Returns the summed loss over the B columns and writes the probabilities.
template <class S>
double softmax_xent_forward(In<S> logits, std::span<const int32_t> labels, Out<S> probs) {
  double loss = 0.0;
  for (Eigen::Index j = 0; j < logits.cols(); ++j) {
    const S mx = logits.col(j).maxCoeff();
    probs.col(j) = (logits.col(j).array() - mx).exp();
    const S sum = probs.col(j).sum();
    probs.col(j) /= sum;
    const auto label = static_cast<Eigen::Index>(labels[static_cast<size_t>(j)]);
    loss += static_cast<double>(std::log(sum) + mx - logits(label, j));
  }
  return loss;
}
// dlogits = scale * (probs - onehot(labels)); scale = 1/B for a mean loss
template <class S>
void softmax_xent_backward(In<S> probs, std::span<const int32_t> labels, S scale, Out<S> dlogits) {
  dlogits = probs * scale;
  for (Eigen::Index j = 0; j < probs.cols(); ++j)
    dlogits(static_cast<Eigen::Index>(labels[static_cast<size_t>(j)]), j) -= scale;
}

// ---- embedding: x[:, n] = wte[:, token_n] + wpe[:, n % T]
//      wte (C, V), wpe (C, T), x (C, N) with N = B * T, tokens N ids
template <class S>
void embedding_forward(In<S> wte, In<S> wpe, std::span<const int32_t> tokens, int T, Out<S> x) {
  for (Eigen::Index n = 0; n < x.cols(); ++n)
    x.col(n) = wte.col(tokens[static_cast<size_t>(n)]) + wpe.col(n % T);
}
// dwte[:, token_n] += dx[:, n] ; dwpe[:, n % T] += dx[:, n]
template <class S>
void embedding_backward(In<S> dx, std::span<const int32_t> tokens, int T, Out<S> dwte, Out<S> dwpe) {
  for (Eigen::Index n = 0; n < dx.cols(); ++n) {
    dwte.col(tokens[static_cast<size_t>(n)]) += dx.col(n);
    dwpe.col(n % T) += dx.col(n);
  }
}

// ---- layer norm over each column: y = (x - mean) * rstd * w + b
//      x, y (C, N); w, b (C); saves mean and rstd (N) for the backward
template <class S>
void layernorm_forward(In<S> x, VecIn<S> w, VecIn<S> b, Out<S> y, VecOut<S> mean, VecOut<S> rstd) {
  constexpr S kEps = S(1e-5);
  const auto c = static_cast<S>(x.rows());
  mean = x.colwise().sum().transpose() / c;
  for (Eigen::Index n = 0; n < x.cols(); ++n) {
    const S var = (x.col(n).array() - mean(n)).square().sum() / c;
    rstd(n) = S(1) / std::sqrt(var + kEps);
    y.col(n) = ((x.col(n).array() - mean(n)) * rstd(n) * w.array() + b.array()).matrix();
  }
}
// dw += sum_n dy * xhat ; db += sum_n dy ;
// dx += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * w
// (dx accumulates: the residual stream adds several gradients into it)
template <class S>
void layernorm_backward(In<S> x, VecIn<S> w, VecIn<S> mean, VecIn<S> rstd, In<S> dy, Out<S> dx, VecOut<S> dw,
                        VecOut<S> db) {
  const auto c = static_cast<S>(x.rows());
  for (Eigen::Index n = 0; n < x.cols(); ++n) {
    const auto xhat = ((x.col(n).array() - mean(n)) * rstd(n)).eval();
    const auto dxhat = (dy.col(n).array() * w.array()).eval();
    dw.array() += dy.col(n).array() * xhat;
    db += dy.col(n);
    const S m1 = dxhat.sum() / c, m2 = (dxhat * xhat).sum() / c;
    dx.col(n).array() += rstd(n) * (dxhat - m1 - xhat * m2);
  }
}

// ---- gelu (tanh approximation): y = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi)
template <class S>
void gelu_forward(In<S> x, Out<S> y) {
  const S k = S(0.7978845608028654);
  y = (S(0.5) * x.array() * (S(1) + (k * (x.array() + S(0.044715) * x.array().cube())).tanh())).matrix();
}
// dx = dy * gelu'(x) (overwrites)
template <class S>
void gelu_backward(In<S> x, In<S> dy, Out<S> dx) {
  const S k = S(0.7978845608028654);
  const auto u = (k * (x.array() + S(0.044715) * x.array().cube())).eval();
  const auto t = u.tanh().eval();
  const auto du = (k * (S(1) + S(3 * 0.044715) * x.array().square())).eval();
  dx = (dy.array() * (S(0.5) * (S(1) + t) + S(0.5) * x.array() * (S(1) - t.square()) * du)).matrix();
}

// ---- causal multi-head self-attention
//      qkv (3C, N): rows [0, C) queries, [C, 2C) keys, [2C, 3C) values; N = B * T
//      out (C, N); probs (T, T * B * H): the softmax of each (batch, head),
//      column i of a (T, T) block = query i's weights over keys j <= i
template <class S>
void attention_forward(In<S> qkv, int B, int T, int H, Out<S> out, Out<S> probs) {
  const Eigen::Index C = qkv.rows() / 3, hs = C / H;
  const S scale = S(1) / std::sqrt(static_cast<S>(hs));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const auto q = qkv.block(h * hs, b * T, hs, T);
      const auto k = qkv.block(C + h * hs, b * T, hs, T);
      const auto v = qkv.block(2 * C + h * hs, b * T, hs, T);
      auto p = probs.block(0, (static_cast<Eigen::Index>(b) * H + h) * T, T, T);
      p.noalias() = k.transpose() * q;  // (keys, queries)
      for (Eigen::Index i = 0; i < T; ++i) {
        auto col = p.col(i).head(i + 1);
        const S mx = col.maxCoeff() * scale;
        col = ((col.array() * scale) - mx).exp().matrix();
        col /= col.sum();
        p.col(i).tail(T - i - 1).setZero();  // keys after the query: masked
      }
      out.block(h * hs, b * T, hs, T).noalias() = v * p;
    }
}
// dqkv (overwritten) from dout, using qkv and the saved probs
template <class S>
void attention_backward(In<S> qkv, In<S> probs, In<S> dout, int B, int T, int H, Out<S> dqkv) {
  const Eigen::Index C = qkv.rows() / 3, hs = C / H;
  const S scale = S(1) / std::sqrt(static_cast<S>(hs));
  Mat<S> dp(T, T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const auto q = qkv.block(h * hs, b * T, hs, T);
      const auto k = qkv.block(C + h * hs, b * T, hs, T);
      const auto v = qkv.block(2 * C + h * hs, b * T, hs, T);
      const auto p = probs.block(0, (static_cast<Eigen::Index>(b) * H + h) * T, T, T);
      const auto dO = dout.block(h * hs, b * T, hs, T);
      dqkv.block(2 * C + h * hs, b * T, hs, T).noalias() = dO * p.transpose();  // dV
      dp.noalias() = v.transpose() * dO;                                        // dP (keys, queries)
      // softmax backward per query column, then the 1/sqrt(hs) of the scores
      for (Eigen::Index i = 0; i < T; ++i) {
        auto col = dp.col(i).head(i + 1);
        const S dot = (col.array() * p.col(i).head(i + 1).array()).sum();
        col = (p.col(i).head(i + 1).array() * (col.array() - dot) * scale).matrix();
        dp.col(i).tail(T - i - 1).setZero();
      }
      dqkv.block(h * hs, b * T, hs, T).noalias() = k * dp;                    // dQ
      dqkv.block(C + h * hs, b * T, hs, T).noalias() = q * dp.transpose();    // dK
    }
}

}  // namespace atl::layers
