// RunMetrics: a run's figures as Prometheus metrics (prometheus-cpp).
//
// Registers the atoll_* families in a prometheus::Registry and sets them from
// a RunView (atoll/run_view.h). The status server (atoll/status_server.h)
// does this on every scrape of /metrics. An embedding service that has its
// own registry and exposer registers atoll's metrics in it:
//
//   auto registry = std::make_shared<prometheus::Registry>();   // the service's
//   atl::RunMetrics metrics(*registry);
//   ... metrics.update(run->view());  before each scrape, or every second ...
//
// Names follow Prometheus conventions: the atoll_ prefix, base units
// (seconds, bytes), _total for counters. Counters only ever go up: a value
// that went down (a learner process starting over) is held.
// docs/observing.md lists every metric.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "atoll/run_view.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace atl {

class RunMetrics {
 public:
  // `registry` must outlive this object.
  explicit RunMetrics(prometheus::Registry& registry);
  ~RunMetrics();
  RunMetrics(const RunMetrics&) = delete;
  RunMetrics& operator=(const RunMetrics&) = delete;

  // Sets every metric from `view`. Thread-safe.
  void update(const RunView& view);

 private:
  struct Families;
  std::unique_ptr<Families> f_;
};

// The registry in the Prometheus text format (version 0.0.4).
std::string prometheus_text(const prometheus::Registry& registry);

}  // namespace atl
