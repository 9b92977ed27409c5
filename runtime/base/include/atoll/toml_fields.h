// TOML fields for atoll's configuration files (topology files, fault plans,
// simulation plans): typed getters whose errors name the file, the line and the key,
// "topo.toml:12: outer.quorum: expected an integer, got a string".
//
// The getters throw KeyError; a parser catches it once at the top and turns
// it into a Status. Needs toml++ (a target that includes this links
// tomlplusplus::tomlplusplus itself).
#pragma once

#include <toml++/toml.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "atoll/status.h"

namespace atl::toml_fields {

// Where an error came from: "file:line: ".
inline std::string where(const toml::node& n) {
  const auto& src = n.source();
  std::string file = src.path ? std::string(*src.path) : std::string("<topology>");
  if (file.starts_with("--set ")) return file + ": ";  // a one-line override has no line to name
  return file + ":" + std::to_string(src.begin.line) + ": ";
}

inline const char* type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date or time";
  }
}

// Thrown inside the mapping, caught once at the top.
struct KeyError {
  std::string text;
};

[[noreturn]] inline void fail(const toml::node& n, const std::string& key, const std::string& what) {
  throw KeyError{where(n) + key + ": " + what};
}

inline int64_t get_int(const toml::node& n, const std::string& key, int64_t lo, int64_t hi) {
  // Type first: value<int64_t>() of a float node converts it unchecked (7e52 is UB; found by scripts/fuzz).
  if (!n.is_integer()) fail(n, key, std::string("expected an integer, got ") + type_name(n));
  const auto v = n.value<int64_t>();
  if (!v) fail(n, key, std::string("expected an integer, got ") + type_name(n));
  if (*v < lo || *v > hi) fail(n, key, std::to_string(*v) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return *v;
}
inline int get_int32(const toml::node& n, const std::string& key) {
  return static_cast<int>(get_int(n, key, INT32_MIN, INT32_MAX));
}
inline double get_number(const toml::node& n, const std::string& key) {
  if (!n.is_number()) fail(n, key, std::string("expected a number, got ") + type_name(n));
  return *n.value<double>();
}
inline bool get_bool(const toml::node& n, const std::string& key) {
  if (!n.is_boolean()) fail(n, key, std::string("expected true or false, got ") + type_name(n));
  return *n.value<bool>();
}
inline std::string get_string(const toml::node& n, const std::string& key) {
  if (!n.is_string()) fail(n, key, std::string("expected a string, got ") + type_name(n));
  return *n.value<std::string>();
}
template <class T>
T get_enum(const toml::node& n, const std::string& key, Result<T> (*parse)(std::string_view)) {
  auto r = parse(get_string(n, key));
  if (!r.ok()) fail(n, key, std::string(r.status().message()));
  return *r;
}

// Levenshtein distance, for "did you mean".
inline size_t distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The closest of `known` to `key`, if it is close enough to be a typo.
inline std::string closest(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = 4;
  for (const auto& k : known) {
    const size_t d = distance(key, k);
    if (d < best_d) best_d = d, best = k;
  }
  return best;
}

// Fails on the first key of `t` that is not in `known`, suggesting the closest one.
inline void no_unknown_keys(const toml::table& t, const std::string& prefix, const std::vector<std::string>& known) {
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const std::string guess = closest(key, known);
    fail(v, prefix + key, "unknown key" + (guess.empty() ? std::string() : " (did you mean " + guess + "?)"));
  }
}

// Sets `value` at dotted `key` of `root`, from "key=value" (`atoll ... --set`):
// the value is TOML text, or a bare word taken as a string. Errors name the assignment.
Status apply_override(toml::table& root, const std::string& assignment);

// Parses TOML `text`; a syntax error names `source` and its line.
Result<toml::table> parse_toml(std::string_view text, const std::string& source);

}  // namespace atl::toml_fields
