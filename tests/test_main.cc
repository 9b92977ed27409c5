// The one main() of a test executable; the suites are in the other files.
#define BOOST_TEST_MODULE atoll
#include <boost/test/unit_test.hpp>
