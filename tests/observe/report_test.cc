// The run report's derived figures: uptime from the rounds' end times.
#include <boost/test/unit_test.hpp>

#include "atoll/report.h"

namespace atl {

BOOST_AUTO_TEST_SUITE(report_test)

// One fragment's rounds, every `every` seconds from `from` through `to`.
void add_rounds(std::vector<RoundEnd>& ends, uint32_t fragment, double from, double to, double every) {
  for (double t = from; t <= to + 1e-9; t += every) ends.push_back({t, fragment});
}

BOOST_AUTO_TEST_CASE(rounds_that_end_together_are_one_advance_not_a_zero_median) {
  // Every 20 ms a round of fragment 0; at the end a final flush that closes
  // its last round twice within 0.1 ms (cancelled and closed again). As gaps
  // of zero they would pull the median, hence the allowance, down.
  std::vector<RoundEnd> ends;
  add_rounds(ends, 0, 0.02, 5.0, 0.02);
  for (int k = 0; k < 12; ++k) ends.push_back({5.0 + 0.000005 * k, 0});
  BOOST_CHECK_GT(uptime_of(ends, 5.0), 0.99);
}

BOOST_AUTO_TEST_CASE(many_fragments_closing_in_bursts_read_as_up) {
  // 36 fragments, each every 18 s; at every 2 s four of them close 5 ms
  // apart (the learners' step boundaries). The model advances all along.
  // Over all rounds together the median gap was the 5 ms inside a burst,
  // and uptime read 0.015.
  std::vector<RoundEnd> ends;
  for (uint32_t f = 0; f < 36; ++f) add_rounds(ends, f, 2.0 * (f / 4) + 0.005 * (f % 4) + 0.5, 180.0, 18.0);
  std::sort(ends.begin(), ends.end());
  BOOST_CHECK_GT(uptime_of(ends, 180.0), 0.95);
}

BOOST_AUTO_TEST_CASE(an_outage_counts_as_down_beyond_three_typical_gaps) {
  std::vector<RoundEnd> ends;
  for (uint32_t f = 0; f < 3; ++f) {
    add_rounds(ends, f, 0.02 + 0.001 * f, 2.0, 0.02);  // 0 .. 2 s: up
    add_rounds(ends, f, 4.02 + 0.001 * f, 6.0, 0.02);  // 2 .. 4 s: nothing merged
  }
  // Down: the 2 s gap less its allowance of 3 x 20 ms, for every fragment.
  BOOST_CHECK_CLOSE(uptime_of(ends, 6.0), (6.0 - 2.0 + 0.06) / 6.0, 1.0);
  BOOST_CHECK_EQUAL(uptime_of({}, 6.0), 0.0);
  // A fragment that stopped advancing at 2 s while two others went on: down a third of 2/3 of the time.
  std::vector<RoundEnd> one_stuck;
  for (uint32_t f = 0; f < 3; ++f) add_rounds(one_stuck, f, 0.02 + 0.001 * f, f == 2 ? 2.0 : 6.0, 0.02);
  BOOST_CHECK_CLOSE(uptime_of(one_stuck, 6.0), (2.0 + (2.0 + 0.06) / 6.0) / 3.0, 1.0);
}

BOOST_AUTO_TEST_CASE(waiting_for_learners_and_for_final_evaluations_is_not_downtime) {
  // The syncer waited 60 s for learners to load their model and data, they
  // trained 10 s (a round every 20 ms), and it waited 5 s more for the final
  // evaluations: over the syncer's whole 75 s the model advanced 13% of the
  // time; over its training, all of it.
  std::vector<RoundEnd> ends;
  add_rounds(ends, 0, 60.02, 70.0, 0.02);
  BOOST_CHECK_LT(uptime_of(ends, 75.0), 0.2);
  BOOST_CHECK_GT(uptime_of(ends, 70.0, 60.0), 0.99);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
