// Rng: deterministic pseudo-random numbers (xoshiro256**, seeded by splitmix64).
//
// The same seed gives the same sequence on every compiler and platform, which
// the <random> distributions do not promise; runs with equal seeds must be
// identical (tests compare them bit for bit). Not thread-safe: one per owner.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>
#include <utility>

namespace atl {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& w : s_) w = splitmix64(seed);
  }

  // A seed for a child stream (a learner, a shard), independent of the parent's.
  static uint64_t derive(uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ (0x9e3779b97f4a7c15ULL * (stream + 1));
    return splitmix64(x);
  }

  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1), 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

  // Standard normal (Box-Muller; the second value is cached).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * std::numbers::pi * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * std::numbers::pi * u2);
  }

  // Uniform integer in [0, n), unbiased. REQUIRES: n > 0.
  uint64_t below(uint64_t n) {
    const uint64_t limit = -n % n;  // 2^64 mod n
    for (;;) {
      const uint64_t x = next_u64();
      const u128 m = static_cast<u128>(x) * n;
      if (static_cast<uint64_t>(m) >= limit) return static_cast<uint64_t>(m >> 64);
    }
  }

  // Exponential with the given mean (for Poisson arrivals).
  double exponential(double mean) { return -mean * std::log1p(-uniform()); }

  // Fisher-Yates.
  template <class T>
  void shuffle(std::span<T> xs) {
    for (size_t i = xs.size(); i > 1; --i) std::swap(xs[i - 1], xs[below(i)]);
  }

 private:
  __extension__ using u128 = unsigned __int128;  // GCC/Clang; pedantic-clean

  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  uint64_t s_[4];
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace atl
