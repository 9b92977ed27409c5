// EventQueue: the order of one binary heap, whatever run each event is given,
// checked against std::priority_queue on streams like a simulation's.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <queue>
#include <random>
#include <utility>
#include <vector>

#include "atoll/event_queue.h"

namespace atl {
namespace {

struct Ev {
  double t;
  uint64_t seq;
  size_t run;
};
struct Later {
  bool operator()(const Ev& a, const Ev& b) const { return a.t != b.t ? a.t > b.t : a.seq > b.seq; }
};

// Events scheduled as a simulation does, each popped one scheduling one or
// two more (up to 64 pending), 200,000 in all: kinds a fixed delay ahead (each with its run), some jittered, and
// far ones on the heap; times collide often (delays on a coarse grid).
// Returns the order popped by the queue and by the reference.
std::pair<std::vector<uint64_t>, std::vector<uint64_t>> simulate(uint32_t seed, bool jitter) {
  std::mt19937_64 rng(seed);
  const double delays[EventQueue<Ev>::kRuns] = {1.0, 0.05, 0.05, 0.25};
  EventQueue<Ev> queue;
  std::priority_queue<Ev, std::vector<Ev>, Later> reference;
  uint64_t seq = 0;
  const auto schedule = [&](double now) {
    const size_t run = rng() % (EventQueue<Ev>::kRuns + 1);  // kRuns: kHeap
    double delay = run < EventQueue<Ev>::kRuns ? delays[run] : 0.05 * double(rng() % 400);
    if (jitter && rng() % 4 == 0) delay = 0.05 * double(rng() % 30);  // out of its run's order
    const Ev e{now + delay, seq++, run};
    queue.push(e, e.run);
    reference.push(e);
    BOOST_REQUIRE_EQUAL(queue.top().seq, reference.top().seq);  // top() after a push, not only after a pop
  };
  for (int i = 0; i < 20; ++i) schedule(0.0);
  std::vector<uint64_t> got, want;
  while (!reference.empty()) {
    BOOST_REQUIRE(!queue.empty());
    BOOST_REQUIRE_EQUAL(queue.size(), reference.size());
    const Ev e = queue.top();
    queue.pop();
    got.push_back(e.seq);
    want.push_back(reference.top().seq);
    reference.pop();
    if (seq >= 200000) continue;  // then drain
    schedule(e.t);
    if (reference.size() < 64 && rng() % 2) schedule(e.t);
  }
  BOOST_CHECK(queue.empty());
  return {got, want};
}

BOOST_AUTO_TEST_SUITE(event_queue_test)

BOOST_AUTO_TEST_CASE(events_in_their_runs_come_out_in_a_heaps_order) {
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const auto [got, want] = simulate(seed, false);
    BOOST_REQUIRE_GE(got.size(), 200000u);  // every event scheduled came out
    BOOST_CHECK(got == want);
  }
}

BOOST_AUTO_TEST_CASE(events_out_of_their_runs_order_come_out_in_a_heaps_order_too) {
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const auto [got, want] = simulate(seed, true);
    BOOST_REQUIRE_GE(got.size(), 200000u);  // every event scheduled came out
    BOOST_CHECK(got == want);
  }
}

BOOST_AUTO_TEST_CASE(ties_in_time_go_in_the_order_scheduled_across_runs_and_the_heap) {
  EventQueue<Ev> queue;
  // All at t = 1: run 0, the heap, run 1, run 0 again.
  queue.push({1.0, 0, 0}, 0);
  queue.push({1.0, 1, EventQueue<Ev>::kHeap}, EventQueue<Ev>::kHeap);
  queue.push({1.0, 2, 1}, 1);
  queue.push({1.0, 3, 0}, 0);
  queue.push({0.5, 4, 0}, 0);  // earlier than its run's last: to the heap, and first out
  std::vector<uint64_t> order;
  while (!queue.empty()) order.push_back(queue.top().seq), queue.pop();
  BOOST_CHECK((order == std::vector<uint64_t>{4, 0, 1, 2, 3}));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace atl
