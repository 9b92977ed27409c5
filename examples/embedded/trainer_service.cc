// A small service that embeds atoll: it builds a topology in code (or reads
// one), trains in the background, reports health once a second as a service
// would to its monitoring, stops cleanly on SIGTERM/SIGINT or after a
// deadline, and hands the trained parameters and the report to its caller.
// Its own Prometheus registry carries atoll's metrics beside its own; with
// --metrics it serves them, and atoll's status page, on that port.
//
//   trainer_service [--seconds N] [--topology FILE] [--report FILE.json] [--metrics HOST:PORT]
#include <atoll/run.h>
#include <atoll/run_metrics.h>
#include <atoll/status_server.h>
#include <atoll/topology_file.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace {
std::atomic<bool> stop_requested{false};
void on_signal(int) { stop_requested = true; }
}  // namespace

int main(int argc, char** argv) {
  double seconds = 5.0;
  std::string topology_file, report_file, metrics_at;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--topology") && i + 1 < argc) topology_file = argv[++i];
    else if (!std::strcmp(argv[i], "--report") && i + 1 < argc) report_file = argv[++i];
    else if (!std::strcmp(argv[i], "--metrics") && i + 1 < argc) metrics_at = argv[++i];
    else {
      std::printf("usage: %s [--seconds N] [--topology FILE] [--report FILE.json] [--metrics HOST:PORT]\n", argv[0]);
      return std::strcmp(argv[i], "--help") ? 2 : 0;
    }
  }

  atl::Topology topology;
  if (!topology_file.empty()) {
    auto loaded = atl::load_topology(topology_file);
    if (!loaded.ok()) {
      std::fprintf(stderr, "trainer_service: %s\n", loaded.status().to_string().c_str());
      return 2;
    }
    topology = *loaded;
  } else {
    // Built in code: three learners on synthetic data, so it runs anywhere.
    topology.model.kind = atl::ModelKind::kMlp;
    topology.data.kind = atl::DataKind::kSynthetic;
    topology.model.hidden = {64};
    topology.learners = {{1.0, 32}, {1.0, 32}, {0.5, 32}};
    topology.outer.fragments = 2;
    topology.outer.sync_every = 50;
    topology.checkpoint.dir = "";
    topology.tokens = 100'000'000;  // the deadline or a signal ends it
  }

  auto run = atl::Run::start(topology);
  if (!run.ok()) {
    std::fprintf(stderr, "trainer_service: cannot start: %s\n", run.status().to_string().c_str());
    return 1;
  }
  // The service's registry: its own metrics, and atoll's registered in it.
  auto registry = std::make_shared<prometheus::Registry>();
  auto& checks = prometheus::BuildCounter()
                     .Name("trainer_service_health_checks_total")
                     .Help("Health lines printed")
                     .Register(*registry)
                     .Add({});
  atl::RunMetrics atoll_metrics(*registry);
  std::unique_ptr<atl::StatusServer> server;
  if (!metrics_at.empty()) {
    atl::StatusServerOptions o;
    o.host = metrics_at.substr(0, metrics_at.rfind(':'));
    o.port = static_cast<uint16_t>(std::atoi(metrics_at.substr(metrics_at.rfind(':') + 1).c_str()));
    o.registry = registry;  // /metrics serves the service's registry: both kinds of metrics
    auto started = atl::StatusServer::start(o, {[&] { return (*run)->view(); }, {}});
    if (!started.ok()) {
      std::fprintf(stderr, "trainer_service: %s\n", started.status().to_string().c_str());
      return 1;
    }
    server = std::move(*started);
    std::printf("metrics and status page on port %u\n", server->port());
  }
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!(*run)->finished() && !stop_requested && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const atl::RunView v = (*run)->view();
    atoll_metrics.update(v);
    checks.Increment();
    std::printf("health: up %.0fs alive=%.0f%% tokens=%llu loss=%.4f rounds=%llu goodput=%.2f\n", v.seconds,
                100 * v.alive, static_cast<unsigned long long>(v.tokens), v.train_loss,
                static_cast<unsigned long long>(v.stats.rounds), v.goodput);
    std::fflush(stdout);
  }
  (*run)->stop();
  auto report = (*run)->wait();
  server.reset();  // it reads the run
  atoll_metrics.update((*run)->view());
  const std::string text = atl::prometheus_text(*registry);
  std::printf("metrics: %s and %s in the service's registry\n",
              text.find("\natoll_tokens_total ") != std::string::npos ? "atoll_tokens_total" : "(no atoll metrics)",
              text.find("\ntrainer_service_health_checks_total ") != std::string::npos ? "its own" : "(not its own)");
  if (!report.ok()) {
    std::fprintf(stderr, "trainer_service: %s\n", report.status().to_string().c_str());
    return 1;
  }
  std::printf("trained %llu tokens; held-out accuracy %.2f%%; %zu parameters available to the service\n",
              static_cast<unsigned long long>(report->tokens), 100 * report->eval.accuracy,
              (*run)->parameters().size());
  if (!report_file.empty()) std::ofstream(report_file) << report->to_json();
  return 0;
}
