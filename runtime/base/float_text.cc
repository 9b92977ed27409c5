#include "atoll/float_text.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string_view>

namespace atl {

std::string shortest_floats(const std::string& text) {
  const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; };
  std::string out;
  out.reserve(text.size());
  char quote = 0;  // inside a string: its quote
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (quote) {
      out += c;
      ++i;
      if (c == '\\' && quote == '"' && i < text.size()) out += text[i++];
      else if (c == quote) quote = 0;
      continue;
    }
    if (c == '#') {  // a TOML comment, to the end of its line, as it was written
      const size_t end = std::min(text.find('\n', i), text.size());
      out.append(text, i, end - i);
      i = end;
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
      out += c;
      ++i;
      continue;
    }
    const bool starts_number = std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+';
    if (!starts_number || (i > 0 && word(text[i - 1]))) {
      out += c;
      ++i;
      continue;
    }
    size_t end = i + 1;
    while (end < text.size() && (word(text[end]) || text[end] == '-' || text[end] == '+')) ++end;
    const std::string_view token(text.data() + i, end - i);
    double value = 0;
    const auto parsed = std::from_chars(token.data(), token.data() + token.size(), value);
    const bool is_float = token.find_first_of(".eE") != std::string_view::npos;
    if (is_float && parsed.ec == std::errc() && parsed.ptr == token.data() + token.size()) {
      char buf[32];
      const auto r = std::to_chars(buf, buf + sizeof buf, value);
      std::string shortest(buf, r.ptr);
      if (shortest.find_first_of(".e") == std::string::npos) shortest += ".0";  // 60, still a float
      out += shortest;
    } else {
      out.append(token);
    }
    i = end;
  }
  return out;
}

}  // namespace atl
