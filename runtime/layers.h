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

}  // namespace atl::layers
