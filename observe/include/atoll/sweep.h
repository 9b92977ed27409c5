// Sweep: many runs of one topology, as variants x seeds, and what they measured.
//
// A variant is a label and a list of topology overrides ("outer.lr=0.5"); a
// grid ("outer.lr=0.3,0.5,0.7" x "outer.momentum=0.8,0.9") expands into every
// combination. Each variant runs once per seed. A trial's record is a small
// TOML file in the sweep's folder, written when the trial ends, so an
// interrupted sweep resumes where it stopped: a trial whose record is there
// (same label, seed and overrides) is not run again.
//
// This file holds the plan, the records and the summary (mean and spread over
// seeds), without CAF; atoll/sweep_runner.h runs the trials.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "atoll/report.h"
#include "atoll/status.h"

namespace atl {

struct Variant {
  std::string label;                   // "outer.lr=0.5 outer.momentum=0.9", or a name
  std::vector<std::string> overrides;  // "key=value", applied after the sweep's own
};

// "key=v1,v2,..." -> the values, split at top-level commas (a value may be a
// TOML array or inline table). Fails on a missing '=', an empty key or value.
struct GridAxis {
  std::string key;
  std::vector<std::string> values;
};
Result<GridAxis> parse_grid_axis(const std::string& text);

// Every combination of the axes' values, the first axis slowest; one
// variant (no overrides, label "defaults") when there is no axis.
std::vector<Variant> expand_grid(const std::vector<GridAxis>& axes);

// One run of a variant with a seed.
struct Trial {
  Variant variant;
  uint64_t seed = 1;
  // A hash of the whole topology the trial runs (file, shared overrides and
  // the variant's): a record made with another topology is not this trial's.
  uint64_t topology_hash = 0;
  // Stable file name of its record: "trial-<16 hex digits of a hash of all the above>".
  std::string id() const;
};

// A stable hash of a text (FNV-1a, 64 bits), e.g. of to_toml(topology).
uint64_t stable_hash(const std::string& text);

// What a finished trial measured: the report's figures a summary needs.
struct TrialRecord {
  std::string label;
  uint64_t seed = 0;
  std::vector<std::string> overrides;
  uint64_t topology_hash = 0;
  bool ok = false;
  std::string error;  // when !ok
  bool text = false;  // a language model: quality is bits per byte (lower is better), else accuracy
  double wall_seconds = 0, tokens_per_second = 0, bytes_per_token = 0, goodput = 0;
  uint64_t tokens = 0;
  double loss = 0, loss_stderr = 0, bits_per_byte = 0, bits_per_byte_stderr = 0, accuracy = 0;
  int64_t windows = 0;
  std::vector<Report::CurvePoint> curve;
  // Shares of the machine's CPU other processes and the hypervisor took
  // during the run (Report::hardware); NaN: not measured (older records).
  double others_cpu = std::numeric_limits<double>::quiet_NaN();
  double steal = std::numeric_limits<double>::quiet_NaN();

  // More than this share of the machine went elsewhere: the run's speed, and
  // a decoupled run's timing with it, was not the machine's own.
  static constexpr double kSharedMachine = 0.10;
  bool shared_machine() const { return others_cpu + steal > kSharedMachine; }  // false when not measured
  // Dedicated hardware's steps (Report::hardware): those paced, and those
  // that took longer than their pace. 0 and 0 on shared hardware.
  uint64_t paced_steps = 0, late_steps = 0;

  // More than this share of the paced steps ran late: the learners shared
  // cores the way islands do not (more `hardware_headroom` restores them).
  static constexpr double kLatePace = 0.20;
  double late_share() const { return paced_steps ? static_cast<double>(late_steps) / paced_steps : 0.0; }
  bool late_pace() const { return late_share() > kLatePace; }

  static TrialRecord of(const Trial& trial, const Report& report);
  static TrialRecord failed(const Trial& trial, const std::string& error);
  // The quality a table shows: bits per byte, or accuracy in percent.
  double quality() const { return text ? bits_per_byte : 100.0 * accuracy; }
  // The curve's quality at `seconds` since the start, interpolated linearly
  // between its points; nullopt outside the curve.
  std::optional<double> quality_at_seconds(double seconds) const;
  // The tokens the curve had trained when it first reached `quality` (at or
  // below it in bits per byte, at or above in accuracy), interpolated linearly
  // between its points; nullopt if it never did. Token efficiency compares
  // one run's tokens with the tokens another needed for the same quality.
  std::optional<double> tokens_to_reach(double quality) const;

  std::string to_toml() const;
  static Result<TrialRecord> parse_toml(const std::string& text, const std::string& source);
};

// Reads the record of `trial` from `dir`, if it is there and belongs to the
// trial (same label, seed, overrides and topology). A record that does not parse is an
// error naming the file (the caller may run the trial again).
Result<std::optional<TrialRecord>> load_record(const std::string& dir, const Trial& trial);
// Writes the record atomically (temporary file, fsync, rename).
Status save_record(const std::string& dir, const Trial& trial, const TrialRecord& record);

// Mean and spread of a figure over seeds.
struct Spread {
  int n = 0;
  double mean = 0, stddev = 0, min = 0, max = 0;  // stddev: sample (n - 1)
  static Spread of(const std::vector<double>& xs);
};

// A variant's trials, summarized.
struct SweepRow {
  std::string label;
  std::vector<std::string> overrides;
  std::vector<TrialRecord> trials;  // the ones that ran, in seed order
  int failed = 0;
  Spread quality, loss, tokens_per_second, bytes_per_token, goodput, wall_seconds;
  double eval_stderr = 0.0;  // mean standard error of one trial's quality (its held-out sample)
};
std::vector<SweepRow> summarize(const std::vector<Variant>& variants, const std::vector<TrialRecord>& records);

// Rows best first (lowest loss; failed-only rows last) as a text table,
// then a line naming each run that shared its machine (shared_machine()),
// and one naming each whose paced steps ran late (late_pace()).
std::string sweep_table(std::vector<SweepRow> rows);
// The line (ending in a newline) naming every record that shared its
// machine, with the shares; empty when none did.
std::string shared_machine_line(const std::vector<TrialRecord>& records);
// The line (ending in a newline) naming every record whose paced steps ran
// late, with the share; empty when none did.
std::string late_pace_line(const std::vector<TrialRecord>& records);
// The rows, best first, and every trial as JSON.
std::string sweep_json(std::vector<SweepRow> rows, const std::vector<std::string>& shared_overrides,
                       const std::string& topology_file);

}  // namespace atl
