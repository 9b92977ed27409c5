// The payload codecs by name: what a topology chooses (outer.push_codec,
// outer.broadcast_codec) and the wire carries. How each encodes is
// atoll/codec.h's.
#pragma once

#include <cstdint>
#include <string_view>

#include "atoll/status.h"

namespace atl {

// Values are part of the wire format: never renumber.
enum class Codec : uint8_t { kFp32 = 0, kBf16 = 1, kInt8 = 2, kInt4 = 3, kInt2 = 4 };

const char* codec_name(Codec codec);
Result<Codec> parse_codec(std::string_view name);  // "fp32", "bf16", "int8", "int4", "int2"
bool is_quantized(Codec codec);                    // int8, int4, int2: blocks with a step each

// Block sizes an int codec accepts; fp32 and bf16 ignore the block.
inline constexpr uint32_t kMinBlock = 8;
inline constexpr uint32_t kMaxBlock = 1u << 16;
// Checks `block` for `codec`, naming the problem.
Status check_block(Codec codec, uint32_t block);

}  // namespace atl
