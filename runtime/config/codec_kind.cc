#include "atoll/codec_kind.h"

#include <string>

namespace atl {

bool is_quantized(Codec c) { return c == Codec::kInt8 || c == Codec::kInt4 || c == Codec::kInt2; }

const char* codec_name(Codec c) {
  switch (c) {
    case Codec::kFp32: return "fp32";
    case Codec::kBf16: return "bf16";
    case Codec::kInt8: return "int8";
    case Codec::kInt4: return "int4";
    case Codec::kInt2: return "int2";
  }
  return "unknown";
}

Result<Codec> parse_codec(std::string_view name) {
  for (Codec c : {Codec::kFp32, Codec::kBf16, Codec::kInt8, Codec::kInt4, Codec::kInt2})
    if (name == codec_name(c)) return c;
  return Status::invalid_argument("unknown codec '" + std::string(name) +
                                  "' (expected fp32, bf16, int8, int4 or int2)");
}

Status check_block(Codec codec, uint32_t block) {
  if (!is_quantized(codec)) return {};
  if (block < kMinBlock || block > kMaxBlock)
    return Status::invalid_argument("block size " + std::to_string(block) + " for " +
                                    codec_name(codec) + " is outside [" + std::to_string(kMinBlock) +
                                    ", " + std::to_string(kMaxBlock) + "]");
  return {};
}

}  // namespace atl
