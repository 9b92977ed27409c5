// CRC32C (Castagnoli), the checksum of checkpoint files.
#pragma once

#include <cstdint>
#include <span>

namespace atl {

// crc32c of `data`, continuing from `crc` (0 to start). crc32c("123456789") = 0xe3069283.
uint32_t crc32c(std::span<const uint8_t> data, uint32_t crc = 0);

}  // namespace atl
