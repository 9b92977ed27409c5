// Machine load: /proc/stat's aggregate line parsed, and the shares others
// and the hypervisor took between two samples.
#include <boost/test/unit_test.hpp>

#include "atoll/machine_load.h"

namespace atl {
namespace {

BOOST_AUTO_TEST_SUITE(machine_load_test)

BOOST_AUTO_TEST_CASE(parses_the_aggregate_line) {
  // user nice system idle iowait irq softirq steal guest guest_nice, at 100 ticks a second
  auto s = parse_proc_stat("cpu  1000 50 250 6000 100 10 40 300 20 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n", 100);
  BOOST_REQUIRE(s.ok());
  BOOST_CHECK_CLOSE(s->busy, 13.5, 1e-9);  // 1000 + 50 + 250 + 10 + 40 ticks; guest is inside user
  BOOST_CHECK_CLOSE(s->idle, 61.0, 1e-9);
  BOOST_CHECK_CLOSE(s->steal, 3.0, 1e-9);
  // Kernels before 2.6.24 stop at steal (guest came then): the eight fields are enough.
  BOOST_CHECK(parse_proc_stat("cpu 1 2 3 4 5 6 7 8", 100).ok());
}

BOOST_AUTO_TEST_CASE(names_what_is_wrong) {
  auto first = parse_proc_stat("cpu0 1 2 3 4 5 6 7 8\n", 100);
  BOOST_REQUIRE(!first.ok());
  BOOST_CHECK_NE(first.status().message().find("aggregate"), std::string::npos);
  auto short_line = parse_proc_stat("cpu  1 2 3 4 5 6\n", 100);
  BOOST_REQUIRE(!short_line.ok());
  BOOST_CHECK_NE(short_line.status().message().find("softirq"), std::string::npos);
  auto word = parse_proc_stat("cpu  1 2 x3 4 5 6 7 8\n", 100);
  BOOST_REQUIRE(!word.ok());
  BOOST_CHECK_NE(word.status().message().find("system field is not a count: 'x3'"), std::string::npos);
}

BOOST_AUTO_TEST_CASE(shares_of_the_interval) {
  const CpuSample begin{100, 300, 10, 40};
  // 20 s passed over the cores: 12 busy (7 of them this process), 6 idle, 2 stolen.
  const CpuSample end{112, 306, 12, 47};
  const MachineLoad load = load_between(begin, end);
  BOOST_CHECK_CLOSE(load.others, 5.0 / 20, 1e-9);
  BOOST_CHECK_CLOSE(load.steal, 2.0 / 20, 1e-9);
  // No time passed, or the process's clock ran ahead of the coarser ticks: no share, never a negative one.
  BOOST_CHECK_EQUAL(load_between(begin, begin).others, 0.0);
  const CpuSample ahead{101, 301, 10, 42};
  BOOST_CHECK_EQUAL(load_between(begin, ahead).others, 0.0);
}

// The run's learner processes on this machine are its own: their CPU time
// is not others' load.
BOOST_AUTO_TEST_CASE(the_runs_learner_processes_are_not_others) {
  const CpuSample begin{100, 300, 10, 40, 0};
  // 20 s over the cores: 12 busy, 7 of them this process and 4 its learners' processes.
  const CpuSample end{112, 306, 12, 47, 4};
  BOOST_CHECK_CLOSE(load_between(begin, end).others, 1.0 / 20, 1e-9);
  const CpuSample over{112, 306, 12, 47, 9};  // they reported more than the ticks show: none, not negative
  BOOST_CHECK_EQUAL(load_between(begin, over).others, 0.0);
}

BOOST_AUTO_TEST_CASE(a_machine_has_one_name) {
  const uint64_t id = machine_id();
  BOOST_CHECK_NE(id, 0u);  // Linux has a boot id
  BOOST_CHECK_EQUAL(machine_id(), id);
}

BOOST_AUTO_TEST_CASE(this_machine_counts_this_process) {
  const auto begin = sample_cpu();
  BOOST_REQUIRE_MESSAGE(begin, "/proc/stat is readable on Linux");
  // Spin until this process has used 0.3 s of CPU: the machine's busy time grows by at least that, less a tick.
  volatile double x = 0;
  std::optional<CpuSample> end;
  do {
    for (int i = 0; i < 1000000; ++i) x = x + 1e-9;
    end = sample_cpu();
  } while (end && end->process - begin->process < 0.3);
  BOOST_REQUIRE(end);
  BOOST_CHECK_GE(end->busy - begin->busy, 0.3 - 0.05);
  const MachineLoad load = load_between(*begin, *end);
  BOOST_CHECK(load.others >= 0.0 && load.others <= 1.0);
  BOOST_CHECK(load.steal >= 0.0 && load.steal <= 1.0);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace atl
