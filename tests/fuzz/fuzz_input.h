// What every fuzz target shares: the input as bytes or text, and checksums
// made right, so that random bodies reach the decoder behind the checksum
// instead of stopping at it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "atoll/crc32c.h"

namespace atl::fuzz {

inline std::string_view text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A property every input must keep; abort() is what libFuzzer reports.
inline void expect(bool holds) {
  if (!holds) std::abort();
}

// `bytes` with its CRC32C of [from, to) written at `at` (little-endian), when it fits.
inline std::vector<uint8_t> with_crc(std::span<const uint8_t> bytes, size_t at, size_t from, size_t to) {
  std::vector<uint8_t> out(bytes.begin(), bytes.end());
  if (at + 4 > out.size() || from > to || to > out.size()) return out;
  const uint32_t crc = crc32c(std::span<const uint8_t>(out).subspan(from, to - from));
  std::memcpy(out.data() + at, &crc, 4);
  return out;
}

}  // namespace atl::fuzz
