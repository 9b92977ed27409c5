#include "atoll/link_shape.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace atl {

std::string LinkShape::to_string() const {
  if (!active()) return "unshaped";
  char buf[160];
  std::string out;
  if (rate_mbit > 0) {
    std::snprintf(buf, sizeof buf, "%g Mbit/s", rate_mbit);
    out += buf;
  }
  auto add = [&](const char* text) {
    if (!out.empty()) out += ", ";
    out += text;
  };
  if (delay_ms > 0) add((std::to_string(static_cast<int>(std::lround(delay_ms))) + " ms").c_str());
  if (jitter_ms > 0) {
    std::snprintf(buf, sizeof buf, "jitter %g ms", jitter_ms);
    add(buf);
  }
  if (loss > 0) {
    std::snprintf(buf, sizeof buf, "loss %g%%", 100 * loss);
    add(buf);
  }
  return out;
}

Result<LinkShape> parse_link_shape(std::string_view text) {
  LinkShape s;
  auto fail = [&](std::string_view part, const std::string& why) {
    return Status::invalid_argument("link '" + std::string(text) + "': '" + std::string(part) + "': " + why +
                                    " (expected e.g. rate=100mbit,delay=20ms,jitter=1ms,loss=0.001)");
  };
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view part = text.substr(start, end - start);
    start = end + 1;
    if (part.empty()) {
      if (end == text.size()) break;
      continue;
    }
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos) return fail(part, "not key=value");
    const std::string key(part.substr(0, eq)), value(part.substr(eq + 1));
    char* rest = nullptr;
    const double number = std::strtod(value.c_str(), &rest);
    const std::string unit = rest ? std::string(rest) : "";
    if (rest == value.c_str() || !std::isfinite(number) || number < 0) return fail(part, "not a number >= 0");
    if (key == "rate") {
      if (unit == "kbit") s.rate_mbit = number / 1000;
      else if (unit == "mbit" || unit.empty()) s.rate_mbit = number;
      else if (unit == "gbit") s.rate_mbit = number * 1000;
      else return fail(part, "unit '" + unit + "': use kbit, mbit or gbit");
    } else if (key == "delay" || key == "jitter") {
      double ms = 0;
      if (unit == "ms" || unit.empty()) ms = number;
      else if (unit == "s") ms = number * 1000;
      else if (unit == "us") ms = number / 1000;
      else return fail(part, "unit '" + unit + "': use us, ms or s");
      (key == "delay" ? s.delay_ms : s.jitter_ms) = ms;
    } else if (key == "loss") {
      if (!unit.empty() && unit != "%") return fail(part, "a share such as 0.001, or a percentage such as 0.1%");
      s.loss = unit == "%" ? number / 100 : number;
      if (s.loss >= 1) return fail(part, "the loss must be below 1 (100%)");
    } else {
      return fail(part, "unknown key (rate, delay, jitter, loss)");
    }
  }
  if (s.jitter_ms > s.delay_ms && s.jitter_ms > 0) return fail("jitter", "must not exceed the delay");
  return s;
}

double LinkQueue::arrival(double now, size_t bytes) {
  free_at_ = std::max(free_at_, now);
  if (shape_.rate_mbit > 0) free_at_ += static_cast<double>(bytes) * 8 / (shape_.rate_mbit * 1e6);
  double extra = shape_.delay_ms * 1e-3;
  if (shape_.jitter_ms > 0)
    extra += std::uniform_real_distribution<double>(-shape_.jitter_ms, shape_.jitter_ms)(rng_) * 1e-3;
  if (shape_.loss > 0) {
    const auto segments = static_cast<int64_t>((bytes + kSegmentBytes - 1) / kSegmentBytes);
    const int64_t lost = std::binomial_distribution<int64_t>(segments, shape_.loss)(rng_);
    extra += static_cast<double>(lost) * 2 * shape_.delay_ms * 1e-3;  // each: one more round trip
  }
  last_arrival_ = std::max(last_arrival_, free_at_ + std::max(0.0, extra));  // in order, as TCP delivers
  return last_arrival_;
}

}  // namespace atl
