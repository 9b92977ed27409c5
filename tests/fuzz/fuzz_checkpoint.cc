// Checkpoint files (runtime/checkpoint.cc): any bytes are a state or an
// error naming why; a state read back encodes to a file that reads the same.
#include <cstring>

#include "atoll/checkpoint.h"
#include "fuzz_input.h"

namespace {

void check(std::span<const uint8_t> bytes) {
  auto s = atl::decode_checkpoint(bytes);
  if (!s.ok()) return;
  auto again = atl::decode_checkpoint(atl::encode_checkpoint(*s));
  atl::fuzz::expect(again.ok() && *again == *s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> raw(data, size);
  check(raw);
  // Header: magic (8), version (4), CRC32C of the payload (4), payload length (8).
  if (size >= 24) {
    auto fixed = atl::fuzz::with_crc(raw, 12, 24, size);
    const uint64_t length = size - 24;
    std::memcpy(fixed.data() + 16, &length, 8);
    check(fixed);
  }
  return 0;
}
