// Report: what a run measured (docs/design.md section 7), as JSON and as a table.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "atoll/model.h"
#include "atoll/run_series.h"
#include "atoll/syncer_stats.h"

namespace atl {

class Job;  // atoll/job.h: the final evaluation reads its held-out batches

// One learner's figures, in the report and in the view (LearnerView adds
// what only a live view shows). fold_view() (atoll/run_view.h) fills them from
// the syncer's record of the learner, which also travels whole in `record`: a
// figure added to LearnerRecord reaches the view's and the report's JSON
// through write_learner_json() (report.cc) alone.
struct LearnerReport {
  uint32_t id = 0;
  double speed = 1.0;
  int batch_size = 0;
  uint64_t steps = 0, tokens = 0;   // all incarnations
  uint64_t merged = 0;              // pushes merged into the global model
  uint64_t restarts = 0;
  uint64_t incarnation = 0;         // of the last one to register
  uint64_t last_incarnation_tokens = 0;
  double step_seconds = 0.0;        // moving average of the last incarnation
  bool gave_up = false;             // restart intensity exceeded
  LearnerRecord record;             // as the syncer last published it (default: no syncer here)
};

// One syncer shard's figures (syncer.shards > 1), beside the run's: what it
// holds and what it did. The run's figures are every shard's merged.
struct ShardReport {
  uint32_t shard = 0;
  uint64_t parameters = 0;          // of the model, in the fragments it owns (shard_of())
  uint32_t fragments = 0;
  uint64_t rounds = 0;
  SyncerCountValues counts{};       // kSyncerCounts, its own
  uint64_t rejected = 0;
  double round_mean_ms = 0.0;       // from a round's pulls to its broadcast
  double cpu_seconds = 0.0;         // its actor's thread CPU (its last incarnation)
  uint64_t versions_min = 0, versions_max = 0;  // over its fragments
  bool recovering = false;          // restarted and still catching up, as last seen
};

struct Report {
  std::string mode, model, data;
  int learners = 0;
  double wall_seconds = 0.0;
  uint64_t tokens = 0;              // trained by every learner (lost work included)
  double tokens_per_second = 0.0;
  double goodput = 0.0;             // merged learner step time / allocated learner time
  // Learner time allocated to the run (docs/design.md section 7): each
  // member's seconds as a member, M x wall when membership never changed.
  double allocated_learner_seconds = 0.0;
  uint64_t joins = 0, departures = 0;  // members that joined; that left in order
  double uptime = 0.0;              // share of the training time the global model kept advancing (uptime_of)
  // How learners shared compute (topology `hardware`; atoll/step_pacer.h).
  struct {
    std::string name = "shared";
    double compute_seconds = 0.0;   // dedicated: one step on one thread, measured before the run
    double step_seconds = 0.0;      // dedicated: a speed-1 learner's paced step
    uint64_t paced_steps = 0, late_steps = 0;  // late: took longer than their pace
    // Shares of the machine's CPU (every core, 0 to 1) over the run that other
    // processes and the hypervisor (steal) took (atoll/machine_load.h); NaN:
    // not measured. A run that shared its machine is not a clean measurement.
    double others_cpu = std::numeric_limits<double>::quiet_NaN();
    double steal = std::numeric_limits<double>::quiet_NaN();
    // The run's own learner processes on the syncer's machine, as they
    // reported: left out of others_cpu. CPU seconds, and how many processes.
    double learner_processes_cpu_seconds = 0.0;
    uint64_t learner_processes = 0;
  } hardware;
  struct {
    double loss = 0.0, accuracy = 0.0, bits_per_byte = 0.0;
    double loss_stderr = 0.0, bits_per_byte_stderr = 0.0;  // standard error, over batches
    int64_t count = 0;              // examples (or bytes) evaluated
    int64_t windows = 0;            // language models: held-out windows evaluated
    int64_t batches = 0;            // the unit of the standard error
    // Who measured it: empty for atoll's own held-out data after the run; a
    // learner's evaluator for models atoll does not run (atoll.Evaluator),
    // or why there is no figure (loss NaN).
    std::string by;
    // Of the final model (atoll's own evaluation after the run, or an
    // evaluator's after the last rounds); false: the newest made during the run.
    bool final = false;
  } eval;
  struct {
    uint64_t learner_to_syncer = 0, syncer_to_learners = 0;
  } bytes;
  double bytes_per_token = 0.0;     // both directions
  uint64_t rounds = 0;
  double syncer_cpu_seconds = 0.0;  // the syncer's thread CPU (its last incarnation)
  double quorum_mean = 0.0;
  double grace_wait_mean_ms = 0.0;
  double round_mean_ms = 0.0;                 // decoupled: from a round's pulls to its broadcast
  double broadcast_adopted_mean_ms = 0.0;     // from a broadcast until every learner reported it adopted
  double broadcast_adopted_max_ms = 0.0;
  SyncerCountValues counts{};                 // the syncer's (kSyncerCounts), summed over shards
  uint64_t rejected = 0;                      // by the syncer and at its door
  uint64_t restarts = 0;
  uint64_t checkpoints = 0;
  uint64_t versions_min = 0, versions_max = 0;
  std::vector<double> reintegration_seconds;  // a restarted learner: from its start to its welcome
  std::vector<double> recovery_seconds;       // from a learner's failure (as seen) to its next welcome
  uint64_t regressions_refused = 0;           // welcomes older than what a learner held (reordered; ignored)
  uint64_t version_decreases = 0;             // drops of a fragment's global version below the one published
                                              // before (event::VersionDecreased; must be 0)
  std::vector<uint64_t> final_versions;       // the global version of each fragment at the end
  std::vector<uint64_t> max_adopted_versions; // the newest version any learner adopted, per fragment
  std::string sample;                         // language models: text generated by the global model
  // The global model at points of the run (RunOptions::curve_points), the end last.
  struct CurvePoint {
    double seconds = 0.0;
    uint64_t tokens = 0;
    double loss = 0.0, bits_per_byte = 0.0, accuracy = 0.0;
    // The model evaluated at `seconds` and `tokens` of the run (`text`: a language model).
    static CurvePoint of(double seconds, uint64_t tokens, const EvalSums& e, bool text);
  };
  std::vector<CurvePoint> curve;
  std::vector<LearnerReport> per_learner;
  std::vector<ShardReport> shards;            // a syncer in shards: each shard held here (empty: one syncer)
  std::vector<std::string> gave_up;           // children a supervisor stopped restarting
  // The run over time (not in to_json(): run_plots writes them beside it).
  std::vector<SeriesPoint> series;
  std::vector<EventLine> events;               // the newest lines of the event tape

  // The held-out figures of the final model, from atoll's own evaluation of
  // it on `job`'s held-out batches.
  void set_final_eval(const EvalSums& sums, const Job& job);
  // The final model as the curve's last point (after set_final_eval).
  void end_curve() { curve.push_back({wall_seconds, tokens, eval.loss, eval.bits_per_byte, eval.accuracy}); }

  std::string to_json() const;
  std::string to_table() const;
};

// Share of [begin, end] during which rounds kept completing: gaps between
// round ends (and before the first and after the last) count in full up to
// 3x the median gap, and only that much beyond it. Round ends within 1 ms of
// the last one counted are the same advance (fragments due together, the
// final flush). A run's span is its training: from the first learner's
// welcome to the end of its last rounds, not the wait for learners to come
// or for the final evaluations.
double uptime_of(const std::vector<RoundEnd>& round_ends, double end, double begin = 0.0);

}  // namespace atl
