// The message-fault gate decides, per packet and link, what the network does
// to it. Checked directly.
#include <boost/test/unit_test.hpp>

#include <fstream>

#include "atoll/message_faults.h"
#include "atoll/messages.h"
#include "test_support.h"

namespace atl {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

const Clock::time_point t0 = Clock::now();

LinkFault fault(LinkFaultKind kind, int learner, double seconds = 0.0, double probability = 1.0) {
  return LinkFault{kind, learner, t0, t0 + 10s, seconds, probability};
}

std::vector<uint8_t> packet() { return encode_message(Pull{3, 42}); }

}  // namespace

BOOST_AUTO_TEST_SUITE(message_faults_test)

BOOST_AUTO_TEST_CASE(without_faults_the_gate_is_inactive_and_passes_everything) {
  MessageFaults gate(1);
  BOOST_CHECK(!gate.active());
  auto out = gate.route(0, packet(), t0);
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_CHECK_EQUAL(out[0].delay_seconds, 0.0);
  BOOST_CHECK(out[0].bytes == packet());
}

BOOST_AUTO_TEST_CASE(a_partition_drops_its_link_only_and_only_while_it_lasts) {
  MessageFaults gate(1);
  gate.add(fault(LinkFaultKind::kDrop, 1));
  BOOST_CHECK(gate.active());
  BOOST_CHECK(gate.route(1, packet(), t0 + 1s).empty());
  BOOST_CHECK_EQUAL(gate.route(0, packet(), t0 + 1s).size(), 1u);    // another link
  BOOST_CHECK_EQUAL(gate.route(1, packet(), t0 + 11s).size(), 1u);   // over
  BOOST_CHECK_EQUAL(gate.affected()[static_cast<size_t>(LinkFaultKind::kDrop)], 1u);
}

BOOST_AUTO_TEST_CASE(delay_duplicate_reorder_and_corrupt_do_what_they_say) {
  MessageFaults gate(7);
  gate.add(fault(LinkFaultKind::kDelay, 0, 0.25));
  gate.add(fault(LinkFaultKind::kDuplicate, 1));
  gate.add(fault(LinkFaultKind::kReorder, 2, 0.5));
  gate.add(fault(LinkFaultKind::kCorrupt, 3));
  auto delayed = gate.route(0, packet(), t0 + 1s);
  BOOST_REQUIRE_EQUAL(delayed.size(), 1u);
  BOOST_CHECK_EQUAL(delayed[0].delay_seconds, 0.25);
  auto twice = gate.route(1, packet(), t0 + 1s);
  BOOST_REQUIRE_EQUAL(twice.size(), 2u);
  BOOST_CHECK(twice[0].bytes == twice[1].bytes);
  for (int i = 0; i < 50; ++i) {
    auto r = gate.route(2, packet(), t0 + 1s);
    BOOST_REQUIRE_EQUAL(r.size(), 1u);
    BOOST_CHECK(r[0].delay_seconds >= 0.0 && r[0].delay_seconds <= 0.5);
  }
  auto damaged = gate.route(3, packet(), t0 + 1s);
  BOOST_REQUIRE_EQUAL(damaged.size(), 1u);
  size_t differing = 0;
  for (size_t i = 0; i < packet().size(); ++i) differing += damaged[0].bytes[i] != packet()[i];
  BOOST_CHECK_EQUAL(differing, 1u);
  BOOST_CHECK(!decode_message(damaged[0].bytes).ok());  // the checksum catches it
}

BOOST_AUTO_TEST_CASE(a_probability_affects_about_that_share_and_is_seeded) {
  const auto count = [](uint64_t seed) {
    MessageFaults gate(seed);
    gate.add(fault(LinkFaultKind::kDrop, -1, 0.0, 0.3));
    int dropped = 0;
    for (int i = 0; i < 2000; ++i) dropped += gate.route(uint32_t(i % 4), packet(), t0 + 1s).empty();
    return dropped;
  };
  const int a = count(5);
  BOOST_TEST_MESSAGE(a << " of 2000 dropped at probability 0.3");
  BOOST_CHECK(a > 500 && a < 700);
  BOOST_CHECK_EQUAL(a, count(5));  // same seed, same faults
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
