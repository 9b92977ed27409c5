// The wire envelope and every message decoder (runtime/messages.cc): any
// bytes give a message or an error, and a decoded message encodes back to
// bytes that decode to the same encoding.
#include "atoll/messages.h"
#include "fuzz_input.h"

namespace {

void check(std::span<const uint8_t> bytes) {
  auto m = atl::decode_message(bytes);
  if (!m.ok()) return;
  const auto once = atl::encode_message(*m);
  auto again = atl::decode_message(once);
  atl::fuzz::expect(again.ok() && atl::encode_message(*again) == once);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> raw(data, size);
  check(raw);
  // The trailer is the last 8 bytes: CRC32C of the body, then a magic word.
  if (size >= 16) check(atl::fuzz::with_crc(raw, size - 8, 0, size - 8));
  return 0;
}
