// Finite-difference checks shared by the gradient suites (MLP, transformer).
#pragma once

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <functional>

#include "atoll/rng.h"
#include "model/layers.h"

namespace atl::testing {

inline layers::Mat<double> random_mat(Eigen::Index r, Eigen::Index c, Rng& rng) {
  layers::Mat<double> m(r, c);
  for (auto& x : m.reshaped()) x = rng.normal();
  return m;
}

// Checks d loss / d x[i] against (loss(x+h) - loss(x-h)) / 2h for every element.
inline void check_gradient(const char* what, layers::Mat<double>& x, const layers::Mat<double>& analytic,
                           const std::function<double()>& loss) {
  const double h = 1e-6;
  double worst = 0;
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const double keep = x.data()[i];
    x.data()[i] = keep + h;
    const double up = loss();
    x.data()[i] = keep - h;
    const double down = loss();
    x.data()[i] = keep;
    const double numeric = (up - down) / (2 * h);
    worst = std::max(worst, std::fabs(numeric - analytic.data()[i]) / std::max(1.0, std::fabs(numeric)));
  }
  BOOST_TEST_MESSAGE(what << ": worst relative error " << worst);
  BOOST_CHECK_MESSAGE(worst < 1e-6, what << ": worst relative error " << worst);
}

}  // namespace atl::testing
