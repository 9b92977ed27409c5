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

// Replaces `path` with `bytes` so that a crash at any moment leaves either the
// old file or the complete new one: write `path`.tmp, fsync it, rename it over
// `path`, fsync the folder. On failure the temporary file is removed.
Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace atl
