// ComputePool's fairness: learners that re-submit their next step at once
// take turns; none can hold the pool while another waits. (The arena-per-
// learner design it replaced let one learner run thousands of steps ahead.)
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "atoll/compute_pool.h"

namespace atl {
namespace {

// `chains` learners, each taking `steps` steps and submitting the next from
// inside the one that runs (as a learner does): the order steps started in.
std::vector<int> run_chains(int threads, int chains, int steps) {
  ComputePool pool(threads);
  std::mutex mu;
  std::vector<int> started;
  std::vector<int> left(static_cast<size_t>(chains), steps);
  std::function<void(int)> step = [&](int c) {
    {
      std::lock_guard lock(mu);
      started.push_back(c);
      if (--left[static_cast<size_t>(c)] == 0) return;
    }
    pool.submit([&, c] { step(c); });  // at once, before this step is done
  };
  // The first steps are submitted from inside the pool, so that with one
  // thread none starts (and re-submits) before all are queued.
  pool.submit([&] {
    for (int c = 0; c < chains; ++c) pool.submit([&, c] { step(c); });
  });
  pool.wait_idle();
  return started;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(compute_pool_test)

BOOST_AUTO_TEST_CASE(one_thread_serves_learners_in_turn) {
  const std::vector<int> started = run_chains(1, 3, 50);
  BOOST_REQUIRE_EQUAL(started.size(), 150u);
  for (size_t i = 0; i < started.size(); ++i) BOOST_REQUIRE_EQUAL(started[i], static_cast<int>(i % 3));
}

// With more threads the same FIFO holds at admission, but which thread runs
// first afterwards is the OS's: no order is asserted there, only that every
// step ran and wait_idle() waited for them.
BOOST_AUTO_TEST_CASE(two_threads_run_every_step_before_wait_idle_returns) {
  const std::vector<int> started = run_chains(2, 4, 100);
  BOOST_REQUIRE_EQUAL(started.size(), 400u);
  for (int c = 0; c < 4; ++c) BOOST_CHECK_EQUAL(std::count(started.begin(), started.end(), c), 100);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
