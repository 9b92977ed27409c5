#include "atoll/incarnation.h"

#include <chrono>
#include <random>

namespace atl {

uint64_t incarnation_base(uint64_t unix_ms, uint64_t noise) {
  constexpr uint64_t kNoiseBits = 20;
  return unix_ms << kNoiseBits | (noise & ((uint64_t{1} << kNoiseBits) - 1));
}

uint64_t incarnation_base() {
  std::random_device entropy;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  return incarnation_base(static_cast<uint64_t>(ms.count()), uint64_t{entropy()} << 32 | entropy());
}

}  // namespace atl
