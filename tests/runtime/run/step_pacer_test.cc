// StepPacer: dedicated hardware's arithmetic (a learner's step takes the
// measured compute over its share of the threads, whatever the machine gives
// it), and the measurement of one step before a run.
#include <boost/test/unit_test.hpp>

#include "atoll/step_pacer.h"

namespace atl {
namespace {

BOOST_AUTO_TEST_SUITE(step_pacer_test)

BOOST_AUTO_TEST_CASE(a_step_takes_its_share_of_the_threads) {
  const double h = 1.15;
  StepPacer pacer(2, 3.2, 0.12, 8, h);  // 2 threads; speeds 1, 1, 0.7, 0.5; 0.12 s per step at batch 8
  // A speed-1 learner owns 2 * 1 / 3.2 = 0.625 threads.
  BOOST_CHECK_CLOSE(pacer.step_seconds(1.0, 8), h * 0.12 / 0.625, 1e-9);
  BOOST_CHECK_CLOSE(pacer.step_seconds(0.5, 8), 2 * pacer.step_seconds(1.0, 8), 1e-9);  // half the share
  BOOST_CHECK_CLOSE(pacer.step_seconds(1.0, 16), 2 * pacer.step_seconds(1.0, 8), 1e-9);  // twice the work
  // A step that took 0.05 s of wall (the others died: the pool is free) waits out the rest.
  BOOST_CHECK_CLOSE(pacer.pace(0.05, 1.0, 8), pacer.step_seconds(1.0, 8) - 0.05, 1e-9);
  // A late step is not made up, and is counted.
  BOOST_CHECK_EQUAL(pacer.pace(10.0, 1.0, 8), 0.0);
  BOOST_CHECK_EQUAL(pacer.paced(), 2u);
  BOOST_CHECK_EQUAL(pacer.late(), 1u);
}

BOOST_AUTO_TEST_CASE(a_share_never_exceeds_one_thread) {
  StepPacer pacer(4, 1.0, 0.2, 8, 1.6);  // one learner on four threads: its step is single-threaded
  BOOST_CHECK_CLOSE(pacer.step_seconds(1.0, 8), 1.6 * 0.2, 1e-9);
  BOOST_CHECK_CLOSE(pacer.step_seconds(0.5, 8), 1.6 * 0.2, 1e-9);  // 2 threads' share: capped at 1
}

BOOST_AUTO_TEST_CASE(one_step_is_measured_on_the_pool) {
  Topology t;
  t.model.kind = ModelKind::kMlp;
  t.model.hidden = {64};
  t.data.kind = DataKind::kSynthetic;
  t.data.examples = 512;
  auto job = Job::load(t, "");
  BOOST_REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  ComputePool pool(2);
  auto seconds = measure_step_compute(**job, pool, 4, 32, 3);  // at most the pool's 2 at once
  BOOST_REQUIRE_MESSAGE(seconds.ok(), seconds.status().to_string());
  BOOST_CHECK_GT(*seconds, 0.0);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace atl
