// RunBoard: what the actors of one process publish for whoever runs them.
//
// The syncer publishes live metrics and its final statistics; supervisors
// count restarts; the syncer actor counts bytes. The embedding API (atoll/run.h)
// and the CLI read it from their own threads. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "atoll/syncer_core.h"

namespace atl {

// A cheap snapshot for a progress line.
struct LiveMetrics {
  double seconds = 0.0;       // since the syncer started
  uint64_t tokens = 0;
  double loss = 0.0;          // mean of the learners' moving-average training loss
  uint64_t rounds = 0;
  uint64_t versions_min = 0, versions_max = 0;
  double goodput = 0.0;       // so far
  int connected = 0;          // learners registered and alive
  std::vector<uint64_t> learner_steps;         // per learner, of its current incarnation
  std::vector<uint64_t> learner_incarnations;  // per learner, the last to register
  uint64_t restarts = 0;
  uint64_t reintegrations = 0;  // restarted learners welcomed back (counted as it happens)
  uint64_t bytes_up = 0, bytes_down = 0;
};

class RunBoard {
 public:
  std::atomic<uint64_t> bytes_up{0};    // learner -> syncer, counted where the syncer receives
  std::atomic<uint64_t> bytes_down{0};  // syncer -> learners, counted where the syncer sends
  std::atomic<uint64_t> checkpoints{0};
  // Refused at a syncer process's door (a bad token, an unknown id, an
  // oversized packet) before reaching the syncer, which counts the rest.
  std::atomic<uint64_t> gateway_refusals{0};

  void publish(const LiveMetrics& m);
  // The syncer's latest snapshot, with the board's own counters (restarts,
  // re-integrations, bytes) as of now.
  LiveMetrics live() const;

  // The syncer's latest word (published every tick and at the end):
  // statistics, learner records, versions. A restarted syncer continues from it.
  struct Final {
    bool valid = false;
    SyncerStats stats;
    std::vector<LearnerRecord> learners;
    std::vector<uint64_t> versions;
    double seconds = 0.0;
    double cpu_seconds = 0.0;  // the syncer's thread CPU handling messages and timers (this incarnation)
  };
  void publish_final(Final f);
  Final final_state() const;

  // Learners: a restarted learner's time from its start to its welcome; the
  // versions they adopted; welcomes they refused because they were older.
  void note_reintegration(double seconds);
  std::vector<double> reintegrations() const;
  void note_adopted(uint32_t fragment, uint64_t version);
  std::vector<uint64_t> max_adopted() const;  // per fragment
  std::atomic<uint64_t> regressions_refused{0};
  // The syncer's versions as it publishes them (not while it recovers after a
  // restart): a fragment whose version goes down is counted.
  void note_versions(const std::vector<uint64_t>& versions);
  uint64_t version_decreases() const;

  void note_restart(const std::string& child);
  void note_gave_up(const std::string& child);
  uint64_t restarts() const;
  uint64_t restarts_of(const std::string& child) const;
  std::vector<std::string> gave_up() const;

  // The token budget was reached (set once; wakes wait_finished).
  void finish();
  bool finished() const;
  // Ends the run because it cannot go on (a learner process refused for a
  // bad token, say); the first reason is kept.
  void fail(const std::string& why);
  std::string failure() const;  // empty: none
  // Waits until finish() or the deadline; returns finished().
  bool wait_finished_until(std::chrono::steady_clock::time_point deadline) const;

  // The syncer merged all it will (after its final flush): the global model
  // is final. Set once; also finishes the run.
  void seal();
  bool sealed() const;
  bool wait_sealed_until(std::chrono::steady_clock::time_point deadline) const;

  // Snapshots of the global model at points of the run, for a curve of
  // quality against tokens and time that is evaluated after the run.
  struct Snapshot {
    double seconds = 0.0;  // since the run started
    uint64_t tokens = 0;
    std::vector<float> theta;
  };
  // `points` - 1 snapshots at equal steps of the token budget (of the time
  // limit when there is no token budget); the run's end is the last point.
  void plan_snapshots(int points, uint64_t tokens, double seconds);
  // True once the run passed the next planned point.
  bool snapshot_due(uint64_t tokens, double seconds) const;
  void add_snapshot(Snapshot snapshot);
  std::vector<Snapshot> snapshots() const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  LiveMetrics live_;
  Final final_;
  std::map<std::string, uint64_t> restarts_;
  std::vector<double> reintegrations_;
  std::vector<uint64_t> max_adopted_;
  std::vector<uint64_t> max_published_;
  uint64_t version_decreases_ = 0;
  std::vector<std::string> gave_up_;
  bool finished_ = false;
  bool sealed_ = false;
  std::string failure_;
  int snapshot_points_ = 0;
  uint64_t snapshot_tokens_ = 0;
  double snapshot_seconds_ = 0.0;
  std::vector<Snapshot> snapshots_;
};

}  // namespace atl
