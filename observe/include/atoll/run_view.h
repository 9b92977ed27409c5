// RunView: what one run shows, as one read-only snapshot.
//
// The actors record the run in RunRecords (atoll/run_records.h);
// fold_view() turns what they recorded and the topology into a RunView, a
// pure function. Everything that shows a run reads views, never the records: the
// metrics endpoint (atoll/run_metrics.h), the status page
// (atoll/status_server.h), the progress line, the time series and plots
// (atoll/run_plots.h) and the report (report_from_view()).
//
// RunWatch keeps the newest view and the run's time series. Thread-safe:
// the run's sampler writes it, any thread reads it.
//
// Units: seconds since the run started, tokens, bytes; losses in nats per
// token (the training loss is the learners' moving average).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "atoll/report.h"
#include "atoll/run_records.h"
#include "atoll/run_series.h"
#include "atoll/syncer_stats.h"
#include "atoll/topology.h"

namespace atl {

enum class LearnerState : uint8_t {
  kWaiting,  // never registered
  kUp,       // registered and connected
  kDown,     // known to be down
  kGaveUp,   // its supervisor gave up on it
  kLeft,     // departed in order (or released): not a member now
};
const char* learner_state_name(LearnerState s);  // "waiting", "up", "down", "gave up", "left"

// A learner as a live view shows it: the report's figures and its state now.
struct LearnerView : LearnerReport {
  LearnerState state = LearnerState::kWaiting;
  double loss = 0.0;              // moving average of its training loss, as reported
  uint64_t staleness = 0;         // global versions its newest base is behind, worst fragment
  double last_reintegration_seconds = -1.0;  // from its last restart to its welcome; < 0: none
};

struct RunView {
  std::string mode;
  int learners = 0;               // in per_learner: the fixed ones and every open slot used so far
  int members = 0;                // members now (docs/design.md section 6); up or down
  int present = 0;                // members up now
  uint64_t token_budget = 0;      // 0: none
  double seconds_limit = 0.0;     // 0: none
  double seconds = 0.0;           // since the run started
  bool finished = false;          // the token budget, the time limit or stop()
  bool sealed = false;            // the global model is final

  uint64_t tokens = 0;
  double train_loss = 0.0;
  double goodput = 0.0;           // merged learner step time / allocated learner time
  double alive = 0.0;             // share of members up now
  double allocated_seconds = 0.0; // learner time allocated: each member's seconds as a member
  uint64_t joins = 0, departures = 0;  // members that joined (open slots, or back after departing); left in order
  std::vector<uint64_t> versions; // per fragment, the global version
  uint64_t bytes_up = 0, bytes_down = 0;  // learner -> syncer, syncer -> learners
  uint64_t gateway_refusals = 0;  // refused at a syncer process's door
  uint64_t checkpoints = 0;
  uint64_t restarts = 0;          // every supervised child
  uint64_t faults_injected = 0;   // chaos: injections that hit a running target
  uint64_t faults_recovered = 0;  // learners back after a failure (registrations)
  double syncer_cpu_seconds = 0.0;
  SyncerStats stats;              // the syncer's counters and round history
  std::vector<double> reintegration_seconds;
  std::vector<uint64_t> max_adopted_versions;
  uint64_t regressions_refused = 0, version_decreases = 0;
  std::vector<std::string> gave_up;
  std::vector<LearnerView> per_learner;
  std::vector<ShardReport> shards;  // a syncer in shards: each shard held here, as it last published

  // This process, for an engine's probes (atoll/probes.h).
  bool holds_syncer = false;    // the syncer, or a shard of it, runs here
  bool syncer_serving = false;  // it restored its checkpoint (or had none) and takes learners
  int local_learners = 0;       // learners this process runs
  int local_welcomed = 0;       // of them, welcomed by the syncer at least once
  int syncer_links_down = 0;    // learners here whose connection to the syncer (a shard) is lost now
  std::string failure;          // why the run cannot go on; empty: none

  // Held-out evaluation, once the run evaluated it (NaN until then).
  double eval_loss = std::numeric_limits<double>::quiet_NaN();
  double eval_bits_per_byte = std::numeric_limits<double>::quiet_NaN();

  std::vector<SeriesPoint> series;  // filled by RunWatch
  std::vector<EventLine> events;    // the newest events, oldest first

  uint64_t versions_min() const;
  uint64_t versions_max() const;
  SeriesPoint point() const;        // this view as one sample of the series
};

// The evaluation of the newest global model among those learners reported
// (the latest of equals); null when none.
const EvaluationPoint* newest_evaluation(const SyncerStats& stats);

// The view of a run from what was recorded: the syncer's latest sample (a
// default one before it published), the counters, the newest adopted
// versions, the event log and the latch. `max_events` newest events are kept
// as lines; every event is counted.
RunView fold_view(const Topology& topology, const SyncerSample& syncer, const RunCounters& counters,
                  std::vector<uint64_t> max_adopted, const std::vector<TimedEvent>& events, bool finished,
                  bool sealed, size_t max_events = 50);
// A shard's figures from its own sample (syncer.shards = `syncer_shards`).
ShardReport shard_report(const SyncerSample& sample, int syncer_shards);
// fold_view() over a run's records now (and each shard's figures, with shards).
RunView observe_run(const RunRecords& records, const Topology& topology, size_t max_events = 50);

// The report's figures that a view holds: everything but the model and the
// data, which the run adds, and for models atoll runs the held-out
// evaluation and the curve, which it measures after the run. (For a model
// atoll does not run, the evaluations learners reported are the eval and
// the curve.)
Report report_from_view(const RunView& view, double wall_seconds);

// The view as JSON for the status page: at most `max_points` of the series
// (evenly thinned), every learner and the events.
std::string view_json(const RunView& view, size_t max_points = 600);

// The newest view, and the time series of the run: a point at most every
// `interval` seconds, thinned to half (and the interval doubled) when it
// would pass `max_points`, so a long run keeps its shape in bounded memory.
class RunWatch {
 public:
  explicit RunWatch(double interval_seconds = 0.25, size_t max_points = 4096);
  void update(RunView view);
  // Sets the held-out evaluation of the newest view (at the end of a run).
  void set_eval(double loss, double bits_per_byte);
  RunView view() const;  // with its series
  std::vector<SeriesPoint> series() const;

 private:
  mutable std::mutex mu_;
  double interval_;
  size_t max_points_;
  RunView view_;
  std::vector<SeriesPoint> series_;
};

}  // namespace atl
