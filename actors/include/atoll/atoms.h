// The CAF type-ID block: every type and atom that actors exchange.
//
// Between learners and the syncer there is exactly one message type, Packet:
// the bytes of one Cap'n Proto Envelope (atoll/messages.h), so the same bytes
// cross a process boundary unchanged. CAF 0.17 silently drops a message whose
// type was not registered when it goes over the network; build with
// CAF_ENABLE_TYPE_ID_CHECKS (the top-level CMakeLists does) so sending an
// unregistered type fails to compile, and call register_types() on every
// actor_system_config.
#pragma once

#include <cstdint>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/type_id.hpp>

namespace atl {

struct Packet {
  std::vector<uint8_t> bytes;  // CAF 0.17 serializes this as one raw block
  friend bool operator==(const Packet&, const Packet&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Packet& x) {
  return f(caf::meta::type_name("atl::Packet"), x.bytes);
}

}  // namespace atl

CAF_BEGIN_TYPE_ID_BLOCK(atoll, caf::first_custom_type_id)
  CAF_ADD_TYPE_ID(atoll, (atl::Packet))
CAF_END_TYPE_ID_BLOCK(atoll)

namespace atl {

// Registers the block with a config: needed for anything sent over the network.
inline void register_types(caf::actor_system_config& cfg) { cfg.add_message_types<caf::id_block::atoll>(); }

}  // namespace atl
