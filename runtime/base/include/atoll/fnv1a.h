// Fnv1a: the 64-bit FNV-1a hash, for fingerprints that must be the same on
// every machine and across versions (a model's layout, a fragment plan).
// Not for anything an adversary chooses: it is no cryptographic hash.
#pragma once

#include <cstddef>
#include <cstdint>

namespace atl {

struct Fnv1a {
  uint64_t h = 0xcbf29ce484222325ULL;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  }
  // Its bytes in this machine's order: every machine atoll runs on is little-endian.
  template <class T>
  void value(T x) { bytes(&x, sizeof x); }
};

}  // namespace atl
