// Payload codecs: how a fragment's float vector travels on the wire.
//
//   fp32  4 bytes per value, exact
//   bf16  2 bytes per value, round to nearest even; relative error <= 2^-8
//   int8, int4, int2: symmetric absmax quantization per block of `block`
//         values. A block stores one fp32 step s = absmax / qmax (qmax = 127,
//         7, 1) and each value as round(x / s) in [-qmax, qmax];
//         error <= s / 2 = absmax / (2 qmax) per value.
//
// Encoded bytes: [fp32 step per block, little-endian][codes packed back to
// back, (code + qmax) as unsigned bits, lowest bits first]; fp32 and bf16 have
// no steps. Decoding checks everything it reads (size, steps, codes, finite
// results) and returns an error instead of producing garbage: a payload comes
// from another process and may be truncated, padded or corrupted.
//
// The int codecs encode and decode long vectors on oneTBB's threads, a block
// per thread at a time: the bytes and values are those of one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "atoll/codec_kind.h"
#include "atoll/status.h"

namespace atl {

// Bytes that encode() writes for `count` values. REQUIRES: check_block ok.
size_t encoded_size(Codec codec, size_t count, uint32_t block);

// The largest |x - decode(encode(x))| allowed for a value x whose block has
// absolute maximum `absmax` (round-off of the float arithmetic included).
double error_bound(Codec codec, float x, float absmax);

// Encodes x into out. REQUIRES: out.size() == encoded_size(codec, x.size(), block).
void encode(Codec codec, uint32_t block, std::span<const float> x, std::span<uint8_t> out);

// Decodes `in` into out (out.size() values). Fails, leaving `out` unspecified,
// if `in` has the wrong size for out.size() values, a step is negative or not
// finite, a code is out of range, or a decoded value is not finite.
Status decode(Codec codec, uint32_t block, std::span<const uint8_t> in, std::span<float> out);

// Why a decode failed, for a receiver that answers the sender (the syncer's
// Reject tells a malformed payload from one of values that are not finite).
enum class DecodeFault : uint8_t {
  kNone = 0,   // it decoded
  kMalformed,  // its form: the codec, block, size or count; a negative step; a code out of range
  kNonFinite,  // its values: a step or a decoded value that is NaN or infinite (encode() gives a
               // block that holds a NaN or an infinity a NaN step)
};
// decode(), and in `fault` why it failed (kNone when it did not).
Status decode(Codec codec, uint32_t block, std::span<const uint8_t> in, std::span<float> out, DecodeFault& fault);

// An encoded vector as it travels in a message.
struct Payload {
  Codec codec = Codec::kFp32;
  uint32_t block = 0;  // values per step (int codecs); 0 otherwise
  uint32_t count = 0;  // number of values
  std::vector<uint8_t> bytes;

  friend bool operator==(const Payload&, const Payload&) = default;
};

Payload encode_payload(Codec codec, uint32_t block, std::span<const float> x);

// Top-k sparsification before a codec (SparseLoCo): in each block of `block`
// values (0: one block) keeps the round(density * len) largest in magnitude,
// at least one (NaN counts as largest; ties go to the earlier index), and
// zeroes the others. Density 1 or more changes nothing.
void keep_largest(std::span<float> x, uint32_t block, float density);
// Also fails if payload.count != out.size().
Status decode_payload(const Payload& payload, std::span<float> out);
// The same, and in `fault` why it failed (kNone when it did not).
Status decode_payload(const Payload& payload, std::span<float> out, DecodeFault& fault);

}  // namespace atl
