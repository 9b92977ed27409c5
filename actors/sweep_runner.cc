#include "atoll/sweep_runner.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "atoll/file.h"
#include "atoll/progress.h"
#include "atoll/run_plots.h"
#include "atoll/topology_file.h"

namespace atl {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> trial_overrides(const SweepSpec& spec, const Trial& trial) {
  std::vector<std::string> o = spec.overrides;
  o.insert(o.end(), trial.variant.overrides.begin(), trial.variant.overrides.end());
  o.push_back("seed=" + std::to_string(trial.seed));
  o.push_back("checkpoint.dir=");
  return o;
}

// Runs one trial; `stop` is watched from a second thread while it runs.
Result<Report> run_trial(const Topology& topology, const RunOptions& options, const std::function<bool()>& stop,
                         bool& stopped) {
  auto run = Run::start(topology, options);
  if (!run.ok()) return run.status();
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done) {
      if (stop && stop()) {
        stopped = true;
        (*run)->stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  auto report = (*run)->wait();
  done = true;
  watcher.join();
  return report;
}

}  // namespace

Result<SweepOutcome> run_sweep(const SweepSpec& spec, const std::function<void(const std::string&)>& progress,
                               const std::function<bool()>& stop) {
  if (spec.variants.empty() || spec.seeds.empty())
    return Status::invalid_argument("a sweep needs at least one variant and one seed");
  std::vector<Trial> trials;
  std::vector<Topology> topologies;
  for (const auto& v : spec.variants)
    for (uint64_t seed : spec.seeds) {
      Trial t{v, seed};
      auto topology = load_topology(spec.topology_file, trial_overrides(spec, t));
      if (!topology.ok()) return topology.status().with_context("variant '" + v.label + "'");
      t.topology_hash = stable_hash(to_toml(*topology));
      trials.push_back(std::move(t));
      topologies.push_back(std::move(*topology));
    }

  std::error_code ec;
  std::filesystem::create_directories(spec.dir, ec);
  if (ec) return Status::io_error(spec.dir + ": cannot create the sweep's folder: " + ec.message());

  SweepOutcome out;
  const auto started = Clock::now();
  double run_seconds = 0.0;  // spent on trials run now (resumed ones cost nothing)
  const size_t total = trials.size();
  for (size_t i = 0; i < total; ++i) {
    const Trial& trial = trials[i];
    const std::string name = "[" + std::to_string(i + 1) + "/" + std::to_string(total) + "] " +
                             trial.variant.label + ", seed " + std::to_string(trial.seed);
    auto saved = load_record(spec.dir, trial);
    if (!saved.ok()) {
      progress(name + ": " + saved.status().to_string() + "; running it again");
    } else if (saved->has_value()) {
      out.records.push_back(std::move(**saved));
      ++out.resumed;
      progress(name + ": done before, kept");
      continue;
    }
    const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
    progress(name + ": running (" + progress_text(i, total, elapsed, out.ran, run_seconds) + ")");

    const auto t0 = Clock::now();
    bool stopped = false;
    auto report = run_trial(topologies[i], spec.run, stop, stopped);
    run_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    ++out.ran;
    if (stopped) {
      out.interrupted = true;
      progress(name + ": interrupted; it will run again when the sweep resumes");
      break;
    }
    TrialRecord record = report.ok() ? TrialRecord::of(trial, *report)
                                     : TrialRecord::failed(trial, report.status().to_string());
    if (report.ok()) {
      const std::string json = report->to_json();
      const Status s = write_file_atomic(spec.dir + "/" + trial.id() + ".json",
                                         std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(json.data()), json.size()));
      if (!s.ok()) progress(name + ": report not kept: " + s.to_string());
      if (auto plots = write_run_plots(spec.dir + "/" + trial.id(), series_of(*report)); !plots.ok())
        progress(name + ": plots not written: " + plots.status().to_string());
    }
    if (Status s = save_record(spec.dir, trial, record); !s.ok())
      return s.with_context("the record of " + trial.variant.label + ", seed " + std::to_string(trial.seed));
    char figure[128];
    if (!record.ok)
      std::snprintf(figure, sizeof figure, "FAILED");
    else if (record.text)
      std::snprintf(figure, sizeof figure, "%.4f bits/byte (+- %.4f)", record.bits_per_byte, record.bits_per_byte_stderr);
    else
      std::snprintf(figure, sizeof figure, "%.2f%% accurate", 100 * record.accuracy);
    progress(name + ": " + figure + " in " + duration_text(record.wall_seconds) +
             (record.ok ? "" : ": " + record.error));
    out.failed += record.ok ? 0 : 1;
    out.records.push_back(std::move(record));
  }
  out.rows = summarize(spec.variants, out.records);
  out.json_path = spec.dir + "/sweep.json";
  const std::string json = sweep_json(out.rows, spec.overrides, spec.topology_file);
  ATOLL_RETURN_IF_ERROR(write_file_atomic(
      out.json_path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(json.data()), json.size())));
  return out;
}

}  // namespace atl
