// JsonWriter: a minimal JSON writer for the report, the run view, sweeps and
// the simulation report: objects, arrays, strings, finite numbers (a
// non-finite number is written as null).
#pragma once

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <type_traits>

namespace atl {

class JsonWriter {
 public:
  void open(const char* key, char bracket) {
    comma();
    if (key) str(key), out_ << ':';
    out_ << bracket;
    first_ = true;
  }
  void close(char bracket) {
    out_ << bracket;
    first_ = false;
  }
  template <class T>
  void field(const char* key, T value) {
    comma();
    str(key);
    out_ << ':';
    value_of(value);
  }
  template <class T>
  void item(T value) {
    comma();
    value_of(value);
  }
  std::string text() const { return out_.str(); }

 private:
  void comma() {
    if (!first_) out_ << ',';
    first_ = false;
  }
  // JSON text is UTF-8: a byte that starts no valid sequence (a byte-level
  // model's sample may hold any) is written as U+FFFD, the replacement character.
  void str(const std::string& s) {
    out_ << '"';
    for (size_t i = 0; i < s.size();) {
      const auto c = static_cast<unsigned char>(s[i]);
      if (c == '"' || c == '\\') {
        out_ << '\\' << s[i++];
      } else if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out_ << buf;
        ++i;
      } else if (c < 0x80) {
        out_ << s[i++];
      } else if (const size_t n = utf8_length(s, i); n > 0) {
        out_.write(s.data() + i, static_cast<std::streamsize>(n));
        i += n;
      } else {
        out_ << "\\ufffd";
        ++i;
      }
    }
    out_ << '"';
  }
  // Bytes of the well-formed UTF-8 sequence at s[i] (a byte >= 0x80), or 0.
  static size_t utf8_length(const std::string& s, size_t i) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const auto cont = [&](size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
    const unsigned char c = b(0);
    if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
      if (!cont(1) || !cont(2)) return 0;
      if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) > 0x9F)) return 0;  // overlong, surrogate
      return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
      if (!cont(1) || !cont(2) || !cont(3)) return 0;
      if ((c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) > 0x8F)) return 0;  // overlong, past U+10FFFF
      return 4;
    }
    return 0;
  }
  void value_of(const std::string& s) { str(s); }
  void value_of(const char* s) { str(s); }
  void value_of(bool b) { out_ << (b ? "true" : "false"); }
  void value_of(double d) {
    if (!std::isfinite(d)) {
      out_ << "null";
      return;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", d);
    out_ << buf;
  }
  template <class I>
  void value_of(I i) requires std::is_integral_v<I> { out_ << i; }

  std::ostringstream out_;
  bool first_ = true;
};

}  // namespace atl
