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

// Reads all of a text file (a topology, a fault plan, a tape) of at most
// `max_bytes`. Unlike read_file() it also reads a pipe (`atoll run <(...)`);
// a folder, or anything larger, is refused with the path and the reason.
Result<std::string> read_text(const std::string& path, size_t max_bytes = size_t{64} << 20);

// Replaces `path` with `bytes` so that a crash at any moment leaves either the
// old file or the complete new one: write `path`.tmp, fsync it, rename it over
// `path`, fsync the folder. On failure the temporary file is removed.
Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace atl
