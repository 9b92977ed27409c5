// drive(): one run from start to report, as `atoll run`, `syncer` and
// `learner` show it: a progress line (a terminal) or a line every 10 s (a
// log), Ctrl-C stops it in order, then the summary, the report and plots.
#pragma once

#include <functional>
#include <string>

#include "atoll/run.h"
#include "run_status.h"

namespace atl::cli {

// `started` sees the run once it is up (to print a port, say). The first
// Ctrl-C or SIGTERM calls `on_signal` (default: Run::stop()), a second one
// Run::stop(). Exit status (ExitStatus, command.h): 0 done; 1 the run failed
// or gave up on an actor; 2 it could not start; 75 it lost the syncer; 77
// the syncer refused it.
int drive(const Topology& topology, const RunOptions& options, const std::string& report_path, bool quiet,
          const MetricsFlags& metrics, const std::function<void(Run&)>& started = {},
          std::function<void(Run&)> on_signal = {});
// The same with the status server already serving (null: none), which the
// caller keeps: a learner process answers its probes while it still waits for
// the syncer's topology, an idle syncer after its run.
int drive(const Topology& topology, const RunOptions& options, const std::string& report_path, bool quiet,
          RunStatus* status, const std::function<void(Run&)>& started = {},
          std::function<void(Run&)> on_signal = {});

// "[  12.0s] tokens 1.2M/4.0M  loss 2.31  ...": what a run shows as it goes.
std::string progress_line(const RunView& v);

}  // namespace atl::cli
