#include "command.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "atoll/log.h"

namespace atl::cli {

int fail(const Status& s) {
  std::fprintf(stderr, "atoll: %s\n", s.to_string().c_str());
  return kExitUsage;
}

int exit_status_of(const Status& s) {
  switch (s.code()) {
    case Status::Code::kOk: return kExitDone;
    case Status::Code::kRefused: return kExitRefused;
    case Status::Code::kUnavailable: return kExitLost;
    default: return kExitFailed;
  }
}

std::string output(const char* name) { return std::string("atoll-out/") + name; }

void add_verbose_flag(CLI::App* command, const char* what) {
  command->add_flag_callback("-v,--verbose", [] { set_log_level(LogLevel::kInfo); }, what);
}

const CLI::Validator kPositiveSeconds(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0' || !std::isfinite(v) || v <= 0)
        return "expected a positive, finite number of seconds, got '" + text + "'";
      return {};
    },
    "SECONDS > 0");
const CLI::Range kThreads(1, 1024);

}  // namespace atl::cli
