// Every protocol message, wrapped in the one registered CAF type, survives
// CAF's binary serializer: the path the middleman (BASP) takes between
// processes. CAF 0.17 drops unregistered types silently over the network, so
// this suite is the guard; the last case shows the hazard it guards against.
#include <boost/test/unit_test.hpp>

#include <caf/all.hpp>

#include "atoll/atoms.h"
#include "atoll/messages.h"
#include "test_support.h"

namespace atl {
namespace {

struct RegisteredConfig : caf::actor_system_config {
  RegisteredConfig() {
    register_types(*this);
    set("scheduler.max-threads", 1);
  }
};

struct BareConfig : caf::actor_system_config {
  BareConfig() { set("scheduler.max-threads", 1); }
};

caf::message round_trip(caf::actor_system& sys, const caf::message& msg) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  if (auto err = sink(const_cast<caf::message&>(msg))) return {};
  caf::message out;
  caf::binary_deserializer source{sys, buf};
  if (auto err = source(out)) return {};
  return out;
}

std::vector<Message> one_of_each() {
  const auto values = encode_payload(Codec::kFp32, 0, testing::random_vector(40, 1));
  Welcome w;
  w.fragments = {{0, 3, values}};
  w.moments = OptimizerState{5, values, values};
  return {Register{1, 2, 3, "token", {{0, 3, values}}},
          MomentsPull{5},
          Moments{5, OptimizerState{9, values, values}},
          w,
          Pull{1, 9},
          Push{1, 2, 0, 9, 3, 24, 1536, 0.03, encode_payload(Codec::kInt4, 64, testing::random_vector(40, 2))},
          Broadcast{0, 4, values, true, 3, {1, 2}},
          Progress{1, 2, 100, 6400, 0.001, {{3, 24}}},
          Reject{RejectReason::kNonFinite, 0, "value 7 is NaN"},
          Done{"budget reached"},
          Evaluation{1, 2, {3, 3}, 1.5, 2.16, 0.5, 4096},
          Leave{1, 2, "preempted"}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(wire_serialization_test)

BOOST_AUTO_TEST_CASE(every_message_survives_the_caf_serializer) {
  RegisteredConfig cfg;
  caf::actor_system sys{cfg};
  for (const Message& m : one_of_each()) {
    const Packet sent{encode_message(m)};
    const caf::message back = round_trip(sys, caf::make_message(sent));
    BOOST_REQUIRE_MESSAGE(back.match_elements<Packet>(), message_name(m) << " did not come back as a Packet");
    const auto& packet = back.get_as<Packet>(0);
    BOOST_CHECK(packet == sent);
    auto decoded = decode_message(packet.bytes);
    BOOST_REQUIRE_MESSAGE(decoded.ok(), decoded.status().to_string());
    BOOST_CHECK_MESSAGE(*decoded == m, message_name(m) << " changed on the way");
  }
}

BOOST_AUTO_TEST_CASE(the_packet_adds_only_a_small_frame) {
  RegisteredConfig cfg;
  caf::actor_system sys{cfg};
  Packet p{std::vector<uint8_t>(4096, 7)};
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  BOOST_REQUIRE(!sink(p));
  BOOST_CHECK_LE(buf.size(), 4096u + 16u);  // raw bytes plus a length
}

BOOST_AUTO_TEST_CASE(without_registration_the_message_is_silently_lost) {
  BareConfig cfg;
  caf::actor_system sys{cfg};
  const caf::message back = round_trip(sys, caf::make_message(Packet{{1, 2, 3}}));
  BOOST_CHECK_EQUAL(back.size(), 0u);  // what a remote peer would receive: nothing
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
