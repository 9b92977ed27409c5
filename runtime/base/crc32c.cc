#include "atoll/crc32c.h"

#include <array>
#include <cstring>

namespace atl {
namespace {

constexpr uint32_t kPoly = 0x82f63b78;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kTable = make_table();

}  // namespace

uint32_t crc32c(std::span<const uint8_t> data, uint32_t crc) {
  uint32_t c = ~crc;
  const uint8_t* p = data.data();
  size_t n = data.size();
#if defined(__SSE4_2__)
  // The CPU's crc32 instruction computes exactly this polynomial, 8 bytes at a time.
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = __builtin_ia32_crc32di(c64, word);
  }
  c = static_cast<uint32_t>(c64);
#endif
  for (; n > 0; --n, ++p) c = kTable[(c ^ *p) & 0xff] ^ (c >> 8);
  return ~c;
}

}  // namespace atl
