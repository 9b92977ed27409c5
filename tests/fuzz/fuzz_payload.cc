// Payload codecs (runtime/codec.cc): any codec, block, count and bytes
// decode to finite values or an error, never out of bounds.
#include <cmath>
#include <cstring>

#include "atoll/codec.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 7) return 0;
  atl::Payload p;
  p.codec = static_cast<atl::Codec>(data[0] % 6);  // one past the last codec, too
  uint32_t block = 0, count = 0;
  std::memcpy(&block, data + 1, 4);
  std::memcpy(&count, data + 5, 2);  // up to 65535 values: big enough, cheap to run
  p.block = block;
  p.count = count;
  p.bytes.assign(data + 7, data + size);
  std::vector<float> out(count);
  if (atl::decode_payload(p, out).ok())
    for (float v : out) atl::fuzz::expect(std::isfinite(v));
  std::vector<float> wrong(count + 1);  // a count that does not match is an error, never a read
  atl::fuzz::expect(!atl::decode_payload(p, wrong).ok());
  return 0;
}
