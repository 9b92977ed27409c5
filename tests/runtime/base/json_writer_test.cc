// JsonWriter: what it writes is JSON, whatever bytes a string holds.
#include <boost/test/unit_test.hpp>

#include "atoll/json_writer.h"

namespace atl {
namespace {

std::string written(const std::string& s) {
  JsonWriter w;
  w.open(nullptr, '{');
  w.field("s", s);
  w.close('}');
  return w.text();
}

BOOST_AUTO_TEST_SUITE(json_writer_test)

BOOST_AUTO_TEST_CASE(strings_are_escaped_and_stay_valid_utf8) {
  BOOST_CHECK_EQUAL(written("a\"b\\c\n"), R"({"s":"a\"b\\c\u000a"})");
  // Well-formed UTF-8 goes through as it is: é, €, 𝄞.
  BOOST_CHECK_EQUAL(written("\xC3\xA9\xE2\x82\xAC\xF0\x9D\x84\x9E"), "{\"s\":\"\xC3\xA9\xE2\x82\xAC\xF0\x9D\x84\x9E\"}");
  // A byte-level model's sample: a stray continuation byte, a truncated
  // sequence at the end, an overlong form, a surrogate; each bad byte one U+FFFD.
  BOOST_CHECK_EQUAL(written("a\x9C" "b"), R"({"s":"a\ufffdb"})");
  BOOST_CHECK_EQUAL(written("x\xE2\x82"), R"({"s":"x\ufffd\ufffd"})");
  BOOST_CHECK_EQUAL(written("\xC0\xAF"), R"({"s":"\ufffd\ufffd"})");
  BOOST_CHECK_EQUAL(written("\xED\xA0\x80"), R"({"s":"\ufffd\ufffd\ufffd"})");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace atl
