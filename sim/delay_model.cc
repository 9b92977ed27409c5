#include <cmath>
#include <cstdio>

#include "atoll/simulation.h"

namespace atl {

const char* delay_kind_name(DelayModel::Kind kind) {
  switch (kind) {
    case DelayModel::Kind::kFixed: return "fixed";
    case DelayModel::Kind::kExponential: return "exponential";
    case DelayModel::Kind::kExponentiatedWeibull: return "exponentiated_weibull";
  }
  return "?";
}

double DelayModel::quantile(double p) const {
  switch (kind) {
    case Kind::kFixed: return seconds;
    case Kind::kExponential: return -seconds * std::log1p(-p);
    case Kind::kExponentiatedWeibull:
      // Inverting F(x) = (1 - exp(-(x/scale)^shape))^exponent.
      return scale_seconds * std::pow(-std::log1p(-std::pow(p, 1.0 / exponent)), 1.0 / shape);
  }
  return seconds;
}

double DelayModel::sample(Rng& rng) const {
  double u = rng.uniform();
  while (u <= 0.0) u = rng.uniform();
  return quantile(u);
}

double DelayModel::mean() const {
  if (kind != Kind::kExponentiatedWeibull) return seconds;
  // E[X] = integral of the quantile over (0, 1): the midpoint rule on a grid
  // that is fine near 1, where a heavy tail puts its mass.
  constexpr int kSteps = 20000;
  double sum = 0.0;
  for (int i = 0; i < kSteps; ++i) {
    const double a = 1.0 - std::pow(1.0 - double(i) / kSteps, 3.0);
    const double b = 1.0 - std::pow(1.0 - double(i + 1) / kSteps, 3.0);
    sum += quantile(0.5 * (a + b)) * (b - a);
  }
  return sum;
}

std::string DelayModel::describe() const {
  char buf[160];
  switch (kind) {
    case Kind::kFixed: std::snprintf(buf, sizeof buf, "fixed %.3g s", seconds); break;
    case Kind::kExponential: std::snprintf(buf, sizeof buf, "exponential, mean %.3g s", seconds); break;
    case Kind::kExponentiatedWeibull:
      std::snprintf(buf, sizeof buf,
                    "exponentiated Weibull (scale %.3g s, shape %.3g, exponent %.3g; mean %.3g s, median %.3g s, "
                    "99th percentile %.3g s)",
                    scale_seconds, shape, exponent, mean(), quantile(0.5), quantile(0.99));
      break;
  }
  return buf;
}

}  // namespace atl
