#include "framed_record.h"

#include <capnp/serialize.h>
#include <kj/io.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "atoll/crc32c.h"
#include "atoll/huge_pages.h"

namespace atl {
namespace {

constexpr size_t kHeaderBytes = 24;

template <class T>
void put_le(std::vector<uint8_t>& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);
}
template <class T>
T get_le(std::span<const uint8_t> in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

// The header in front of the payload that fills `out` past kHeaderBytes.
void write_header(std::vector<uint8_t>& out, const FileMagic& magic, uint32_t version) {
  std::memcpy(out.data(), magic.data(), magic.size());
  put_le<uint32_t>(out, 8, version);
  put_le<uint32_t>(out, 12, crc32c(std::span<const uint8_t>(out).subspan(kHeaderBytes)));
  put_le<uint64_t>(out, 16, out.size() - kHeaderBytes);
}

}  // namespace

std::vector<uint8_t> frame_record(const FileMagic& magic, uint32_t version, capnp::MessageBuilder& builder) {
  const size_t payload = capnp::computeSerializedSizeInWords(builder) * sizeof(capnp::word);
  std::vector<uint8_t> out(kHeaderBytes + payload);
  kj::ArrayOutputStream stream(kj::arrayPtr(out.data() + kHeaderBytes, payload));
  capnp::writeMessage(stream, builder);
  write_header(out, magic, version);
  return out;
}

std::vector<uint8_t> frame_record_in_place(const FileMagic& magic, uint32_t version, size_t words,
                                           const std::function<void(capnp::MessageBuilder&)>& build) {
  // Header, then the segment table of one segment (count - 1, then its words,
  // as writeMessage() writes it), then the segment.
  constexpr size_t kTableBytes = 8;
  // A segment holds fewer than 2^29 words (4 GiB): a larger message takes the
  // builder's own segments, and one copy more.
  if (words >= (size_t{1} << 29)) {
    capnp::MallocMessageBuilder builder;
    build(builder);
    return frame_record(magic, version, builder);
  }
  std::vector<uint8_t> out;
  reserve_huge(out, kHeaderBytes + kTableBytes + words * sizeof(capnp::word));
  out.resize(kHeaderBytes + kTableBytes + words * sizeof(capnp::word));  // zeroes, as a builder's segments must be
  auto* segment = reinterpret_cast<capnp::word*>(out.data() + kHeaderBytes + kTableBytes);  // 8-byte aligned
  capnp::FlatMessageBuilder builder(kj::arrayPtr(segment, words));
  build(builder);
  const auto segments = builder.getSegmentsForOutput();
  KJ_ASSERT(segments.size() == 1 && segments[0].begin() == segment, "the message outgrew its bound");
  const size_t used = segments[0].size();
  put_le<uint32_t>(out, kHeaderBytes, 0);
  put_le<uint32_t>(out, kHeaderBytes + 4, static_cast<uint32_t>(used));
  out.resize(kHeaderBytes + kTableBytes + used * sizeof(capnp::word));
  write_header(out, magic, version);
  return out;
}

Result<kj::ArrayPtr<const capnp::word>> unframe_record(std::span<const uint8_t> bytes, const FileMagic& magic,
                                                       uint32_t version, const std::string& what,
                                                       std::vector<capnp::word>& aligned) {
  if (bytes.size() < kHeaderBytes)
    return Status::corruption("truncated: " + std::to_string(bytes.size()) + " bytes, the header alone is " +
                              std::to_string(kHeaderBytes));
  if (std::memcmp(bytes.data(), magic.data(), magic.size()) != 0)
    return Status::corruption("not " + what + " (bad magic)");
  const auto found = get_le<uint32_t>(bytes, 8);
  if (found != version)
    return Status::corruption("format version " + std::to_string(found) + ", this build reads " +
                              std::to_string(version));
  const auto length = get_le<uint64_t>(bytes, 16);
  if (length != bytes.size() - kHeaderBytes)
    return Status::corruption(std::string(length > bytes.size() - kHeaderBytes ? "truncated" : "trailing bytes") +
                              ": header says " + std::to_string(length) + " payload bytes, file has " +
                              std::to_string(bytes.size() - kHeaderBytes));
  const auto payload = bytes.subspan(kHeaderBytes);
  const uint32_t expected = get_le<uint32_t>(bytes, 12), actual = crc32c(payload);
  if (expected != actual)
    return Status::corruption("checksum mismatch (stored " + std::to_string(expected) + ", computed " +
                              std::to_string(actual) + ")");
  if (payload.empty() || payload.size() % sizeof(capnp::word) != 0)
    return Status::corruption("payload of " + std::to_string(payload.size()) +
                              " bytes is not a whole, non-zero number of 8-byte words");
  const size_t words = payload.size() / sizeof(capnp::word);
  if (reinterpret_cast<uintptr_t>(payload.data()) % alignof(capnp::word) == 0)
    return kj::arrayPtr(reinterpret_cast<const capnp::word*>(payload.data()), words);
  aligned = std::vector<capnp::word>(words);  // capnp::word cannot be moved, so no resize()
  std::memcpy(aligned.data(), payload.data(), payload.size());
  return kj::arrayPtr(static_cast<const capnp::word*>(aligned.data()), words);
}

kj::ArrayPtr<const kj::byte> float_bytes(std::span<const float> values) {
  return {reinterpret_cast<const kj::byte*>(values.data()), values.size_bytes()};
}

std::vector<float> floats_of(capnp::Data::Reader data, const std::string& what) {
  if (data.size() % sizeof(float) != 0)
    throw std::runtime_error(what + " has " + std::to_string(data.size()) + " bytes, not a whole number of floats");
  std::vector<float> v;
  reserve_huge(v, data.size() / sizeof(float));
  v.resize(data.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), data.begin(), data.size());
  return v;
}

capnp::ReaderOptions record_reader_options(size_t words) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = 2 * words + 1024;
  return options;
}

}  // namespace atl
