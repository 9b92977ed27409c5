#include "atoll/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

namespace atl {
namespace {

std::mutex mu;
std::function<void(LogLevel, const std::string&)> sink;
std::atomic<int> level{static_cast<int>(LogLevel::kInfo)};
const auto start = std::chrono::steady_clock::now();

const char* name(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info ";
    case LogLevel::kWarn: return "warn ";
    case LogLevel::kError: return "error";
  }
  return "?";
}

}  // namespace

void set_log_level(LogLevel l) { level = static_cast<int>(l); }
LogLevel log_level() { return static_cast<LogLevel>(level.load()); }

void set_log_sink(std::function<void(LogLevel, const std::string&)> s) {
  std::lock_guard lock(mu);
  sink = std::move(s);
}

void log(LogLevel l, const std::string& text) {
  if (static_cast<int>(l) < level.load()) return;
  std::lock_guard lock(mu);
  if (sink) return sink(l, text);
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "[%9.3fs] %s %s\n", t, name(l), text.c_str());
}

}  // namespace atl
