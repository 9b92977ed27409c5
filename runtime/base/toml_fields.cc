#include "atoll/toml_fields.h"

namespace atl::toml_fields {

Status apply_override(toml::table& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    return Status::invalid_argument("--set " + assignment + ": expected key=value");
  std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  while (!key.empty() && key.back() == ' ') key.pop_back();
  const std::string source = "--set " + assignment;
  toml::table snippet;
  try {
    snippet = toml::parse("v = " + value, std::string_view(source));
  } catch (const toml::parse_error&) {
    std::string quoted;  // not TOML: a bare word, taken as a string
    for (char c : value) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    try {
      snippet = toml::parse("v = \"" + quoted + "\"", std::string_view(source));
    } catch (const toml::parse_error& e) {
      return Status::invalid_argument(source + ": " + std::string(e.description()));
    }
  }
  toml::table* at = &root;
  std::string_view rest = key;
  for (size_t dot; (dot = rest.find('.')) != std::string_view::npos; rest.remove_prefix(dot + 1)) {
    const std::string part(rest.substr(0, dot));
    if (!at->contains(part)) at->insert(part, toml::table{});
    at = (*at)[part].as_table();
    if (!at) return Status::invalid_argument(source + ": " + part + " is not a table");
  }
  toml::node* v = snippet.get("v");
  at->insert_or_assign(std::string(rest), std::move(*v));
  return {};
}

Result<toml::table> parse_toml(std::string_view text, const std::string& source) {
  try {
    return toml::parse(text, std::string_view(source));
  } catch (const toml::parse_error& e) {
    return Status::invalid_argument(source + ":" + std::to_string(e.source().begin.line) + ": " +
                                    std::string(e.description()));
  }
}

}  // namespace atl::toml_fields
