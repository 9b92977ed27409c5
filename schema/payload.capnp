@0xa2d9dad0094a2c57;
# An encoded float vector (see runtime/protocol/include/atoll/codec.h for the byte layout).
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("atl::schema");

# Values are part of the wire format: never renumber.
enum Codec {
  fp32 @0;
  bf16 @1;
  int8 @2;
  int4 @3;
  int2 @4;
}

struct Payload {
  codec @0 :Codec;
  block @1 :UInt32;   # values per quantization step (int codecs), else 0
  count @2 :UInt32;   # number of float values
  bytes @3 :Data;     # steps (fp32 per block) then packed codes; or raw fp32/bf16
}
