// Goodput at cluster scale: a discrete-event simulation in virtual time
// (docs/design.md section 8) whose decoupled rounds are decided by the real SyncerCore.
//
//   N chips, split into M learners (dp and elastic_dp: one job of N chips).
//   Each chip is interrupted as a Poisson process (failures.mtbi_chip_years);
//   an interruption takes down its slice (failures.slice_chips chips) for a
//   recovery delay drawn from failures.recovery.
//
//   dp          the job stops while a slice is down, then restarts
//               (failures.restart_seconds)
//   elastic_dp  the job pauses failures.downscale_seconds after an
//               interruption, then trains on the slices that are up; a slice
//               that comes back costs a failures.upscale_seconds pause
//   decoupled   each learner is a group of N/M chips that reacts to its own
//               interruptions as elastic_dp does (or, learner_failure =
//               "restart", as dp does, losing its unmerged progress). It steps
//               (step_seconds, with step_jitter for stragglers), counts its
//               progress per fragment, pushes when due, answers pulls at its
//               next step boundary and adopts broadcasts, as a real learner
//               does. Every round (due, pull, quorum, grace, merge) is decided
//               by the real SyncerCore, fed in virtual time over a tiny model:
//               the simulator never re-implements a round.
//
// Every group trains in inner steps (training.step_seconds); an interruption
// loses the step under way, and a slice that comes back joins at the end of it.
//
// goodput = chip time whose progress reached the global model / (N x time):
// dp and elastic_dp count their completed steps at the share of chips up;
// decoupled counts what the SyncerCore merged (SyncerStats::good_seconds, the
// same figure a real run reports). uptime = share of time the global model
// advanced (decoupled: uptime_of() over the core's round ends, as real runs).
//
// Each cell is run in batches of simulated time until the 95% interval of its
// goodput (batch means) is within `precision`, or max_hours is reached.
//
// A plan (TOML), every key optional but grid.chips or [planning]:
//   name = "paper_table1"   seed = 1
//   precision = 0.005       # half-width of each cell's 95% interval (a fraction)
//   min_hours = 0           max_hours = 20000    # simulated time per cell
//   [failures]
//   mtbi_chip_years = 1.0   slice_chips = 16384   while_down = false
//   restart_seconds = 0     downscale_seconds = 10   upscale_seconds = 10
//   [failures.recovery]     # fixed | exponential (seconds) | exponentiated_weibull
//   distribution = "exponentiated_weibull"   scale_seconds = 60   shape = 1   exponent = 1
//   [training]
//   step_seconds = 1        step_jitter = 0       latency_seconds = 0.05
//   learner_failure = "elastic"   # or "restart"
//   parameters = 0          # the merged model's size (0: tiny)
//   set = ["outer.sync_every=12", "outer.fragments=4"]   # any [outer] key of a topology
//   [grid]                  # every combination, in this order
//   modes = ["dp", "elastic_dp", "decoupled"]   chips = [150000, 300000]
//   learners = [2, 4]       quorum = [1]          sync_every = [12]
//   [[reference]]           # published goodput, one per grid.chips (-1: none)
//   mode = "decoupled"      learners = 8          goodput = [0.98, -1]
//   [planning]              # decoupled at `chips` for every M and K
//   chips = 1200000         learners = [1, 2, 4, 8]   quorums = [1, 2]   target = 0.9
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "atoll/rng.h"
#include "atoll/status.h"
#include "atoll/topology.h"

namespace atl {

// A delay drawn at random (seconds).
struct DelayModel {
  enum class Kind {
    kFixed,                 // always `seconds`
    kExponential,           // mean `seconds`
    kExponentiatedWeibull,  // CDF (1 - exp(-(x / scale)^shape))^exponent
  };
  Kind kind = Kind::kExponentiatedWeibull;
  double seconds = 60.0;
  double scale_seconds = 60.0, shape = 1.0, exponent = 1.0;

  double sample(Rng& rng) const;
  double mean() const;      // numerically for the exponentiated Weibull
  double quantile(double p) const;
  std::string describe() const;  // "exponentiated Weibull (scale 61 s, shape 0.8, exponent 2.1; mean 74 s)"
};
const char* delay_kind_name(DelayModel::Kind kind);  // "fixed", "exponential", "exponentiated_weibull"

struct FailureModel {
  double mtbi_chip_years = 1.0;   // mean time between interruptions of one chip
  int64_t slice_chips = 1;        // chips that fail and come back together (a host, a slice)
  DelayModel recovery;            // from an interruption to its slice being back
  // Chips of a job that is down are interrupted too (their slices recover in
  // parallel). False: interruptions are counted on running jobs only, so an
  // outage is one recovery however many chips fail meanwhile.
  bool while_down = true;
  double restart_seconds = 0.0;   // dp (and restarting learners): from every slice up to training
  double downscale_seconds = 0.0; // elastic: the pause after an interruption
  double upscale_seconds = 0.0;   // elastic: the pause when a slice comes back
};

// How a decoupled learner reacts to an interruption of one of its slices.
enum class LearnerFailure {
  kElastic,  // pauses, trains on; down only when every slice is
  kRestart,  // down until every slice is back (its unmerged progress is lost), then registers again
};

struct TrainingModel {
  double step_seconds = 10.0;     // one inner step of a learner with every chip up
  double step_jitter = 0.0;       // each step's time x exp(N(0, jitter)): stragglers
  double latency_seconds = 0.05;  // one message, one way
  LearnerFailure learner_failure = LearnerFailure::kElastic;
  // Parameters of the model the SyncerCore merges (0: the smallest with a
  // tensor per fragment). Nothing is trained; the size sets what merges cost.
  int64_t parameters = 0;
  OuterSpec outer;                // H, P, K, grace, codecs: the rounds the SyncerCore runs
};

struct SimulationCell {
  Mode mode = Mode::kDecoupled;
  int learners = 1;               // M (dp, elastic_dp: 1)
  int64_t chips = 0;              // N
  int quorum = 1;                 // K (decoupled)
  int sync_every = 0;             // H (decoupled); 0: training.outer's
};

// A published figure a cell is compared with (goodput as a fraction).
struct Reference {
  Mode mode = Mode::kDecoupled;
  int learners = 1;
  int64_t chips = 0;
  double goodput = 0.0;
};

// The planning view: goodput and uptime of decoupled for given chips against M and K.
struct PlanningView {
  int64_t chips = 0;
  std::vector<int> learners;
  std::vector<int> quorums;
  double target = 0.9;            // "how many learners for this goodput?"
};

struct SimulationPlan {
  std::string name, path;
  uint64_t seed = 1;
  FailureModel failures;
  TrainingModel training;
  double precision = 0.01;        // half-width of the 95% interval of each cell's goodput
  double min_hours = 0.0, max_hours = 10000.0;  // simulated time per cell
  std::vector<SimulationCell> cells;  // the grid, in the order of the table
  std::vector<Reference> references;
  std::optional<PlanningView> planning;
};

// Reads a plan (TOML; see examples/simulate/), then `overrides` ("key=value",
// as `atoll simulate --set` gives them). Errors name the file, line and key.
Result<SimulationPlan> load_simulation_plan(const std::string& path, const std::vector<std::string>& overrides = {});
Result<SimulationPlan> parse_simulation_plan(std::string_view text, const std::string& path,
                                             const std::vector<std::string>& overrides = {});

struct CellResult {
  SimulationCell cell;
  double goodput = 0.0, goodput_halfwidth = 0.0;  // 95% interval, batch means
  double uptime = 0.0;
  double simulated_hours = 0.0;
  uint64_t interruptions = 0;
  uint64_t events = 0;            // simulated events processed
  double wall_seconds = 0.0;      // CPU spent simulating the cell
  // decoupled: the SyncerCore's rounds, and the time its calls took (the
  // simulation is one busy thread: its steady clock is its CPU time)
  uint64_t rounds = 0;
  double syncer_seconds = 0.0;
  // decoupled: restarted learners welcomed back, and the time from their
  // Register to their welcome (virtual seconds: latencies, and a peer's moments)
  uint64_t reintegrations = 0;
  double reintegration_seconds_mean = 0.0, reintegration_seconds_max = 0.0;
  std::optional<double> reference;  // the plan's figure for this cell, if any
};

// Simulates one cell of the plan (seeded by the plan's seed and the cell).
Result<CellResult> simulate_cell(const SimulationPlan& plan, const SimulationCell& cell);

// Every cell of the plan; for each decoupled cell with M > 1 the paper's rule
// of thumb (elastic_dp at N/M chips); then the planning view's cells.
// `progress` sees each result.
struct SimulationReport {
  std::vector<CellResult> cells;
  std::vector<CellResult> rule_of_thumb;  // elastic_dp at chips / learners, one per decoupled cell with M > 1
  std::vector<CellResult> planning;
  double wall_seconds = 0.0;
  uint64_t events() const;               // over every cell simulated
};
Result<SimulationReport> run_simulation(const SimulationPlan& plan,
                                        const std::function<void(const CellResult&)>& progress = {});

// The report as a person reads it: the failure model, the grid as a table of
// goodput beside the plan's references, the rule of thumb and the planning view.
std::string simulation_table(const SimulationPlan& plan, const SimulationReport& report);
// {"rows": [{"mode", "learners", "chips", "goodput", "uptime", "paper", ...}], ...}:
// goodput, uptime and paper as fractions, paper null where there is no reference.
std::string simulation_json(const SimulationPlan& plan, const SimulationReport& report);
// The planning view as an SVG chart: goodput and uptime against learners, a line per quorum.
std::string planning_svg(const SimulationPlan& plan, const SimulationReport& report);

}  // namespace atl
