// Log: one line per event, thread-safe, to stderr or to a sink the program sets.
#pragma once

#include <functional>
#include <string>

namespace atl {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Lines below `level` are dropped (default: kInfo).
void set_log_level(LogLevel level);
LogLevel log_level();
// Replaces the destination (default: "[  12.345s] info  <text>" on stderr).
// The sink is called under a lock, one line at a time. nullptr restores stderr.
void set_log_sink(std::function<void(LogLevel, const std::string&)> sink);

void log(LogLevel level, const std::string& text);
inline void log_info(const std::string& text) { log(LogLevel::kInfo, text); }
inline void log_warn(const std::string& text) { log(LogLevel::kWarn, text); }
inline void log_error(const std::string& text) { log(LogLevel::kError, text); }

}  // namespace atl
