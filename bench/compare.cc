#include "compare.h"

#include <cstdio>
#include <fstream>

#include "atoll/log.h"
#include "atoll/run.h"
#include "atoll/topology_file.h"

namespace atl::bench {

int parse_compare_args(int argc, char** argv, const char* usage, CompareOptions& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--set" && i + 1 < argc) {
      options.overrides.push_back(argv[++i]);
    } else if (a == "--out" && i + 1 < argc) {
      options.json_out = argv[++i];
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: %s [TOPOLOGY.toml] [--set key=value]... [--out FILE.json]\n%s", argv[0], usage);
      return 0;
    } else if (!a.starts_with("-") && options.topology_file.empty()) {
      options.topology_file = a;
    } else {
      std::fprintf(stderr, "%s: unknown argument '%s' (see --help)\n", argv[0], a.c_str());
      return 2;
    }
  }
  return -1;
}

int compare(const CompareOptions& options, const std::vector<Variant>& variants) {
  set_log_level(LogLevel::kWarn);
  std::string json = "[\n";
  bool header = false;
  for (const Variant& variant : variants) {
    auto overrides = options.overrides;
    overrides.insert(overrides.end(), variant.overrides.begin(), variant.overrides.end());
    overrides.push_back("checkpoint.dir=");
    auto topology = load_topology(options.topology_file, overrides);
    if (!topology.ok()) {
      std::fprintf(stderr, "%s: %s\n", variant.label.c_str(), topology.status().to_string().c_str());
      return 2;
    }
    const bool text = topology->model.kind == ModelKind::kTransformer;
    if (!header) {
      std::printf("%-22s %10s %11s %8s %9s %9s %7s %7s %7s\n", "variant", "tokens/s", "bytes/token", "goodput",
                  text ? "bits/byte" : "accuracy", "eval loss", "rounds", "quorum", "wall s");
      header = true;
    }
    auto run = Run::start(*topology);
    if (!run.ok()) {
      std::fprintf(stderr, "%s: %s\n", variant.label.c_str(), run.status().to_string().c_str());
      return 1;
    }
    auto report = (*run)->wait();
    if (!report.ok()) {
      std::fprintf(stderr, "%s: %s\n", variant.label.c_str(), report.status().to_string().c_str());
      return 1;
    }
    const double quality = text ? report->eval.bits_per_byte : 100 * report->eval.accuracy;
    std::printf("%-22s %10.0f %11.1f %8.3f %9.4f %9.4f %7llu %7.2f %7.1f\n", variant.label.c_str(),
                report->tokens_per_second, report->bytes_per_token, report->goodput, quality, report->eval.loss,
                static_cast<unsigned long long>(report->rounds), report->quorum_mean, report->wall_seconds);
    std::fflush(stdout);
    json += (json.size() > 2 ? ",\n" : "") + std::string("{\"variant\":\"") + variant.label +
            "\",\"report\":" + report->to_json() + "}";
  }
  json += "\n]\n";
  if (!options.json_out.empty()) {
    std::ofstream(options.json_out) << json;
    std::printf("JSON written to %s\n", options.json_out.c_str());
  }
  return 0;
}

}  // namespace atl::bench
