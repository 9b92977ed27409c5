// Payload codecs: every value within its format's error bound, and every kind
// of bad payload refused with an error instead of garbage.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "atoll/codec.h"
#include "test_support.h"

namespace atl {
namespace {

constexpr Codec kAll[] = {Codec::kFp32, Codec::kBf16, Codec::kInt8, Codec::kInt4, Codec::kInt2};

// A vector with a few large outliers, as real updates have.
std::vector<float> update_like(size_t n, uint64_t seed) {
  auto x = testing::random_vector(n, seed, 0.01);
  for (size_t i = 0; i < n; i += 97) x[i] *= 30.0f;
  return x;
}

bool contains(const Status& s, const char* text) {
  return s.message().find(text) != std::string_view::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(codec_test)

BOOST_AUTO_TEST_CASE(every_value_is_within_the_bound_of_its_format) {
  for (Codec codec : kAll) {
    for (uint32_t block : {8u, 32u, 64u, 100u}) {
      for (size_t n : {1, 7, 64, 1000, 4097}) {
        const auto x = update_like(n, n * 31 + block);
        const Payload p = encode_payload(codec, block, x);
        BOOST_REQUIRE_EQUAL(p.bytes.size(), encoded_size(codec, n, p.block));
        std::vector<float> y(n);
        const Status s = decode_payload(p, y);
        BOOST_REQUIRE_MESSAGE(s.ok(), s.to_string());
        size_t bad = 0;
        for (size_t b = 0; b < n; b += block) {
          const size_t end = std::min<size_t>(n, b + block);
          float absmax = 0;
          for (size_t i = b; i < end; ++i) absmax = std::max(absmax, std::fabs(x[i]));
          for (size_t i = b; i < end; ++i)
            if (std::fabs(x[i] - y[i]) > error_bound(codec, x[i], absmax)) ++bad;
        }
        BOOST_CHECK_MESSAGE(bad == 0, codec_name(codec) << " block " << block << " n " << n << ": "
                                                        << bad << " values beyond the bound");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(sizes_are_what_the_formats_promise) {
  BOOST_CHECK_EQUAL(encoded_size(Codec::kFp32, 1000, 0), 4000u);
  BOOST_CHECK_EQUAL(encoded_size(Codec::kBf16, 1000, 0), 2000u);
  BOOST_CHECK_EQUAL(encoded_size(Codec::kInt8, 1000, 64), 16 * 4 + 1000u);  // 16 steps
  BOOST_CHECK_EQUAL(encoded_size(Codec::kInt4, 1001, 64), 16 * 4 + 501u);
  BOOST_CHECK_EQUAL(encoded_size(Codec::kInt2, 1001, 64), 16 * 4 + 251u);
}

BOOST_AUTO_TEST_CASE(quantization_error_shrinks_with_more_bits) {
  const auto x = update_like(4096, 5);
  double prev = -1;
  for (Codec codec : {Codec::kInt2, Codec::kInt4, Codec::kInt8, Codec::kBf16, Codec::kFp32}) {
    std::vector<float> y(x.size());
    BOOST_REQUIRE(decode_payload(encode_payload(codec, 64, x), y).ok());
    double err = 0;
    for (size_t i = 0; i < x.size(); ++i) err += std::pow(double(x[i]) - y[i], 2);
    BOOST_TEST_MESSAGE(codec_name(codec) << " rms error " << std::sqrt(err / x.size()));
    if (prev >= 0) BOOST_CHECK_LT(err, prev);
    prev = err;
  }
  BOOST_CHECK_EQUAL(prev, 0.0);  // fp32 is exact
}

BOOST_AUTO_TEST_CASE(zeros_round_trip_to_zeros) {
  const std::vector<float> x(100, 0.0f);
  for (Codec codec : kAll) {
    std::vector<float> y(100, 1.0f);
    BOOST_REQUIRE(decode_payload(encode_payload(codec, 16, x), y).ok());
    for (float v : y) BOOST_CHECK_EQUAL(v, 0.0f);
  }
}

BOOST_AUTO_TEST_CASE(truncated_and_oversized_payloads_are_refused) {
  const auto x = update_like(300, 9);
  for (Codec codec : kAll) {
    Payload p = encode_payload(codec, 32, x);
    std::vector<float> y(300);
    Payload shorter = p;
    shorter.bytes.pop_back();
    const Status s1 = decode_payload(shorter, y);
    BOOST_CHECK(s1.code() == Status::Code::kCorruption);
    BOOST_CHECK_MESSAGE(contains(s1, "expected"), s1.to_string());
    Payload longer = p;
    longer.bytes.push_back(0);
    BOOST_CHECK(!decode_payload(longer, y).ok());
    Payload empty = p;
    empty.bytes.clear();
    BOOST_CHECK(!decode_payload(empty, y).ok());
    // The count says 300 but the receiver expects 299 values.
    std::vector<float> wrong(299);
    BOOST_CHECK(!decode_payload(p, wrong).ok());
  }
}

BOOST_AUTO_TEST_CASE(non_finite_values_are_refused) {
  std::vector<float> x(64, 0.5f);
  std::vector<float> y(64);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    x[10] = bad;
    for (Codec codec : kAll) {
      const Status s = decode_payload(encode_payload(codec, 16, x), y);
      BOOST_CHECK_MESSAGE(!s.ok(), codec_name(codec) << " accepted " << bad);
    }
  }
}

BOOST_AUTO_TEST_CASE(corrupted_steps_and_codes_are_refused) {
  const std::vector<float> x(64, 0.25f);
  std::vector<float> y(64);
  Payload p = encode_payload(Codec::kInt4, 32, x);
  const float bad_steps[] = {-1.0f, std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::infinity()};
  for (float step : bad_steps) {
    Payload q = p;
    std::memcpy(q.bytes.data() + 4, &step, 4);  // second block's step
    const Status s = decode_payload(q, y);
    BOOST_CHECK_MESSAGE(contains(s, "block 1 has step"), s.to_string());
  }
  Payload q = p;
  q.bytes.back() = 0xff;  // codes 15: above 2 * qmax = 14
  BOOST_CHECK(contains(decode_payload(q, y), "code is above 14"));
  // A huge but finite step whose products overflow to infinity.
  Payload r = p;
  const float huge = 3e38f;
  std::memcpy(r.bytes.data(), &huge, 4);
  r.bytes[8] = 0xee;  // codes 14 -> +7 * 3e38 = inf
  BOOST_CHECK(!decode_payload(r, y).ok());
}

BOOST_AUTO_TEST_CASE(a_failed_decode_says_whether_its_form_or_its_values_were_bad) {
  const std::vector<float> x(64, 0.25f);
  std::vector<float> y(64);
  const Payload p = encode_payload(Codec::kInt4, 32, x);
  DecodeFault fault = DecodeFault::kMalformed;
  BOOST_REQUIRE(decode_payload(p, y, fault).ok());
  BOOST_CHECK(fault == DecodeFault::kNone);
  const auto fault_with_step = [&](float step) {
    Payload q = p;
    std::memcpy(q.bytes.data() + 4, &step, 4);  // second block's step
    BOOST_CHECK(!decode_payload(q, y, fault).ok());
    return fault;
  };
  BOOST_CHECK(fault_with_step(-1.0f) == DecodeFault::kMalformed);
  BOOST_CHECK(fault_with_step(std::numeric_limits<float>::quiet_NaN()) == DecodeFault::kNonFinite);
  BOOST_CHECK(fault_with_step(std::numeric_limits<float>::infinity()) == DecodeFault::kNonFinite);
  Payload q = p;
  q.bytes.back() = 0xff;  // a code out of range
  BOOST_CHECK(!decode_payload(q, y, fault).ok());
  BOOST_CHECK(fault == DecodeFault::kMalformed);
  std::vector<float> fewer(63);
  BOOST_CHECK(!decode_payload(p, fewer, fault).ok());
  BOOST_CHECK(fault == DecodeFault::kMalformed);
  // What encode() makes of a NaN, in every codec.
  std::vector<float> bad(64, 0.5f);
  bad[10] = std::numeric_limits<float>::quiet_NaN();
  for (Codec codec : kAll) {
    BOOST_CHECK(!decode_payload(encode_payload(codec, 16, bad), y, fault).ok());
    BOOST_CHECK_MESSAGE(fault == DecodeFault::kNonFinite, codec_name(codec));
  }
}

// Top-k per block: the largest in magnitude stay, at least one, ties to the
// earlier index, a NaN counts as largest; density 1 changes nothing.
BOOST_AUTO_TEST_CASE(keep_largest_keeps_the_top_share_of_each_block) {
  std::vector<float> x = {0.1f, -3.0f, 2.0f, 0.5f, /**/ 1.0f, 1.0f, -1.0f, 0.0f, /**/ 7.0f, -0.2f};
  const auto original = x;
  keep_largest(x, 4, 1.0f);
  BOOST_CHECK(x == original);
  keep_largest(x, 4, 0.5f);
  const std::vector<float> half = {0.0f, -3.0f, 2.0f, 0.0f, /**/ 1.0f, 1.0f, 0.0f, 0.0f, /**/ 7.0f, 0.0f};
  BOOST_CHECK(x == half);
  x = original;
  keep_largest(x, 0, 0.01f);  // one block: round(0.1) is 0, so one value
  const std::vector<float> one = {0, 0, 0, 0, 0, 0, 0, 0, 7.0f, 0};
  BOOST_CHECK(x == one);
  std::vector<float> nan = {1.0f, std::nanf(""), 2.0f};
  keep_largest(nan, 0, 0.3f);
  BOOST_CHECK(std::isnan(nan[1]));
  BOOST_CHECK_EQUAL(nan[0], 0.0f);
  BOOST_CHECK_EQUAL(nan[2], 0.0f);
}

BOOST_AUTO_TEST_CASE(bad_codec_ids_and_block_sizes_are_refused) {
  std::vector<float> y(8);
  std::vector<uint8_t> bytes(32);
  BOOST_CHECK(contains(decode(static_cast<Codec>(9), 8, bytes, y), "unknown codec id 9"));
  BOOST_CHECK(!decode(Codec::kInt4, 0, bytes, y).ok());
  BOOST_CHECK(!decode(Codec::kInt4, kMaxBlock + 1, bytes, y).ok());
  BOOST_CHECK(check_block(Codec::kFp32, 0).ok());  // fp32 has no blocks
  BOOST_CHECK(!parse_codec("int3").ok());
  BOOST_CHECK(parse_codec("int4").ok() && *parse_codec("int4") == Codec::kInt4);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
