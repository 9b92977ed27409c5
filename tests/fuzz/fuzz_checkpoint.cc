// Checkpoint files (runtime/checkpoint.cc): any bytes are a state or an
// error naming why; a state read back encodes to a file that reads the same.
// The syncer's figures inside (atoll/syncer_figures.h) likewise: any bytes
// are figures or an error, and figures read back encode to the same bytes.
#include <cstring>

#include "atoll/checkpoint.h"
#include "atoll/syncer_figures.h"
#include "fuzz_input.h"

namespace {

void check(std::span<const uint8_t> bytes) {
  auto s = atl::decode_checkpoint(bytes);
  if (!s.ok()) return;
  auto again = atl::decode_checkpoint(atl::encode_checkpoint(*s));
  atl::fuzz::expect(again.ok() && *again == *s);
  if (s->figures.empty()) return;
  auto figures = atl::decode_figures(s->figures);
  if (!figures.ok()) return;
  const std::vector<uint8_t> encoded = atl::encode_figures(*figures);
  auto read = atl::decode_figures(encoded);
  atl::fuzz::expect(read.ok() && atl::encode_figures(*read) == encoded);
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
