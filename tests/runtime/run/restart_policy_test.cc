// The supervisors' restart policy, failure by failure: backoff, window, give-up.
#include <boost/test/unit_test.hpp>

#include "atoll/restart_policy.h"

namespace atl {

BOOST_AUTO_TEST_SUITE(restart_policy_test)

BOOST_AUTO_TEST_CASE(backoff_doubles_inside_the_window_up_to_its_cap) {
  RestartPolicy p({/*max_restarts=*/10, /*window_seconds=*/10.0, /*backoff_initial=*/0.05, /*backoff_max=*/0.3});
  BOOST_CHECK_EQUAL(*p.on_failure(0.0), 0.05);
  BOOST_CHECK_EQUAL(*p.on_failure(1.0), 0.1);
  BOOST_CHECK_EQUAL(*p.on_failure(2.0), 0.2);
  BOOST_CHECK_EQUAL(*p.on_failure(3.0), 0.3);  // capped
  BOOST_CHECK_EQUAL(*p.on_failure(3.5), 0.3);
}

BOOST_AUTO_TEST_CASE(failures_older_than_the_window_are_forgotten) {
  RestartPolicy p({2, 10.0, 0.05, 2.0});
  BOOST_CHECK(p.on_failure(0.0));
  BOOST_CHECK(p.on_failure(5.0));
  BOOST_CHECK_EQUAL(*p.on_failure(10.5), 0.1);  // the one at 0 left the window: two inside
  BOOST_CHECK(!p.gave_up());
}

BOOST_AUTO_TEST_CASE(more_than_max_restarts_inside_the_window_gives_up_for_good) {
  RestartPolicy p({2, 60.0, 0.05, 2.0});
  BOOST_CHECK(p.on_failure(0.0));
  BOOST_CHECK(p.on_failure(1.0));
  BOOST_CHECK(!p.on_failure(2.0));  // the third within 60 s
  BOOST_CHECK(p.gave_up());
  BOOST_CHECK(!p.on_failure(1000.0));  // given up stays given up
}

BOOST_AUTO_TEST_CASE(zero_restarts_gives_up_at_the_first_failure) {
  RestartPolicy p({0, 10.0, 0.05, 2.0});
  BOOST_CHECK(!p.on_failure(0.0));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
