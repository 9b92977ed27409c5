// The run report's derived figures: uptime from the rounds' end times.
#include <boost/test/unit_test.hpp>

#include "atoll/report.h"

namespace atl {

BOOST_AUTO_TEST_SUITE(report_test)

BOOST_AUTO_TEST_CASE(rounds_that_end_together_are_one_advance_not_a_zero_median) {
  // Every 20 ms, three fragments merge within 0.1 ms of each other; then a
  // final flush of twelve rounds at the end. Without merging the bursts, two
  // gaps in three are ~0, the median is ~0, and uptime collapsed to ~0.
  std::vector<double> ends;
  for (int i = 1; i <= 250; ++i)
    for (int f = 0; f < 3; ++f) ends.push_back(0.02 * i + 0.00005 * f);
  for (int f = 0; f < 12; ++f) ends.push_back(5.0 + 0.0001 * f);
  BOOST_CHECK_GT(uptime_of(ends, 5.0), 0.99);
}

BOOST_AUTO_TEST_CASE(an_outage_counts_as_down_beyond_three_typical_gaps) {
  std::vector<double> ends;
  for (int i = 1; i <= 100; ++i) ends.push_back(0.02 * i);        // 0 .. 2 s: up
  for (int i = 1; i <= 100; ++i) ends.push_back(4.0 + 0.02 * i);  // 2 .. 4 s: nothing merged
  // Down: the 2 s gap less its allowance of 3 x 20 ms.
  BOOST_CHECK_CLOSE(uptime_of(ends, 6.0), (6.0 - 2.0 + 0.06) / 6.0, 1.0);
  BOOST_CHECK_EQUAL(uptime_of({}, 6.0), 0.0);
}

BOOST_AUTO_TEST_CASE(waiting_for_learners_and_for_final_evaluations_is_not_downtime) {
  // The syncer waited 60 s for learners to load their model and data, they
  // trained 10 s (a round every 20 ms), and it waited 5 s more for the final
  // evaluations: over the syncer's whole 75 s the model advanced 13% of the
  // time; over its training, all of it.
  std::vector<double> ends;
  for (int i = 1; i <= 500; ++i) ends.push_back(60.0 + 0.02 * i);
  BOOST_CHECK_LT(uptime_of(ends, 75.0), 0.2);
  BOOST_CHECK_GT(uptime_of(ends, 70.0, 60.0), 0.99);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
