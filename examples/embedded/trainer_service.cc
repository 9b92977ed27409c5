// A small service that embeds atoll: it builds a topology in code (or reads
// one), trains in the background, reports health once a second as a service
// would to its monitoring, stops cleanly on SIGTERM/SIGINT or after a
// deadline, and hands the trained parameters and the report to its caller.
//
//   trainer_service [--seconds N] [--topology FILE] [--report FILE.json]
#include <atoll/run.h>
#include <atoll/topology_file.h>

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
  std::string topology_file, report_file;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--topology") && i + 1 < argc) topology_file = argv[++i];
    else if (!std::strcmp(argv[i], "--report") && i + 1 < argc) report_file = argv[++i];
    else {
      std::printf("usage: %s [--seconds N] [--topology FILE] [--report FILE.json]\n", argv[0]);
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
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!(*run)->finished() && !stop_requested && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const atl::RunView v = (*run)->view();
    std::printf("health: up %.0fs alive=%.0f%% tokens=%llu loss=%.4f rounds=%llu goodput=%.2f\n", v.seconds,
                100 * v.alive, static_cast<unsigned long long>(v.tokens), v.train_loss,
                static_cast<unsigned long long>(v.stats.rounds), v.goodput);
    std::fflush(stdout);
  }
  (*run)->stop();
  auto report = (*run)->wait();
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
