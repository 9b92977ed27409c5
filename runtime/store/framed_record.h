// A Cap'n Proto record in a checksummed frame: how atoll's own files are laid
// out on disk (checkpoints, model files).
//
//   offset 0   8 bytes  magic, names the kind of file ("ATOLLCKP", "ATOLLMOD")
//          8   u32 LE   format version
//         12   u32 LE   CRC32C of the payload
//         16   u64 LE   payload bytes
//         24   payload: one serialized Cap'n Proto message (whole 8-byte words)
//
// A reader checks all of it before it parses a byte of the payload.
#pragma once

#include <capnp/message.h>

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "atoll/status.h"

namespace atl {

using FileMagic = std::array<char, 8>;

// The framed bytes of `builder`'s message.
std::vector<uint8_t> frame_record(const FileMagic& magic, uint32_t version, capnp::MessageBuilder& builder);

// The same for a message built straight into the file's bytes: `build` sets
// the root of a builder whose single segment of `words` zeroed words sits
// after the header, so a large Data field is copied once, from where it
// lives, and the file is not copied again. `words` must bound the message,
// its structs, list tags and pointers included (a message that outgrows it
// throws kj::Exception: the bound is wrong).
std::vector<uint8_t> frame_record_in_place(const FileMagic& magic, uint32_t version, size_t words,
                                           const std::function<void(capnp::MessageBuilder&)>& build);

// The payload's words, checked against the frame: magic (`what` names the
// kind in the error, "an atoll checkpoint"), version, length and checksum.
// They point into `bytes` when those are 8-byte aligned (a buffer from
// read_file() is), else into `aligned`, which then holds a copy: a model or
// checkpoint of hundreds of MB is not copied just to be parsed.
Result<kj::ArrayPtr<const capnp::word>> unframe_record(std::span<const uint8_t> bytes, const FileMagic& magic,
                                                       uint32_t version, const std::string& what,
                                                       std::vector<capnp::word>& aligned);

// fp32 values as a record's Data field (little-endian, as the machine's).
kj::ArrayPtr<const kj::byte> float_bytes(std::span<const float> values);
// And back, on memory advised for huge pages; throws std::runtime_error naming
// `what` ("values of fragment 3") when the size is not a whole number of
// floats (a reader catches it).
std::vector<float> floats_of(capnp::Data::Reader data, const std::string& what);

// Reader options for a payload of `words`: a traversal limit that a
// malicious pointer structure cannot exceed by much.
capnp::ReaderOptions record_reader_options(size_t words);

}  // namespace atl
