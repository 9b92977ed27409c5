// advise_link: the options simulated on a user's link, the first that keeps
// the target chosen, bad questions refused by name.
#include <boost/test/unit_test.hpp>

#include "atoll/link_advice.h"

namespace atl {
namespace {

// Streaming DiLoCo's 100B workload (36 fragments, H = 100, int4) on 1.5 Gbit/s
// links: a whole fragment's push and broadcast (12.5 Gbit each) take 16.7 s in
// sequence against tau x T = 9.8 s; streamed, about 9 s.
LinkQuestion hundred_b(const char* link) {
  LinkQuestion q;
  q.parameters = 1e11;
  q.step_seconds = 4.9;
  q.outer.fragments = 36;
  q.outer.sync_every = 100;
  q.link = *parse_link_shape(link);
  q.target = 0.99;
  return q;
}

BOOST_AUTO_TEST_SUITE(link_advice_test)

BOOST_AUTO_TEST_CASE(a_link_too_slow_for_whole_fragments_is_advised_to_stream) {
  auto advice = advise_link(hundred_b("rate=1.5gbit,delay=20ms"));
  BOOST_REQUIRE_MESSAGE(advice.ok(), advice.status().to_string());
  BOOST_REQUIRE_EQUAL(advice->options.size(), 5u);
  for (const auto& o : advice->options)
    BOOST_TEST_MESSAGE(o.name << ": " << o.utilization << ", needs "
                              << (o.needs_bits_per_second ? *o.needs_bits_per_second / 1e9 : -1) << " Gbit/s");
  const LinkOption& as_set = advice->options[0];
  BOOST_CHECK(as_set.sets.empty());
  BOOST_CHECK_LT(as_set.utilization, 0.9);
  BOOST_REQUIRE_EQUAL(advice->chosen, 1);
  const LinkOption& streamed = advice->options[1];
  BOOST_CHECK_EQUAL(streamed.name, "streamed");
  BOOST_CHECK(streamed.sets == (std::vector<std::string>{"outer.fragments=432", "outer.stream=12"}));
  BOOST_CHECK_GE(streamed.utilization, 0.99);
  // Every streamed option needs less than the topology's settings, and eager updates less again.
  for (size_t i = 1; i < advice->options.size(); ++i) {
    BOOST_REQUIRE(advice->options[i].needs_bits_per_second && as_set.needs_bits_per_second);
    BOOST_CHECK_LT(*advice->options[i].needs_bits_per_second, *as_set.needs_bits_per_second);
  }
  BOOST_CHECK_LT(*advice->options[2].needs_bits_per_second, *streamed.needs_bits_per_second);
  BOOST_CHECK(!streamed.quality.empty());
}

BOOST_AUTO_TEST_CASE(a_model_with_few_tensors_gets_no_streamed_options_and_says_why) {
  LinkQuestion q = hundred_b("rate=1.5gbit");
  q.tensors = 40;  // 36 fragments: no room for 2 per push
  auto advice = advise_link(q);
  BOOST_REQUIRE_MESSAGE(advice.ok(), advice.status().to_string());
  BOOST_CHECK_EQUAL(advice->options.size(), 1u);
  BOOST_CHECK_EQUAL(advice->chosen, -1);
  BOOST_CHECK(advice->note.find("40 tensors") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_bad_question_is_refused_by_name) {
  LinkQuestion q = hundred_b("delay=20ms");  // no rate
  auto advice = advise_link(q);
  BOOST_REQUIRE(!advice.ok());
  BOOST_CHECK(std::string(advice.status().message()).find("rate") != std::string::npos);
  q = hundred_b("rate=1gbit");
  q.target = 1.5;
  BOOST_CHECK(!advise_link(q).ok());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace atl
