// Chaos runs: a topology under a fault plan, and whether it held up.
//
//   auto plan = atl::load_fault_plan("examples/chaos/kill_learner.toml");
//   auto results = atl::run_plan(*plan, {});     // one result per mode in the plan
//   for (auto& r : *results) if (!r.ok()) ...    // r.violations says what broke
//
// The invariants (docs/design.md section 6, and the plan's bounds) are checked after
// each run from the report and the event tape; the eval-loss bound needs the
// same run without faults, which run_plan() does too.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "atoll/fault_plan.h"
#include "atoll/report.h"
#include "atoll/run.h"

namespace atl {

struct ChaosOptions {
  RunOptions run;
  // Where event tapes go (<plan>-<mode>.jsonl); empty: kept in memory only.
  std::string tape_dir;
  // Sees each run once it is up, and when it is over (nullptr), from the
  // calling thread: a caller can stop() it from another one (a Ctrl-C).
  std::function<void(Run*)> running;
  // Asked after each run: true notes the run as interrupted, and ends
  // run_plan() early with the results so far.
  std::function<bool()> stopping;
};

struct ChaosResult {
  std::string plan;
  Mode mode = Mode::kDecoupled;
  Report report;
  uint64_t faults_injected = 0;  // injections that hit a running target
  uint64_t recoveries = 0;       // components restarted by their supervisor
  double baseline_eval_loss = -1.0;  // the run without faults; < 0: not run
  // Share of learner time the learners were up (from the tape: each kill or
  // crash to that learner's next registration). Bounds any mode's goodput.
  double alive_fraction = 1.0;
  std::vector<std::string> violations;  // each broken invariant, with its figures
  std::vector<std::string> notes;       // planned faults never injected (the run ended first), and why
  std::string tape_path;
  bool ok() const { return violations.empty(); }
};

// Runs `topology` (its mode, and `plan.seconds` when > 0) under the plan's
// faults and checks every invariant but the eval-loss bound.
Result<ChaosResult> run_with_faults(const Topology& topology, const FaultPlan& plan, const ChaosOptions& options);

// Every mode of the plan, each with its fault-free baseline if the plan bounds the eval loss.
Result<std::vector<ChaosResult>> run_plan(const FaultPlan& plan, const ChaosOptions& options);

// The suite table: plan, mode, goodput, uptime, eval, faults injected and recovered, verdict.
std::string chaos_table(const std::vector<ChaosResult>& results, bool header = true);
// The same as JSON (an array of objects, each with the full report).
std::string chaos_json(const std::vector<ChaosResult>& results);

}  // namespace atl
