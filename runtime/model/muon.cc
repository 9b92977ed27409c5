#include "atoll/muon.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cassert>
#include <cmath>

namespace atl {

void newton_schulz5(std::span<const float> m, int rows, int cols, std::span<float> out) {
  assert(m.size() == static_cast<size_t>(rows) * static_cast<size_t>(cols) && out.size() == m.size());
  using Mat = Eigen::MatrixXf;
  constexpr float a = 3.4445f, b = -4.7750f, c = 2.0315f;
  const Eigen::Map<const Mat> in(m.data(), rows, cols);
  // The Gram matrix over the shorter side: the same factor, cheaper.
  const bool tall = rows > cols;
  Mat x = tall ? Mat(in.transpose()) : Mat(in);
  x /= x.norm() + 1e-7f;
  Mat g, poly;
  for (int i = 0; i < 5; ++i) {
    g.noalias() = x * x.transpose();
    poly.noalias() = c * g * g;
    poly += b * g;
    x = a * x + poly * x;
  }
  Eigen::Map<Mat> result(out.data(), rows, cols);
  if (tall)
    result = x.transpose();
  else
    result = x;
}

float muon_scale(int rows, int cols) { return 0.2f * std::sqrt(static_cast<float>(std::max(rows, cols))); }

}  // namespace atl
