// Runs a sweep (atoll/sweep.h): every variant once per seed, one trial after
// another in this process, through the embedding API (atoll/run.h).
//
// A trial's topology is the file, then the sweep's shared overrides, then the
// variant's, then "seed=<seed>"; checkpoints are off. Every trial's topology
// is checked before the first one runs, so a bad override fails at once and
// names its variant. A finished trial leaves its record (TOML) and its full
// report (JSON) in `dir`; a trial whose record is there is not run again, so
// an interrupted sweep resumes where it stopped.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "atoll/run.h"
#include "atoll/status.h"
#include "atoll/sweep.h"

namespace atl {

struct SweepSpec {
  std::string topology_file;           // empty: the built-in default
  std::vector<std::string> overrides;  // shared by every variant (before its own)
  std::vector<Variant> variants;
  std::vector<uint64_t> seeds = {1};
  std::string dir = "atoll-out/sweep";     // records and reports
  RunOptions run;                      // data, threads, curve points of every trial
};

struct SweepOutcome {
  std::vector<TrialRecord> records;  // every trial of the spec that has one, run now or before
  std::vector<SweepRow> rows;        // summarized per variant (also written to <dir>/sweep.json)
  std::string json_path;
  int ran = 0, resumed = 0, failed = 0;
  bool interrupted = false;  // `stop` said so: the trial it cut short left no record
};

// At the end (also when interrupted) the summary of every variant goes to
// <dir>/sweep.json. `progress` gets a line before and after each trial: which
// of how many, elapsed and remaining time. `stop` is polled while a trial runs; when it
// returns true the trial is stopped and the sweep ends.
Result<SweepOutcome> run_sweep(const SweepSpec& spec, const std::function<void(const std::string&)>& progress,
                               const std::function<bool()>& stop = {});

}  // namespace atl
