// Where the CLI's commands write what they produce.
#pragma once

#include <string>

namespace atl::cli {

// Writes `text` to `path` crash-safe (creating its folder) and says where on
// stdout, or why not on stderr; `what` names it ("report").
bool write_output(const std::string& path, const std::string& text, const char* what);

}  // namespace atl::cli
