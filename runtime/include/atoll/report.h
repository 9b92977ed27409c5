// Report: what a run measured (DESIGN section 7), as JSON and as a table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace atl {

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
};

struct Report {
  std::string mode, model, data;
  int learners = 0;
  double wall_seconds = 0.0;
  uint64_t tokens = 0;              // trained by every learner (lost work included)
  double tokens_per_second = 0.0;
  double goodput = 0.0;             // merged learner step time / (learners x wall)
  double uptime = 0.0;              // share of wall time the global model kept advancing
  struct {
    double loss = 0.0, accuracy = 0.0, bits_per_byte = 0.0;
    int64_t count = 0;              // examples (or bytes) evaluated
  } eval;
  struct {
    uint64_t learner_to_syncer = 0, syncer_to_learners = 0;
  } bytes;
  double bytes_per_token = 0.0;     // both directions
  uint64_t rounds = 0;
  double quorum_mean = 0.0;
  double grace_wait_mean_ms = 0.0;
  uint64_t late = 0, stale_refused = 0, rejected = 0, cancelled_rounds = 0;
  uint64_t restarts = 0;
  uint64_t checkpoints = 0;
  uint64_t versions_min = 0, versions_max = 0;
  std::vector<double> reintegration_seconds;  // a restarted learner: from its start to its welcome
  std::vector<double> recovery_seconds;       // from a learner's failure (as seen) to its next welcome
  uint64_t recovered_fragments = 0;           // taken by a restarted syncer from learners' bases
  uint64_t moments_handed = 0;                // restarted learners that got a peer's AdamW moments
  uint64_t regressions_refused = 0;           // welcomes older than what a learner held (reordered; ignored)
  uint64_t version_decreases = 0;             // the global version of a fragment went down (must be 0)
  std::vector<uint64_t> final_versions;       // the global version of each fragment at the end
  std::vector<uint64_t> max_adopted_versions; // the newest version any learner adopted, per fragment
  std::vector<LearnerReport> per_learner;
  std::vector<std::string> gave_up;           // children a supervisor stopped restarting

  std::string to_json() const;
  std::string to_table() const;
};

// Share of [0, wall] during which rounds kept completing: gaps between round
// ends (and before the first and after the last) count in full up to 3x the
// median gap, and only that much beyond it.
double uptime_of(const std::vector<double>& round_ends, double wall);

}  // namespace atl
