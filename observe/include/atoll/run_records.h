// RunRecords: what the actors of one process record about a run, typed.
//
// Six parts, each with one job and its own synchronization:
//   counters  monotone atomics for facts counted outside the syncer (checkpoints, the door's refusals);
//   log       the append-only event log (atoll/run_event.h), also written as
//             the JSON-lines event tape when given a path;
//   syncer    the syncer's latest sample: one writer (the syncer actor, or
//             each shard's actor), many readers; the only in-process source
//             of a restarted syncer's continuity;
//   latch     finish, fail and seal, each set once;
//   snapshots the global model at planned points, for the quality curve;
//   readiness what an engine's readiness probe asks (atoll/probes.h).
// Everything that shows a run (views, reports, chaos verdicts) is a fold
// over these records, never a mutator of them. No CAF here.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "atoll/run_event.h"
#include "atoll/status.h"
#include "atoll/syncer_stats.h"

namespace atl {

struct RunCounters {
  std::atomic<uint64_t> checkpoints{0}; // written
  // Refused at a syncer process's door (a bad token, an unknown id, an
  // oversized packet) before reaching the syncer, which counts the rest.
  std::atomic<uint64_t> gateway_refusals{0};
  // Welcomes learners refused because they held a newer version.
  std::atomic<uint64_t> regressions_refused{0};
};

// The newest global version any learner of this process adopted, per
// fragment: only ever goes up. Lock-free; fragments beyond the size given at
// construction are ignored.
class AdoptedVersions {
 public:
  explicit AdoptedVersions(size_t fragments) : max_(fragments) {}
  void note(uint32_t fragment, uint64_t version);
  std::vector<uint64_t> max() const;  // empty until a learner here adopted anything

 private:
  std::vector<std::atomic<uint64_t>> max_;
  std::atomic<bool> any_{false};
};

// The CPU time of the run's learner processes on the syncer's machine (each
// says its own in its Progress), so that the machine's load leaves them out:
// they are the run, not others. A process killed keeps its last figure.
class LearnerProcessesCpu {
 public:
  void note(uint64_t process, double cpu_seconds);
  double seconds() const;  // summed over the processes noted
  size_t processes() const;

 private:
  mutable std::mutex mu_;
  std::map<uint64_t, double> by_process_;
};

class RunLog {
 public:
  using Clock = std::chrono::steady_clock;
  // `path` empty: kept in memory only. The file is truncated.
  static Result<std::shared_ptr<RunLog>> open(const std::string& path, Clock::time_point start);
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  // Appends at the time now (the line is flushed at once: a crash loses nothing written).
  void append(RunEvent e);
  std::vector<TimedEvent> events() const;
  size_t size() const;

 private:
  RunLog() = default;
  Clock::time_point start_;
  std::FILE* file_ = nullptr;
  mutable std::mutex mu_;
  std::vector<TimedEvent> events_;
};

// What the syncer knows, as of its latest tick (and its last word).
struct SyncerSample {
  uint32_t shard = 0;        // of syncer.shards: whose sample
  uint64_t parameters = 0;   // of the model, in the fragments this syncer (shard) owns
  uint32_t fragments = 0;    // it owns
  double seconds = 0.0;      // since the run started (SyncerCore::elapsed)
  SteadyTime start{};        // the run's start on this process's clock (SyncerCore::run_start)
  double cpu_seconds = 0.0;  // its thread CPU on messages and timers (this incarnation)
  bool recovering = false;   // a restarted syncer still catching up: versions may lag
  uint64_t tokens = 0;       // trained by every learner, all incarnations
  double allocated_seconds = 0.0;  // learner time allocated to the run: each member's time as a member
  SyncerStats stats;
  std::vector<LearnerRecord> learners;
  std::vector<uint64_t> versions;  // per fragment
};

class RunLatch {
 public:
  using Clock = std::chrono::steady_clock;
  // The token budget, the time limit or stop(); wakes wait_finished_until.
  void finish();
  // Ends the run because it cannot go on; the first reason is kept. True
  // for the first call. Its code tells what to do next: kRefused, joining
  // again cannot help; kUnavailable, the peer may come back.
  // REQUIRES: !why.ok().
  bool fail(Status why);
  // The syncer merged all it will: the global model is final. Also finishes.
  void seal();
  bool finished() const;
  bool sealed() const;
  Status failure() const;  // ok: none
  bool wait_finished_until(Clock::time_point deadline) const;
  bool wait_sealed_until(Clock::time_point deadline) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool finished_ = false, sealed_ = false;
  Status failure_;
};

// The global model at planned points of the run, for a curve of quality
// against tokens and time evaluated after it. Each syncer shard of this
// process takes its own at each point (its fragments; zeros elsewhere):
// the k-th snapshots of the shards together are the model at point k.
class ModelSnapshots {
 public:
  struct Snapshot {
    double seconds = 0.0;  // since the run started
    uint64_t tokens = 0;
    std::vector<float> theta;
  };
  // `points` - 1 snapshots at equal steps of the token budget (of the time
  // limit when there is no budget); the run's end is the last point.
  void plan(int points, uint64_t tokens, double seconds);
  // Shard `shard` passed its next planned point.
  bool due(uint64_t tokens, double seconds, uint32_t shard = 0) const;
  void add(Snapshot s, uint32_t shard = 0);
  size_t count(uint32_t shard = 0) const;  // taken so far: the next point's index
  std::vector<Snapshot> taken(uint32_t shard = 0) const;

 private:
  mutable std::mutex mu_;
  int points_ = 0;
  uint64_t tokens_ = 0;
  double seconds_ = 0.0;
  std::vector<std::vector<Snapshot>> taken_;  // by shard
};

// Set by the actors, read by an engine's probe (GET /readyz, atoll/probes.h).
class Readiness {
 public:
  // The syncer restored its checkpoint (or had none) and takes learners;
  // false again while a restarted syncer loads its checkpoint.
  void set_syncer_serving(bool serving) { syncer_serving_ = serving; }
  bool syncer_serving() const { return syncer_serving_; }
  // A learner of this process was welcomed by the syncer (every shard of
  // it); once is enough.
  void welcomed(uint32_t learner);
  size_t learners_welcomed() const;
  // A learner here lost its connection to the syncer (to shard `shard` of
  // it) and has not connected again: not ready meanwhile. Up again once the
  // connection is back.
  void set_syncer_link(uint32_t learner, uint32_t shard, bool up);
  size_t syncer_links_down() const;

 private:
  std::atomic<bool> syncer_serving_{false};
  mutable std::mutex mu_;
  std::vector<uint32_t> welcomed_;  // ids, each once
  std::set<std::pair<uint32_t, uint32_t>> links_down_;  // (learner, shard)
};

// The run's syncer sample from the samples of its shards (syncer.shards =
// `syncer_shards` >= 1; `by_shard[i]` is shard i's, null where none was
// published yet): counters and round histories summed and merged, each
// fragment's version and each learner's per-fragment record from the
// fragment's owner (shard_of()), a learner's steps and tokens (every shard
// hears every Progress) and the run's clock as the most any shard has seen.
SyncerSample merge_shard_samples(const std::vector<std::shared_ptr<const SyncerSample>>& by_shard,
                                 int syncer_shards);

// The run's SyncerStats from its shards' (in shard order, none null):
// counters summed, round ends merged in time order, the first welcome the
// earliest, final once every shard is; evaluations and recoveries as the
// first shard has them (learners send evaluations to shard 0 alone), plus
// the later shards' evaluations.
SyncerStats merge_shard_stats(const std::vector<const SyncerStats*>& shards);

struct RunRecords {
  // `syncer_shards`: the topology's syncer.shards (a process may hold one
  // shard of them, or all).
  RunRecords(std::shared_ptr<RunLog> event_log, size_t fragments, int syncer_shards = 1)
      : log(std::move(event_log)), adopted(fragments), shards_(std::max(1, syncer_shards)),
        by_shard_(static_cast<size_t>(shards_)) {}

  RunCounters counters;
  std::shared_ptr<RunLog> log;
  AdoptedVersions adopted;
  LearnerProcessesCpu learner_cpu;
  RunLatch latch;
  ModelSnapshots snapshots;
  Readiness readiness;

  // Shard `shard`'s sample (0: the syncer's); a decreasing version of a
  // fragment it owns is logged (unless recovering).
  void publish(SyncerSample sample, uint32_t shard = 0);
  // The run's: the only shard's, or every shard's merged (merge_shard_samples). Null: nothing published yet.
  std::shared_ptr<const SyncerSample> syncer() const;
  std::shared_ptr<const SyncerSample> shard(uint32_t shard) const;  // as it published it (null: not yet)
  int syncer_shards() const { return shards_; }
  // Shard `shard` merged all it will; once every shard held here did
  // (`held`: the shards this process runs), the latch is sealed.
  void seal_shard(uint32_t shard, size_t held);
  void fail(Status why);                               // latch.fail, and logged if it was the first

 private:
  const int shards_;
  mutable std::mutex sample_mu_;  // guards the pointers, never the samples
  std::vector<std::shared_ptr<const SyncerSample>> by_shard_;
  std::shared_ptr<const SyncerSample> merged_;
  std::vector<uint64_t> last_published_;  // per fragment, not while recovering
  std::set<uint32_t> sealed_shards_;
};

// An in-memory run's records (tests, a process without a tape).
std::shared_ptr<RunRecords> make_records(size_t fragments,
                                         RunLog::Clock::time_point start = RunLog::Clock::now(), int syncer_shards = 1);

}  // namespace atl
