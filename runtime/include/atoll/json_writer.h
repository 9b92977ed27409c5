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
  void str(const std::string& s) {
    out_ << '"';
    for (char c : s) {
      if (c == '"' || c == '\\') out_ << '\\' << c;
      else if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out_ << buf;
      } else out_ << c;
    }
    out_ << '"';
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
