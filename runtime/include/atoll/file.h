// Whole-file reads and crash-safe whole-file writes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "atoll/status.h"

namespace atl {

// Reads all of `path`. Errors name the path and the system's reason.
Result<std::vector<uint8_t>> read_file(const std::string& path);

}  // namespace atl
