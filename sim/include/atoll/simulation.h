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
// Links ([network]): each learner's messages cross its own link and the
// syncer shard's (NetworkModel), sized as the real codecs encode them. dp
// and elastic_dp exchange as atoll's dp does, through the syncer (a hub,
// not a ring): after each step every learner sends its gradient (fp32) and
// the next step starts when the new parameters (fp32) are back at all of
// them. With [network], a dp cell has grid.learners members.
//
// A plan (TOML), every key optional but grid.chips, [planning], [scavenging] or [utilization]:
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
//   [training.compute]      # instead of step_seconds: 6 N FLOPs per token
//   parameters = 12e9       tokens_per_step = 4e6   chips = 256   peak_flops = 9.18e14   mfu = 0.6
//   [network]               # links (default: unlimited, delay latency_seconds)
//   link = "rate=2gbit,delay=30ms"   hub = "rate=100gbit"   wire_parameters = 12e9   wait_late = false
//   [[network.region]]      # learners whose link differs
//   learners = [2, 3]       link = "rate=5gbit,delay=40ms"
//   [[network.partition]]   # these learners' links carry nothing for a while
//   learners = [0]          at_seconds = 600   seconds = 120
//   [grid]                  # every combination, in this order
//   modes = ["dp", "elastic_dp", "decoupled"]   chips = [150000, 300000]
//   learners = [2, 4]       quorum = [1]          sync_every = [12]
//   [[reference]]           # published goodput, one per grid.chips (-1: none)
//   mode = "decoupled"      learners = 8          goodput = [0.98, -1]
//   [planning]              # decoupled at `chips` for every M and K
//   chips = 1200000         learners = [1, 2, 4, 8]   quorums = [1, 2]   target = 0.9
//   [scavenging]            # a fixed core, and learners that come and go beside it
//   core = 2                scavenged = [0, 2, 4, 8]  quorum = 1   learner_chips = 1
//   availability = 0.5      mean_up_seconds = 3600    notice_seconds = 30
//   trace = "trace.csv"     # instead of availability and mean_up_seconds
//   [utilization]           # the bandwidth each method needs for a share of compute
//   targets = [0.5, 0.8, 0.9, 0.95, 0.99]   methods = ["dp", "diloco", "streaming", "decoupled"]
//   grid = [0.1, 1000, 50]  # from and to Gbit/s, points (log-spaced)
//   at_gbps = [2, 5]        # also each method's utilization at these bandwidths
//   fragment_layers = 3     learners = 4       periods = 30
//   dp = {bits = 16, volume = 1, latency_seconds = 0}      # any SyncSchedule field by these names
//   diloco = {sync_every = 100}   streaming = {sync_every = 100, overlap = 1, bits = 4}
//   [[utilization.model]]
//   name = "1B"  parameters = 1e9  layers = 24  step_seconds = 0.1
//   [[utilization.reference]]   # published figures, Gbit/s, one per target (-1: none)
//   model = "1B"  method = "dp"  gbps = [86.8, 152.6, 184.2, 222.3, 569.0]
//
// Scavenging: `core` learners hold the fixed slots and are interrupted by
// [failures] as a decoupled learner of `learner_chips` chips is. Each
// scavenged learner runs on a machine that is up for a while, then down, and
// nothing else interrupts it. While the machine is up, one learner process
// claims an open slot (SyncerCore::claim; refused, it asks again after
// ScavengingPlan::kClaimRetrySeconds), registers, and trains as the core's
// learners do. notice_seconds before its machine goes, it finishes its step,
// pushes its progress and says Leave, and goes at Done (or when the notice
// runs out); without notice it vanishes: a failure, its slot held a while.
// The SyncerCore decides membership as it decides rounds. goodput = merged /
// allocated learner time (SyncerCore::allocated_seconds); the speed-up is the
// merged learner time per hour against the core alone's. A scavenging cell
// runs until both goodput and merged learner time are within `precision`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "atoll/link_shape.h"
#include "atoll/rng.h"
#include "atoll/status.h"
#include "atoll/topology.h"
#include "atoll/utilization_model.h"

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
  std::vector<std::string> sets;  // training.set as given, which `outer` was read from
  int syncer_shards = 1;          // syncer.shards: one SyncerCore per shard, each its own fragments
  // [training.compute]: step_seconds from Kaplan's 6 N FLOPs per token,
  // 6 * parameters * tokens_per_step / (chips * peak_flops * mfu); chips are one learner's.
  struct Compute {
    double parameters = 0, tokens_per_step = 0, chips = 1, peak_flops = 0, mfu = 0.6;
  };
  std::optional<Compute> compute;
};

// The links between learners and the syncer ([network]). Every message
// crosses its learner's link (atoll/link_shape.h: queued behind what the
// link is still sending, then the delay), and a syncer shard's own link
// (store and forward). Without [network], each learner's link is unlimited
// with a delay of training.latency_seconds, and the hub unlimited.
struct NetworkModel {
  bool given = false;              // the plan has [network]
  LinkShape link;                  // each learner's link, each way
  struct Region {                  // learners whose link differs
    std::vector<int> learners;
    LinkShape link;
  };
  std::vector<Region> regions;
  LinkShape hub;                   // each syncer shard's link, each way (default: unlimited)
  // Messages sized as if the model had this many parameters (0: the
  // simulated model's own): a payload's bytes scale by wire / simulated.
  double wire_parameters = 0;
  // The links of these learners carry nothing from at_seconds for
  // `seconds` (what they send or are sent meanwhile is lost), as the chaos
  // fault kind "partition" does in a real run.
  struct Partition {
    std::vector<int> learners;
    double at_seconds = 0, seconds = 0;
  };
  std::vector<Partition> partitions;
  // Decoupled learners wait for a fragment's broadcast that has not come
  // outer.overlap steps after its push, as Streaming DiLoCo's workers do
  // (atoll's learners train on: false).
  bool wait_late = false;
  LinkShape link_of(int learner) const;  // its region's, else `link`
  // When a partition that cuts `learner` off at time t ends (t: none does).
  double cut_until(int learner, double t) const;
};

struct SimulationCell {
  Mode mode = Mode::kDecoupled;
  int learners = 1;               // M (dp, elastic_dp: 1, or with [network] the members of the exchange); scavenging: the core
  int64_t chips = 0;              // N
  int quorum = 1;                 // K (decoupled)
  int sync_every = 0;             // H (decoupled); 0: training.outer's
  int scavenged = -1;             // a scavenging cell with this many learners beside the core (-1: not one)
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

// One up period of a scavenged learner's machine and the down period after it.
struct AvailabilityPeriod {
  double up_seconds = 0.0;        // 0: it stays down
  double down_seconds = 0.0;
  double notice_seconds = -1.0;   // of this period's end (-1: the plan's)
};
// Per scavenged learner, its periods in order; a learner's periods repeat
// when they run out.
using AvailabilityTrace = std::vector<std::vector<AvailabilityPeriod>>;

// A trace (CSV): rows `learner,up_seconds,down_seconds[,notice_seconds]`,
// learners numbered from 0 without gaps, each learner's rows in the order
// they happen; `#` starts a comment, blank lines and a header row are
// skipped. Errors name the file and line.
Result<AvailabilityTrace> load_availability_trace(const std::string& path);
Result<AvailabilityTrace> parse_availability_trace(std::string_view text, const std::string& path);

// Learners that come and go beside a fixed core (see above).
struct ScavengingPlan {
  int core = 2;                   // fixed learners
  std::vector<int> scavenged = {0, 2, 4, 8};  // the rows of the table
  int quorum = 1;                 // K
  int64_t learner_chips = 1;      // per learner: the core's interruptions, tokens per step
  double availability = 0.5;      // share of time a scavenged learner's machine is up
  double mean_up_seconds = 3600;  // exponential up periods; down periods of mean up x (1 - a) / a
  double notice_seconds = 30;     // before a machine goes (0: its learner vanishes, a failure)
  std::string trace_path;         // as the plan gave it; empty: availability and mean_up_seconds
  AvailabilityTrace trace;

  // A learner refused a slot (all taken, or held for one that vanished)
  // asks again after this long, while its machine is up.
  static constexpr double kClaimRetrySeconds = 10.0;
  // Mean seconds of an up period and the down period after it (0: always up).
  double mean_cycle_seconds(int learners) const;
};

// [utilization]: per model, the smallest grid bandwidth at which each
// method keeps `targets` of compute busy, with Streaming DiLoCo's method
// (atoll/utilization_model.h) for "dp", "diloco" and "streaming", and the
// simulator for "decoupled": `learners` simulated learners, each on a link
// of that bandwidth (no delay, an unlimited hub, no failures), running
// atoll's protocol with training.set's [outer] keys, the model's step time
// and messages sized for its parameters; learners that wait for a
// broadcast later than tau steps after its push (network.wait_late), so
// that its utilization means what Streaming DiLoCo's does.
// Streaming and decoupled send fragments of `fragment_layers` layers:
// P = layers / fragment_layers.
struct UtilizationView {
  std::vector<double> targets = {0.5, 0.8, 0.9, 0.95, 0.99};
  std::vector<double> grid = bandwidth_grid();  // bits/s, ascending
  std::vector<double> at;                 // bits/s: also each method's utilization at these
  std::vector<std::string> methods = {"dp", "diloco", "streaming", "decoupled"};
  std::vector<Workload> models;
  SyncSchedule dp{SyncMethod::kDataParallel};
  SyncSchedule diloco{SyncMethod::kDiLoCo, 100};
  SyncSchedule streaming{SyncMethod::kStreaming, 100, 1, 1, 4.0};
  int fragment_layers = 3;
  int learners = 4;                       // decoupled
  // More rows of atoll's decoupled, each with its own [outer] settings on top
  // of training.set (a method of `methods` may name one): "streamed" =
  // ["outer.stream=12"]. `outer` is those settings read as a topology.
  struct Variant {
    std::string name;
    std::vector<std::string> sets;
    OuterSpec outer;
  };
  std::vector<Variant> variants;
  LinkShape link;                         // decoupled: each learner's link, but its rate (the grid's)
  double periods = 30;                    // decoupled: simulated time, in H-step periods
  struct Reference {                      // published figures, one per target (-1: none)
    std::string model, method;
    std::vector<double> gbps;
  };
  std::vector<Reference> references;
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
  std::optional<ScavengingPlan> scavenging;
  NetworkModel network;
  std::optional<UtilizationView> utilization;
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
  // decoupled: pushes merged, and pushes that came after their round closed
  // or twice for one round (SyncerStats::late): each crossed a link for nothing
  uint64_t merged_pushes = 0, late_pushes = 0;
  uint64_t repairs = 0;  // versions sent again whole to a learner left behind (SyncerStats::repairs)
  double syncer_seconds = 0.0;
  double syncer_busiest_shard_seconds = 0.0;  // of syncer_seconds, the busiest shard's (one shard: all)
  // decoupled: restarted learners welcomed back, and the time from their
  // Register to their welcome (virtual seconds: latencies, and a peer's moments)
  uint64_t reintegrations = 0;
  double reintegration_seconds_mean = 0.0, reintegration_seconds_max = 0.0;
  std::optional<double> reference;  // the plan's figure for this cell, if any
  // Links. utilization: the share of learner time spent in steps (dp: the
  // rest waits for the exchange; decoupled learners never wait). on_time:
  // the share it would be if a learner waited, as Streaming DiLoCo's workers
  // do, for a fragment's broadcast that has not come outer.overlap steps
  // after its push (decoupled; dp: = utilization). Over the measured time.
  double utilization = 1.0, on_time = 1.0;
  uint64_t lost_to_partition = 0;  // messages a partition dropped
  // Scavenging cells, over the measured time (after the warm-up batch;
  // `rounds` stays the whole run's): learner time allocated, merged and
  // trained per second of run (mean learners; trained counts lost steps too),
  // tokens trained, the speed-up over the core alone (merged learner time,
  // and tokens trained), and the scavenged learners' comings and goings:
  // joins, orderly departures, vanishings (failures), slots released after
  // their hold, departures whose notice ran out before Done, refused claims.
  double allocated_learners = 0.0, merged_learners = 0.0, merged_halfwidth = 0.0, trained_learners = 0.0;
  uint64_t tokens = 0;
  double speedup = 0.0, speedup_halfwidth = 0.0, tokens_speedup = 0.0;
  uint64_t joins = 0, departures = 0, vanished = 0, released = 0, cut_short = 0, claims_refused = 0;
  double measured_hours = 0.0;
  double join_seconds_mean = 0.0, join_seconds_max = 0.0;  // a machine up to its learner's welcome
};

// Simulates one cell of the plan (seeded by the plan's seed and the cell).
Result<CellResult> simulate_cell(const SimulationPlan& plan, const SimulationCell& cell);

// Every cell of the plan; for each decoupled cell with M > 1 the paper's rule
// of thumb (elastic_dp at N/M chips); then the planning view's cells; then a
// scavenging cell per scavenged count, and the core alone if no row is it.
// `progress` sees each result.
struct SimulationReport {
  std::vector<CellResult> cells;
  std::vector<CellResult> rule_of_thumb;  // elastic_dp at chips / learners, one per decoupled cell with M > 1
  std::vector<CellResult> planning;
  std::vector<CellResult> scavenging;     // one per scavenging.scavenged, with its speed-up
  std::optional<CellResult> scavenging_core;  // the core alone, when scavenged has no 0
  struct UtilizationRow {
    std::string model, method;
    double target = 0;
    std::optional<double> bits_per_second;  // none: no grid bandwidth reaches the target
    std::optional<double> paper_gbps;       // the plan's reference
    int grid_steps_off = 0;                 // from the reference, on the grid (+: above)
  };
  std::vector<UtilizationRow> utilization;
  struct UtilizationAt {                    // [utilization] at_gbps
    std::string model, method;
    double bits_per_second = 0, utilization = 0;
  };
  std::vector<UtilizationAt> utilization_at;
  double wall_seconds = 0.0;
  uint64_t events() const;               // over every cell simulated
};
Result<SimulationReport> run_simulation(const SimulationPlan& plan,
                                        const std::function<void(const CellResult&)>& progress = {});

// The [utilization] rows, model by model, method by method, target by target
// (run_simulation fills SimulationReport::utilization with them).
// at_gbps: each method's utilization at those bandwidths, into `at`.
Result<std::vector<SimulationReport::UtilizationRow>> utilization_rows(
    const SimulationPlan& plan, std::vector<SimulationReport::UtilizationAt>* at = nullptr);

// The report as a person reads it: the failure model, the grid as a table of
// goodput beside the plan's references, the rule of thumb, the planning view
// and the scavenging table.
std::string simulation_table(const SimulationPlan& plan, const SimulationReport& report);
// {"rows": [{"mode", "learners", "chips", "goodput", "uptime", "paper", ...}], ...}:
// goodput, uptime and paper as fractions, paper null where there is no reference;
// "scavenging": {"core", ..., "rows": [{"scavenged", "goodput", "speedup", ...}]}.
std::string simulation_json(const SimulationPlan& plan, const SimulationReport& report);
// The planning view as an SVG chart: goodput and uptime against learners, a line per quorum.
std::string planning_svg(const SimulationPlan& plan, const SimulationReport& report);

}  // namespace atl
