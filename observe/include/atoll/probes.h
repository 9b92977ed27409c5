// Probes: what a cluster engine (Kubernetes, a load balancer, a script)
// asks a process over HTTP, on the --metrics server, answered from the
// run's view (atoll/run_view.h). No token: they carry a line, not data.
//
//   GET /healthz  alive: the process answers, and its run can go on (no
//                 refusal, no lost syncer, no actor its supervisor gave up
//                 on). An engine restarts a process that fails it.
//   GET /readyz   ready: the syncer here restored its checkpoint and takes
//                 learners; every learner here was welcomed by the syncer.
//                 Not ready while starting, and once the run is over.
//
// 200 when ok, 503 when not; the body is the one-line reason either way.
#pragma once

#include <string>

#include "atoll/run_view.h"

namespace atl {

struct ProbeAnswer {
  bool ok = false;
  std::string reason;  // one line, no newline
};

// Where a process's run is, as its status server sees it.
enum class RunPhase : uint8_t {
  kStarting,  // no run yet: loading data, binding ports, awaiting the syncer's topology
  kRunning,   // `view` is the run now
  kOver,      // `view` is its final view
};

ProbeAnswer probe_health(RunPhase phase, const RunView& view);
ProbeAnswer probe_ready(RunPhase phase, const RunView& view);

}  // namespace atl
