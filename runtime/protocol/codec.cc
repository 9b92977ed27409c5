#include "atoll/codec.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace atl {

static_assert(std::endian::native == std::endian::little,
              "payloads are little-endian; a big-endian host needs byte swaps here");

namespace {

int bits_of(Codec c) {
  switch (c) {
    case Codec::kFp32: return 32;
    case Codec::kBf16: return 16;
    case Codec::kInt8: return 8;
    case Codec::kInt4: return 4;
    case Codec::kInt2: return 2;
  }
  return 0;
}
int qmax_of(Codec c) { return (1 << (bits_of(c) - 1)) - 1; }  // 127, 7, 1
size_t block_count(size_t n, uint32_t block) { return (n + block - 1) / block; }

uint16_t to_bf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);                      // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// True when every value is finite (written as a comparison and an integer
// reduction so that it vectorizes; a bool reduction does not, with GCC 12).
bool all_finite(std::span<const float> x) {
  unsigned bad = 0;
  for (float v : x) bad |= static_cast<unsigned>(!(std::fabs(v) <= FLT_MAX));
  return bad == 0;
}

// Codes are written in two simple passes that the compiler vectorizes:
// quantize block by block into one byte per value, then pack the bytes.
template <int kBits>
void quantize(uint32_t block, std::span<const float> x, float* steps, uint8_t* codes) {
  constexpr int kQmax = (1 << (kBits - 1)) - 1;
  const size_t n = x.size();
  std::vector<uint8_t> q(n);
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += block) {
    const size_t len = std::min<size_t>(block, n - begin);
    const float* xb = x.data() + begin;
    float absmax = 0.0f;
    bool finite = true;
    for (size_t i = 0; i < len; ++i) {
      absmax = std::max(absmax, std::fabs(xb[i]));
      finite &= std::fabs(xb[i]) <= FLT_MAX;  // false for NaN and infinity
    }
    if (!finite) {
      // A NaN or infinity has no code: mark the block with a NaN step, which
      // every decoder refuses, rather than casting NaN to an integer.
      steps[b] = std::numeric_limits<float>::quiet_NaN();
      std::fill(q.begin() + static_cast<ptrdiff_t>(begin), q.begin() + static_cast<ptrdiff_t>(begin + len),
                uint8_t{kQmax});
      continue;
    }
    const float step = absmax / kQmax;
    steps[b] = step;
    const float inv = step > 0.0f ? 1.0f / step : 0.0f;
    uint8_t* qb = q.data() + begin;
    for (size_t i = 0; i < len; ++i) {
      const float r = std::min(std::max(xb[i] * inv, -float(kQmax)), float(kQmax));
      qb[i] = static_cast<uint8_t>(static_cast<int>(std::nearbyint(r)) + kQmax);
    }
  }
  if constexpr (kBits == 8) {
    std::memcpy(codes, q.data(), n);
  } else {
    constexpr size_t kPerByte = 8 / kBits;
    const size_t full = n / kPerByte;
    for (size_t j = 0; j < full; ++j) {
      unsigned byte = 0;
      for (size_t k = 0; k < kPerByte; ++k) byte |= unsigned{q[j * kPerByte + k]} << (k * kBits);
      codes[j] = static_cast<uint8_t>(byte);
    }
    if (full * kPerByte < n) {
      unsigned byte = 0;
      for (size_t k = 0; full * kPerByte + k < n; ++k) byte |= unsigned{q[full * kPerByte + k]} << (k * kBits);
      codes[full] = static_cast<uint8_t>(byte);
    }
  }
}

// The usual case of quantize() and dequantize() without their scratch
// vector: blocks that start on a byte boundary (block a multiple of the codes
// per byte), in pieces of kPiece values that stay in the L1 cache, each in two
// simple loops the compiler vectorizes. Each value's arithmetic is theirs, so
// the bytes and values are the same.
// Long vectors run on oneTBB's threads in ranges of whole blocks, each
// block on one thread, so the bytes and values do not depend on the split.
constexpr size_t kPiece = 256;
constexpr size_t kParallelValues = size_t{1} << 17;

// body(first_block, end_block) over the blocks of n values.
template <class Body>
void for_blocks(size_t n, uint32_t block, const Body& body) {
  const size_t blocks = block_count(n, block);
  if (n < kParallelValues) return body(size_t{0}, blocks);
  const size_t grain = std::max<size_t>(1, (size_t{1} << 16) / block);  // about 10 us of work
  tbb::parallel_for(tbb::blocked_range<size_t>(0, blocks, grain),
                    [&](const tbb::blocked_range<size_t>& r) { body(r.begin(), r.end()); });
}

// Blocks [b0, b1) of x.
template <int kBits>
void quantize_packed(uint32_t block, std::span<const float> x, uint8_t* out_steps, uint8_t* codes, size_t b0,
                     size_t b1) {
  constexpr int kQmax = (1 << (kBits - 1)) - 1;
  constexpr size_t kPerByte = 8 / kBits;
  const size_t n = x.size();
  uint8_t q[kPiece];
  for (size_t b = b0, begin = b0 * block; b < b1; ++b, begin += block) {
    const size_t len = std::min<size_t>(block, n - begin);
    const float* xb = x.data() + begin;
    float absmax = 0.0f;
    bool finite = true;
    for (size_t i = 0; i < len; ++i) {
      absmax = std::max(absmax, std::fabs(xb[i]));
      finite &= std::fabs(xb[i]) <= FLT_MAX;
    }
    // A NaN step marks a block that holds a NaN or an infinity; its codes are kQmax.
    const float step = finite ? absmax / kQmax : std::numeric_limits<float>::quiet_NaN();
    const float inv = finite && step > 0.0f ? 1.0f / step : 0.0f;
    std::memcpy(out_steps + b * sizeof(float), &step, sizeof step);
    for (size_t p = 0; p < len; p += kPiece) {
      const size_t m = std::min(kPiece, len - p);
      const float* xp = xb + p;
      for (size_t i = 0; i < m; ++i) {
        const float r = std::min(std::max(xp[i] * inv, -float(kQmax)), float(kQmax));
        q[i] = static_cast<uint8_t>(static_cast<int>(std::nearbyint(r)) + kQmax);
      }
      if (!finite) std::fill(q, q + m, uint8_t{kQmax});
      uint8_t* cp = codes + (begin + p) / kPerByte;
      const size_t full = m / kPerByte;
      for (size_t j = 0; j < full; ++j) {
        unsigned byte = 0;
        for (size_t k = 0; k < kPerByte; ++k) byte |= unsigned{q[j * kPerByte + k]} << (k * kBits);
        cp[j] = static_cast<uint8_t>(byte);
      }
      if (full * kPerByte < m) {  // the last value's byte
        unsigned byte = 0;
        for (size_t k = 0; full * kPerByte + k < m; ++k) byte |= unsigned{q[full * kPerByte + k]} << (k * kBits);
        cp[full] = static_cast<uint8_t>(byte);
      }
    }
  }
}

// False (leaving `out` unspecified) when a block has a step that is negative
// or not finite, a code out of range or a value that is not finite:
// dequantize() then says which.
template <int kBits>
bool dequantize_packed(uint32_t block, const uint8_t* in_steps, const uint8_t* codes, std::span<float> out,
                       size_t b0, size_t b1) {
  constexpr int kQmax = (1 << (kBits - 1)) - 1;
  constexpr size_t kPerByte = 8 / kBits;
  constexpr unsigned kMask = (1u << kBits) - 1;
  const size_t n = out.size();
  uint8_t q[kPiece];
  uint8_t worst = 0;
  bool finite = true;
  for (size_t b = b0, begin = b0 * block; b < b1; ++b, begin += block) {
    float step;
    std::memcpy(&step, in_steps + b * sizeof(float), sizeof step);
    if (!(step >= 0.0f && step <= FLT_MAX)) return false;
    const size_t len = std::min<size_t>(block, n - begin);
    for (size_t p = 0; p < len; p += kPiece) {
      const size_t m = std::min(kPiece, len - p);
      const uint8_t* cp = codes + (begin + p) / kPerByte;
      const size_t bytes = (m + kPerByte - 1) / kPerByte;
      for (size_t j = 0; j < bytes; ++j)
        for (size_t k = 0; k < kPerByte; ++k) q[j * kPerByte + k] = static_cast<uint8_t>((cp[j] >> (k * kBits)) & kMask);
      float* op = out.data() + begin + p;
      for (size_t i = 0; i < m; ++i) worst = std::max(worst, q[i]);
      for (size_t i = 0; i < m; ++i) op[i] = static_cast<float>(static_cast<int>(q[i]) - kQmax) * step;
      finite &= all_finite({op, m});
    }
  }
  return worst <= 2 * kQmax && finite;
}

template <int kBits>
Status dequantize(uint32_t block, const float* steps, const uint8_t* codes, std::span<float> out,
                  DecodeFault& fault) {
  constexpr int kQmax = (1 << (kBits - 1)) - 1;
  const size_t n = out.size();
  std::vector<uint8_t> unpacked;
  const uint8_t* q = codes;  // int8 codes are already one byte per value
  if constexpr (kBits < 8) {
    constexpr size_t kPerByte = 8 / kBits;
    constexpr unsigned kMask = (1u << kBits) - 1;
    unpacked.resize(n);
    for (size_t k = 0; k < n; ++k)
      unpacked[k] = static_cast<uint8_t>((codes[k / kPerByte] >> ((k % kPerByte) * kBits)) & kMask);
    q = unpacked.data();
  }
  uint8_t worst = 0;
  for (size_t k = 0; k < n; ++k) worst = std::max(worst, q[k]);
  fault = DecodeFault::kMalformed;
  if (worst > 2 * kQmax)
    return Status::corruption("a code is above " + std::to_string(2 * kQmax) + " (" +
                              std::to_string(worst) + ")");
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += block) {
    const float step = steps[b];
    if (!(step >= 0.0f && step <= FLT_MAX)) {
      // A NaN step is how encode() marks a block that held a NaN or an infinity.
      fault = step < 0.0f ? DecodeFault::kMalformed : DecodeFault::kNonFinite;
      return Status::corruption("block " + std::to_string(b) + " has step " + std::to_string(step) +
                                " (must be finite and >= 0)");
    }
    const size_t len = std::min<size_t>(block, n - begin);
    for (size_t i = 0; i < len; ++i)
      out[begin + i] = static_cast<float>(static_cast<int>(q[begin + i]) - kQmax) * step;
  }
  fault = DecodeFault::kNonFinite;
  if (!all_finite(out)) return Status::corruption("a decoded value is not finite");
  fault = DecodeFault::kNone;
  return {};
}

}  // namespace

size_t encoded_size(Codec codec, size_t count, uint32_t block) {
  if (!is_quantized(codec)) return count * static_cast<size_t>(bits_of(codec) / 8);
  return block_count(count, block) * sizeof(float) + (count * static_cast<size_t>(bits_of(codec)) + 7) / 8;
}

double error_bound(Codec codec, float x, float absmax) {
  const double round_off = 4.0 * FLT_EPSILON * absmax;
  switch (codec) {
    case Codec::kFp32: return 0.0;
    case Codec::kBf16: return std::ldexp(std::fabs(static_cast<double>(x)), -8);
    default: return absmax / (2.0 * qmax_of(codec)) + round_off;
  }
}

void encode(Codec codec, uint32_t block, std::span<const float> x, std::span<uint8_t> out) {
  assert(out.size() == encoded_size(codec, x.size(), block));
  if (x.empty()) return;
  switch (codec) {
    case Codec::kFp32:
      std::memcpy(out.data(), x.data(), x.size_bytes());
      return;
    case Codec::kBf16:
      for (size_t i = 0; i < x.size(); ++i) {
        const uint16_t b = to_bf16(x[i]);
        std::memcpy(out.data() + 2 * i, &b, 2);
      }
      return;
    default: break;
  }
  if (block % (8 / static_cast<uint32_t>(bits_of(codec))) == 0) {
    uint8_t* codes = out.data() + block_count(x.size(), block) * sizeof(float);
    for_blocks(x.size(), block, [&](size_t b0, size_t b1) {
      if (codec == Codec::kInt8) quantize_packed<8>(block, x, out.data(), codes, b0, b1);
      if (codec == Codec::kInt4) quantize_packed<4>(block, x, out.data(), codes, b0, b1);
      if (codec == Codec::kInt2) quantize_packed<2>(block, x, out.data(), codes, b0, b1);
    });
    return;
  }
  // Steps are written through a float buffer because `out` has no alignment.
  std::vector<float> steps(block_count(x.size(), block));
  uint8_t* codes = out.data() + steps.size() * sizeof(float);
  if (codec == Codec::kInt8) quantize<8>(block, x, steps.data(), codes);
  if (codec == Codec::kInt4) quantize<4>(block, x, steps.data(), codes);
  if (codec == Codec::kInt2) quantize<2>(block, x, steps.data(), codes);
  std::memcpy(out.data(), steps.data(), steps.size() * sizeof(float));
}

Status decode(Codec codec, uint32_t block, std::span<const uint8_t> in, std::span<float> out) {
  DecodeFault fault;
  return decode(codec, block, in, out, fault);
}

Status decode(Codec codec, uint32_t block, std::span<const uint8_t> in, std::span<float> out, DecodeFault& fault) {
  fault = DecodeFault::kMalformed;
  if (bits_of(codec) == 0)
    return Status::corruption("unknown codec id " + std::to_string(static_cast<int>(codec)));
  ATOLL_RETURN_IF_ERROR(check_block(codec, block));
  const size_t expected = encoded_size(codec, out.size(), block);
  if (in.size() != expected)
    return Status::corruption(std::string(codec_name(codec)) + " payload of " +
                              std::to_string(in.size()) + " bytes for " + std::to_string(out.size()) +
                              " values, expected " + std::to_string(expected) + " bytes");
  if (out.empty()) {
    fault = DecodeFault::kNone;
    return {};  // (and memcpy must not see the null data of empty spans)
  }
  switch (codec) {
    case Codec::kFp32:
      std::memcpy(out.data(), in.data(), in.size());
      break;
    case Codec::kBf16:
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t b;
        std::memcpy(&b, in.data() + 2 * i, 2);
        out[i] = from_bf16(b);
      }
      break;
    default: {
      const uint8_t* packed = in.data() + block_count(out.size(), block) * sizeof(float);
      if (block % (8 / static_cast<uint32_t>(bits_of(codec))) == 0) {
        std::atomic<bool> ok{true};
        for_blocks(out.size(), block, [&](size_t b0, size_t b1) {
          bool good = false;
          if (codec == Codec::kInt8) good = dequantize_packed<8>(block, in.data(), packed, out, b0, b1);
          if (codec == Codec::kInt4) good = dequantize_packed<4>(block, in.data(), packed, out, b0, b1);
          if (codec == Codec::kInt2) good = dequantize_packed<2>(block, in.data(), packed, out, b0, b1);
          if (!good) ok.store(false, std::memory_order_relaxed);
        });
        if (ok.load()) {
          fault = DecodeFault::kNone;
          return {};
        }
      }
      // The general case, and the one that names what is wrong with a payload.
      std::vector<float> steps(block_count(out.size(), block));
      std::memcpy(steps.data(), in.data(), steps.size() * sizeof(float));
      const uint8_t* codes = in.data() + steps.size() * sizeof(float);
      if (codec == Codec::kInt8) return dequantize<8>(block, steps.data(), codes, out, fault);
      if (codec == Codec::kInt4) return dequantize<4>(block, steps.data(), codes, out, fault);
      return dequantize<2>(block, steps.data(), codes, out, fault);
    }
  }
  fault = DecodeFault::kNonFinite;
  if (!all_finite(out)) return Status::corruption("a decoded value is not finite");
  fault = DecodeFault::kNone;
  return {};
}

Payload encode_payload(Codec codec, uint32_t block, std::span<const float> x) {
  Payload p{codec, is_quantized(codec) ? block : 0, static_cast<uint32_t>(x.size()), {}};
  p.bytes.resize(encoded_size(codec, x.size(), p.block));
  encode(codec, p.block, x, p.bytes);
  return p;
}

Status decode_payload(const Payload& p, std::span<float> out) {
  DecodeFault fault;
  return decode_payload(p, out, fault);
}

Status decode_payload(const Payload& p, std::span<float> out, DecodeFault& fault) {
  fault = DecodeFault::kMalformed;
  if (p.count != out.size())
    return Status::corruption("payload holds " + std::to_string(p.count) + " values, expected " +
                              std::to_string(out.size()));
  return decode(p.codec, p.block, p.bytes, out, fault);
}

void keep_largest(std::span<float> x, uint32_t block, float density) {
  if (!(density < 1.0f) || x.empty()) return;
  const size_t per = block == 0 ? x.size() : block;
  std::vector<uint32_t> order;
  for (size_t begin = 0; begin < x.size(); begin += per) {
    const size_t len = std::min(per, x.size() - begin);
    const auto k = static_cast<size_t>(std::clamp<long>(std::lround(double(density) * double(len)), 1, long(len)));
    if (k == len) continue;
    float* xb = x.data() + begin;
    const auto magnitude = [&](uint32_t i) {
      return std::isnan(xb[i]) ? std::numeric_limits<float>::infinity() : std::fabs(xb[i]);
    };
    order.resize(len);
    std::iota(order.begin(), order.end(), 0u);
    std::nth_element(order.begin(), order.begin() + static_cast<ptrdiff_t>(k), order.end(), [&](uint32_t a, uint32_t b) {
      const float ma = magnitude(a), mb = magnitude(b);
      return ma > mb || (ma == mb && a < b);
    });
    for (size_t i = k; i < len; ++i) xb[order[i]] = 0.0f;
  }
}

}  // namespace atl
