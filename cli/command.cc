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
    case Status::Code::kOver: return kExitDone;  // nothing was left to do
    default: return kExitFailed;
  }
}

std::string output(const char* name) { return std::string("atoll-out/") + name; }

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

void add_quiet_flag(CLI::App* command, bool& quiet) {
  command->add_flag("-q,--quiet", quiet, "Print only the summary at the end: no start line, no progress line");
}

void add_verbose_flag(CLI::App* command, bool* verbose) {
  command->add_flag_callback(
      "-v,--verbose",
      [verbose] {
        set_log_level(LogLevel::kInfo);
        if (verbose) *verbose = true;
      },
      "Log every connection, registration, restart and refusal");
}

void add_set_option(CLI::App* command, std::vector<std::string>& sets) {
  command->add_option("--set", sets,
                      "Override one topology key, e.g. --set outer.quorum=2 --set mode=dp (repeatable; "
                      "docs/topology.md)");
}

void add_report_option(CLI::App* command, std::string& path) {
  command->add_option("--report", path, "Where to write the JSON report (empty: none)")->capture_default_str();
}

void add_data_option(CLI::App* command, std::string& dir) {
  command->add_option("--data", dir, "Data folder from scripts/setup (default: $ATOLL_DATA_DIR or ./data)");
}

void add_threads_option(CLI::App* command, int& threads) {
  command->add_option("--threads", threads, "Compute threads for the learners (default: one per core)")
      ->check(kThreads);
}

void add_seconds_option(CLI::App* command, double& seconds) {
  command->add_option("--seconds", seconds, "Stop after this many seconds, whatever the token budget")
      ->check(kPositiveSeconds);
}

void add_sample_prompt_option(CLI::App* command, std::string& prompt) {
  command->add_option("--sample-prompt", prompt, "Language models: the text the report's sample continues")
      ->capture_default_str();
}

void add_curve_option(CLI::App* command, int& points) {
  command
      ->add_option("--curve", points,
                   "Evaluate the global model at this many points of the run (equal steps of the token budget, "
                   "else of the time limit; the last is the end): the report's curve of quality against time and "
                   "tokens")
      ->check(CLI::Range(0, 100));
}

}  // namespace atl::cli
