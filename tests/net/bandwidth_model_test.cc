// The bandwidth model (atoll/bandwidth_model.h) against values worked out by hand.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "atoll/bandwidth_model.h"

namespace atl {

BOOST_AUTO_TEST_SUITE(bandwidth_model_test)

BOOST_AUTO_TEST_CASE(dp_pays_its_transfer_and_round_trip_every_step) {
  BandwidthInputs in;
  in.parameters = 1e6;  // 4 MB of fp32 each way per step: 32 Mbit
  in.step_seconds = 1.0;
  in.rtt_seconds = 0.02;
  // At 64 Mbit/s: 0.5 s up, 0.5 s down, 0.02 s round trip: 1 / 2.02.
  BOOST_TEST(dp_utilization(in, 64e6) == 1.0 / 2.02, boost::test_tools::tolerance(1e-12));
  // 95% leaves 1/0.95 - 1 = 0.0526 s per step, 0.0326 s after the round trip, for 64 Mbit.
  const BandwidthNeed n = bandwidth_need(in);
  BOOST_TEST(n.dp == 64e6 / (1 / 0.95 - 1 - 0.02), boost::test_tools::tolerance(1e-9));
  BOOST_TEST(n.dp_average == 32e6, boost::test_tools::tolerance(1e-12));
  in.rtt_seconds = 0.06;  // more than the 0.0526 s the target leaves: no bandwidth suffices
  BOOST_TEST(std::isinf(bandwidth_need(in).dp));
  BOOST_TEST(human_bits(bandwidth_need(in).dp) == "unreachable");
}

BOOST_AUTO_TEST_CASE(decoupled_carries_each_fragment_once_per_h_steps_while_it_trains) {
  BandwidthInputs in;
  in.parameters = 64 * 1000;  // 1000 blocks of 64 values
  in.step_seconds = 0.5;
  in.sync_every = 10;
  in.fragments = 4;
  in.overlap = 2;
  in.rtt_seconds = 0.2;
  in.push_codec = Codec::kInt4;  // a block: a 4-byte step and 32 bytes of codes
  in.push_block = 64;
  in.broadcast_codec = Codec::kBf16;  // 2 bytes a value: the larger direction
  const double down = 64 * 1000 * 2.0, up = 1000 * 36.0;
  const BandwidthNeed n = bandwidth_need(in);
  BOOST_TEST(n.decoupled_average == 8 * down / (10 * 0.5), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(n.decoupled == n.decoupled_average / 0.95, boost::test_tools::tolerance(1e-12));
  // A quarter of the pushes must cross within 2 steps less half a round trip.
  BOOST_TEST(n.decoupled_on_time == 8 * (up / 4) / (2 * 0.5 - 0.1), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(decoupled_utilization(in, 2 * n.decoupled_average) == 1.0);
  BOOST_TEST(decoupled_utilization(in, n.decoupled_average / 2) == 0.5, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(the_hub_carries_every_learner_split_over_its_shards) {
  // 8 learners of 1 Gbit/s each: 8 Gbit/s at one syncer, 2 per shard of 4.
  BOOST_TEST(hub_need(1e9, 8, 1) == 8e9);
  BOOST_TEST(hub_need(1e9, 8, 4) == 2e9);
  // On 10 Gbit/s links: one shard carries 8 Gbit/s; 25 learners need 3.
  BOOST_TEST(shards_needed(1e9, 8, 10e9, 12) == 1);
  BOOST_TEST(shards_needed(1e9, 25, 10e9, 12) == 3);
  // Never more shards than fragments; none helps an unreachable need.
  BOOST_TEST(shards_needed(1e9, 1000, 10e9, 12) == 12);
  BOOST_TEST(shards_needed(std::numeric_limits<double>::infinity(), 8, 10e9, 12) == 0);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
