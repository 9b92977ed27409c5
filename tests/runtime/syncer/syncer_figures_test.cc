// SyncerFigures: what a checkpoint carries of the syncer's counts, encoded
// and read back whole; what does not decode is named.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "atoll/syncer_figures.h"

namespace atl {

BOOST_AUTO_TEST_SUITE(syncer_figures_test)

SyncerFigures some_figures() {
  SyncerFigures f;
  f.started_unix_ms = 1'800'000'000'123;
  f.seconds = 61.5;
  f.tokens = 123456;
  f.allocated_seconds = 240.25;
  f.cpu_seconds = 3.5;
  SyncerStats& s = f.stats;
  uint64_t n = 1;
  for (const SyncerCount& c : kSyncerCounts) s.*c.field = 10 * n++;  // each its own value
  s.rounds = 77;
  s.rejected = 5;
  s.quorum_sum = 150.0;
  s.grace_wait_sum = 1.25;
  s.round_seconds_sum = 7.5;
  s.adopted_broadcasts = 70;
  s.adopted_seconds_sum = 3.0;
  s.adopted_seconds_max = 0.5;
  s.good_seconds = 200.0;
  s.first_welcome = 0.75;
  s.final_seconds = 60.0;
  s.bytes_received = 1 << 20;
  s.bytes_sent = 3 << 20;
  s.round_ends = {{1.0, 0}, {2.0, 1}};
  s.recovery_seconds = {4.5};
  s.evaluations.push_back({30.0, 5000, 1, 3, 9, 2.5, 1.2, 0.4, 100, true});
  LearnerRecord l;
  l.connected = true;
  l.incarnation = 7;
  l.registrations = 2;
  l.steps = 10, l.tokens = 80, l.past_steps = 5, l.past_tokens = 40;
  l.step_seconds = 0.1;
  l.loss = 1.5;
  l.failures = 1;
  l.merged = 9;
  l.speed = 0.5;
  l.batch_size = 8;
  l.member = true;
  l.qualified = true;
  l.member_seconds = 12.0;
  l.member_since = 20.0;
  l.departures = 1;
  f.learners = {LearnerRecord{}, l};
  return f;
}

BOOST_AUTO_TEST_CASE(figures_read_back_as_written) {
  const SyncerFigures f = some_figures();
  auto back = decode_figures(encode_figures(f));
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_CHECK_EQUAL(back->started_unix_ms, f.started_unix_ms);
  BOOST_CHECK_EQUAL(back->seconds, f.seconds);
  BOOST_CHECK_EQUAL(back->tokens, f.tokens);
  BOOST_CHECK_EQUAL(back->allocated_seconds, f.allocated_seconds);
  BOOST_CHECK_EQUAL(back->cpu_seconds, f.cpu_seconds);
  for (const SyncerCount& c : kSyncerCounts) BOOST_CHECK_EQUAL(back->stats.*c.field, f.stats.*c.field);
  const SyncerStats &a = back->stats, &b = f.stats;
  BOOST_CHECK_EQUAL(a.rounds, b.rounds);
  BOOST_CHECK_EQUAL(a.rejected, b.rejected);
  BOOST_CHECK_EQUAL(a.quorum_sum, b.quorum_sum);
  BOOST_CHECK_EQUAL(a.grace_wait_sum, b.grace_wait_sum);
  BOOST_CHECK_EQUAL(a.round_seconds_sum, b.round_seconds_sum);
  BOOST_CHECK_EQUAL(a.adopted_broadcasts, b.adopted_broadcasts);
  BOOST_CHECK_EQUAL(a.adopted_seconds_sum, b.adopted_seconds_sum);
  BOOST_CHECK_EQUAL(a.adopted_seconds_max, b.adopted_seconds_max);
  BOOST_CHECK_EQUAL(a.good_seconds, b.good_seconds);
  BOOST_CHECK_EQUAL(a.first_welcome, b.first_welcome);
  BOOST_CHECK_EQUAL(a.final_seconds, b.final_seconds);
  BOOST_CHECK_EQUAL(a.bytes_received, b.bytes_received);
  BOOST_CHECK_EQUAL(a.bytes_sent, b.bytes_sent);
  BOOST_CHECK(a.round_ends == b.round_ends);
  BOOST_CHECK(a.recovery_seconds == b.recovery_seconds);
  BOOST_REQUIRE_EQUAL(a.evaluations.size(), 1u);
  BOOST_CHECK_EQUAL(a.evaluations[0].tokens, 5000u);
  BOOST_CHECK_EQUAL(a.evaluations[0].versions_sum, 9u);
  BOOST_CHECK_EQUAL(a.evaluations[0].accuracy, 0.4);
  BOOST_CHECK(a.evaluations[0].final);
  BOOST_REQUIRE_EQUAL(back->learners.size(), 2u);
  const LearnerRecord &x = back->learners[1], &y = f.learners[1];
  BOOST_CHECK(x.connected && x.member && x.qualified);
  BOOST_CHECK_EQUAL(x.incarnation, y.incarnation);
  BOOST_CHECK_EQUAL(x.registrations, y.registrations);
  BOOST_CHECK_EQUAL(x.steps + x.past_steps, y.steps + y.past_steps);
  BOOST_CHECK_EQUAL(x.tokens, y.tokens);
  BOOST_CHECK_EQUAL(x.past_tokens, y.past_tokens);
  BOOST_CHECK_EQUAL(x.step_seconds, y.step_seconds);
  BOOST_CHECK_EQUAL(x.loss, y.loss);
  BOOST_CHECK_EQUAL(x.failures, y.failures);
  BOOST_CHECK_EQUAL(x.merged, y.merged);
  BOOST_CHECK_EQUAL(x.speed, y.speed);
  BOOST_CHECK_EQUAL(x.batch_size, y.batch_size);
  BOOST_CHECK_EQUAL(x.member_seconds, y.member_seconds);
  BOOST_CHECK_EQUAL(x.member_since, y.member_since);
  BOOST_CHECK_EQUAL(x.departures, y.departures);
  BOOST_CHECK(!back->learners[0].member);
}

BOOST_AUTO_TEST_CASE(figures_that_do_not_decode_are_named) {
  std::vector<uint8_t> bytes = encode_figures(some_figures());
  auto odd = decode_figures(std::span(bytes).first(bytes.size() - 3));
  BOOST_REQUIRE(!odd.ok());
  BOOST_CHECK_MESSAGE(odd.status().to_string().find("8-byte words") != std::string::npos, odd.status().to_string());
  auto cut = decode_figures(std::span(bytes).first(bytes.size() / 2 / 8 * 8));
  BOOST_REQUIRE(!cut.ok());
  BOOST_CHECK_MESSAGE(cut.status().to_string().find("figures") != std::string::npos, cut.status().to_string());
}

BOOST_AUTO_TEST_CASE(figures_no_syncer_writes_are_refused_by_name) {
  SyncerFigures f = some_figures();
  f.stats.good_seconds = std::nan("");
  auto nan = decode_figures(encode_figures(f));
  BOOST_REQUIRE(!nan.ok());
  BOOST_CHECK_MESSAGE(nan.status().to_string().find("good seconds") != std::string::npos, nan.status().to_string());
  f = some_figures();
  f.started_unix_ms = -5;
  auto early = decode_figures(encode_figures(f));
  BOOST_REQUIRE(!early.ok());
  BOOST_CHECK_MESSAGE(early.status().to_string().find("started at -5") != std::string::npos, early.status().to_string());
  f = some_figures();
  f.seconds = -1.0;
  BOOST_CHECK(!decode_figures(encode_figures(f)).ok());
  f = some_figures();
  f.stats.first_welcome = -1.0;  // not yet: fine
  f.stats.final_seconds = -1.0;
  BOOST_CHECK(decode_figures(encode_figures(f)).ok());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
