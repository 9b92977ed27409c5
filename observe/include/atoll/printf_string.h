// printf_string: printf's formatting into a std::string, for the text that
// shows a run (tables, charts, verdicts, the simulator's report).
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <string>

namespace atl {

// What std::printf(format, ...) would print, whatever its length; empty if
// the format is invalid. The compiler checks the arguments against a literal
// format.
[[gnu::format(printf, 1, 2)]] inline std::string printf_string(const char* format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  char buf[256];
  const int n = std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  std::string out;
  if (n >= 0 && static_cast<size_t>(n) < sizeof buf) {
    out.assign(buf, static_cast<size_t>(n));
  } else if (n >= 0) {
    out.resize(static_cast<size_t>(n));
    std::vsnprintf(out.data(), out.size() + 1, format, again);
  }
  va_end(again);
  return out;
}

}  // namespace atl
