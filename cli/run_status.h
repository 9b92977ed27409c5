// What the CLI shows of its runs beyond the summary: the status page and
// metrics (--metrics), and the plots written beside every report.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "atoll/probes.h"
#include "atoll/report.h"
#include "atoll/run.h"
#include "atoll/status_server.h"

namespace atl::cli {

struct MetricsFlags {
  std::string listen;          // HOST:PORT; empty: no endpoint
  bool allow_control = false;  // with a fault plan: the page may kill or stall learners
  bool public_metrics = false; // /metrics without the cluster token
};

// --metrics and --metrics-public (which needs --metrics), as `atoll run`,
// `syncer` and `learner` take them (one of the shared options, command.h).
// --allow-control is `atoll run`'s own.
void add_metrics_flags(CLI::App* command, MetricsFlags& flags);

// Serves /, /status.json, /metrics and the probes /healthz and /readyz
// (atoll/probes.h) for whichever run is current: a command
// that runs several (a fault plan and its baseline) shows each in turn, and
// the last one's final view once it is over.
class RunStatus {
 public:
  // `token`: wanted by the data endpoints (empty: none, one process).
  // Null (and ok) when flags.listen is empty: no endpoint asked for.
  static Result<std::unique_ptr<RunStatus>> start(const MetricsFlags& flags, const std::string& token);
  ~RunStatus();

  // The run to show from now on; nullptr: the current one is over (its final
  // view stays). Call with nullptr before the run is destroyed.
  void watch(Run* run);
  uint16_t port() const;

 private:
  RunStatus() = default;
  RunView view();
  ProbeAnswer probe(bool ready);
  std::string control(const std::string& action, uint32_t learner);

  std::mutex mu_;
  Run* run_ = nullptr;
  RunPhase phase_ = RunPhase::kStarting;
  RunView last_;
  std::unique_ptr<StatusServer> server_;
};

// Writes the report's series and plots beside `report_path` (atoll/run_plots.h)
// and says where on stdout; false (with the reason on stderr) if it could not.
bool write_plots(const std::string& report_path, const Report& report);

// `atoll plot REPORT.json`: draws the plots of a run or a chaos suite again.
int plot_command(const std::string& report_path);

}  // namespace atl::cli
