// StepPacer: dedicated hardware's arithmetic. Calibration takes the median
// compute time of the first steps (each learner's first excluded); then a
// learner's step takes compute / its share of the threads, whatever the
// machine gives it.
#include <boost/test/unit_test.hpp>

#include "atoll/step_pacer.h"

namespace atl {
namespace {

BOOST_AUTO_TEST_SUITE(step_pacer)

BOOST_AUTO_TEST_CASE(calibrates_on_the_median_then_paces_by_share) {
  StepPacer pacer(2, 3.2, 3);  // 2 threads; speeds 1, 1, 0.7, 0.5
  BOOST_CHECK(!pacer.pace(9.0, 9.0, 1.0, true));   // a cold first step: not a sample
  BOOST_CHECK(!pacer.pace(0.10, 0.2, 1.0, false));
  BOOST_CHECK(!pacer.pace(0.30, 0.4, 0.5, false));
  BOOST_CHECK(!pacer.calibration().done);
  BOOST_CHECK(!pacer.pace(0.12, 0.2, 0.7, false));  // the third sample fixes the pace
  const auto c = pacer.calibration();
  BOOST_REQUIRE(c.done);
  BOOST_CHECK_EQUAL(c.samples, 3);
  BOOST_CHECK_CLOSE(c.compute_seconds, 0.12, 1e-9);  // the median, not the mean (0.173)
  // A speed-1 learner owns 2 * 1 / 3.2 = 0.625 threads: 0.12 / 0.625, with 5% headroom.
  BOOST_CHECK_CLOSE(c.step_seconds, 1.05 * 0.12 / 0.625, 1e-9);
  // A step that took 0.05 s of wall (the others died: the pool is free) waits out the rest.
  const auto wait = pacer.pace(0.1, 0.05, 1.0, false);
  BOOST_REQUIRE(wait);
  BOOST_CHECK_CLOSE(*wait, c.step_seconds - 0.05, 1e-9);
  // Half the speed: half the share, twice the step.
  BOOST_CHECK_CLOSE(*pacer.pace(0.1, 0.0, 0.5, false), 2 * c.step_seconds, 1e-9);
  // A late step is not made up, and is counted.
  BOOST_CHECK_EQUAL(*pacer.pace(0.1, 10.0, 1.0, false), 0.0);
  BOOST_CHECK_EQUAL(pacer.calibration().paced, 3u);
  BOOST_CHECK_EQUAL(pacer.calibration().late, 1u);
}

BOOST_AUTO_TEST_CASE(a_share_never_exceeds_one_thread) {
  StepPacer pacer(4, 1.0, 1);  // one learner on four threads: its step is single-threaded
  BOOST_CHECK(!pacer.pace(0.2, 0.2, 1.0, false));
  BOOST_CHECK_CLOSE(pacer.calibration().step_seconds, 1.05 * 0.2, 1e-9);
  BOOST_CHECK_CLOSE(pacer.step_seconds(0.2, 0.5), 1.05 * 0.2, 1e-9);  // 4 * 0.5 / 1 = 2 threads: capped at 1
}

BOOST_AUTO_TEST_CASE(steps_without_a_compute_time_are_not_samples) {
  StepPacer pacer(2, 2.0, 2);
  BOOST_CHECK(!pacer.pace(0.0, 0.1, 1.0, false));  // an external learner's steps carry no compute time
  BOOST_CHECK(!pacer.pace(0.1, 0.1, 1.0, false));
  BOOST_CHECK(!pacer.calibration().done);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace atl
