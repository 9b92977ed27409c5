// The same topology in the three modes, side by side (no faults): throughput,
// bytes per token, goodput and held-out quality. A benchmark, not a test: it
// prints a table and writes JSON.
//
//   atoll_modes_bench [TOPOLOGY.toml] [--set key=value]... [--out FILE.json]
// Default: the built-in topology (4 learners of speeds 1, 1, 0.7, 0.5, MLP on MNIST).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "atoll/log.h"
#include "atoll/run.h"
#include "atoll/topology_file.h"

int main(int argc, char** argv) {
  std::string file, out = "atoll_modes_bench.json";
  std::vector<std::string> sets;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--set" && i + 1 < argc) sets.push_back(argv[++i]);
    else if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "-h" || a == "--help") {
      std::printf("usage: %s [TOPOLOGY.toml] [--set key=value]... [--out FILE.json]\n", argv[0]);
      return 0;
    } else if (!a.starts_with("-") && file.empty()) file = a;
    else {
      std::fprintf(stderr, "%s: unknown argument '%s' (see --help)\n", argv[0], a.c_str());
      return 2;
    }
  }
  atl::set_log_level(atl::LogLevel::kWarn);
  std::string json = "[\n";
  std::printf("%-11s %10s %12s %9s %9s %10s %8s %8s\n", "mode", "tokens/s", "bytes/token", "goodput", "accuracy",
              "eval loss", "rounds", "wall s");
  for (const char* mode : {"decoupled", "dp", "elastic_dp"}) {
    auto overrides = sets;
    overrides.push_back(std::string("mode=") + mode);
    overrides.push_back("checkpoint.dir=");
    auto topology = atl::load_topology(file, overrides);
    if (!topology.ok()) {
      std::fprintf(stderr, "%s\n", topology.status().to_string().c_str());
      return 2;
    }
    auto run = atl::Run::start(*topology);
    if (!run.ok()) {
      std::fprintf(stderr, "%s\n", run.status().to_string().c_str());
      return 1;
    }
    auto report = (*run)->wait();
    if (!report.ok()) {
      std::fprintf(stderr, "%s\n", report.status().to_string().c_str());
      return 1;
    }
    std::printf("%-11s %10.0f %12.1f %9.3f %8.2f%% %10.4f %8llu %8.1f\n", mode, report->tokens_per_second,
                report->bytes_per_token, report->goodput, 100 * report->eval.accuracy, report->eval.loss,
                static_cast<unsigned long long>(report->rounds), report->wall_seconds);
    std::fflush(stdout);
    json += (json.size() > 2 ? ",\n" : "") + report->to_json();
  }
  json += "]\n";
  std::ofstream(out) << json;
  std::printf("JSON written to %s\n", out.c_str());
  return 0;
}
