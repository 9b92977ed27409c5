// FragmentLedger: a learner's bookkeeping of its fragments, without values,
// and the protocol's rules over it (docs/design.md section 5). Every replica
// keeps one: LearnerCore beside the values (bases, the values at each push),
// CountingReplica beside payload sizes alone, so both follow one set of rules.
//
// Per fragment p it keeps the version held, its progress since its base (the
// learner's steps (since, now], their tokens and device seconds, carried over
// versions that did not merge it), whether it was pushed at this version (and
// whether unasked), the pushes in flight, its stale refusals; for the learner,
// its steps, tokens and moving averages (step time, merge lag).
//
// Units: steps are the learner's inner steps; seconds are (emulated) device
// seconds of those steps. Decisions read only this state and the topology.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "atoll/learner_replica.h"
#include "atoll/messages.h"
#include "atoll/topology.h"

namespace atl {

// An exponential moving average that starts at its first sample (the n-th, n >= 1).
inline double moving_average(double average, double x, uint64_t n, double alpha = 0.2) {
  return n <= 1 ? x : average + alpha * (x - average);
}

class FragmentLedger {
 public:
  // Progress carried over more sync intervals than this, plus kCarriedLags
  // times the learner's merge lag (the steps from a push to the broadcast
  // that merged it, a moving average), is dropped at the next version: a
  // learner that is never merged must not build an unbounded push.
  static constexpr uint64_t kMaxCarriedIntervals = 8;
  static constexpr double kCarriedLags = 4.0;
  // Pushes of a fragment remembered until a broadcast says which one it
  // merged; a credit for an older one drops the progress (it cannot be told apart).
  static constexpr size_t kMaxInFlight = 4;

  // A push not yet known merged, and the fragment's counts when it went.
  struct InFlight {
    uint64_t through = 0;  // Push::through: the learner's steps when it went
    uint64_t steps = 0, tokens = 0;
    double seconds = 0.0;
    // LearnerCore's: where the carry starts once this push is merged (the
    // values at the push), moved along by every version adopted since. Empty
    // for a replica without values.
    std::vector<float> values;
  };
  struct Track {
    bool welcomed = false;  // it has a base: a syncer (shard) welcomed it
    uint64_t version = 0;
    uint64_t since = 0;     // progress is the learner's steps (since, now]
    uint64_t steps = 0, tokens = 0;
    double seconds = 0.0;
    bool pushed = false;     // pushed unasked (or answered) since adopting `version`
    bool unasked = false;    // that push went unasked: it answers a pull of `version`
    bool pushed_here = false;  // ... and after the last Register to its shard, on the same link
    // Due H steps after this step of the learner's: the push a version merged
    // (its cadence, as if adopted at once), else the adoption.
    uint64_t due_from = 0;
    std::deque<InFlight> in_flight;  // oldest first, at most kMaxInFlight
    std::optional<uint64_t> stale_version;  // the version held at the last stale refusals
    int stale_refusals = 0;                 // how many came while it was held
  };

  // `speed`: the learner's (with outer.sync_by_speed it scales H).
  FragmentLedger(const Topology& topology, double speed, size_t fragments);

  size_t size() const { return tracks_.size(); }
  const Track& track(uint32_t p) const { return tracks_[p]; }
  bool welcomed() const { return welcomed_; }  // every fragment has a base
  uint64_t steps() const { return steps_; }
  uint64_t tokens() const { return tokens_; }
  double step_seconds_ema() const { return step_ema_; }
  uint64_t regressions_refused() const { return regressions_refused_; }

  // A step finished: its tokens and device seconds count for every fragment.
  void finish_step(int64_t tokens, double step_seconds);

  // ---- welcomes
  // What a welcome's version of fragment p is to the ledger.
  enum class Welcomed {
    kFirst,  // its first base: take the values
    kHeld,   // not newer than the version held: kept (a regression is counted and refused)
    kNewer,  // a newer version given whole (a resync): catch up, keeping what it did not merge
  };
  // Books fragment p's part of a welcome and says what the values must do. A
  // welcome at the version held lets a push go again when due, unless the
  // push went after this shard's last Register: the syncer that welcomes has it.
  Welcomed welcome(uint32_t p, uint64_t version);
  // A Register to syncer shard `shard` goes: pushes after it reach that shard after it.
  void registering(uint32_t shard);

  // ---- pushes
  // Fragment p's unasked push falls due at this boundary (at the next one: `ahead` = 1).
  bool due(uint32_t p, uint64_t ahead = 0) const;
  // Books a push of fragment p (round 0: unasked) and fills its counts;
  // decoupled with carry_progress, remembers it in flight with `values`.
  Push push(uint32_t p, uint64_t round, uint32_t learner, uint64_t incarnation, Payload payload,
            std::vector<float> values = {});
  // dp modes: the gradient of the last step went.
  void gradient_pushed() { tracks_[0].pushed = true; }
  // LearnerReplica::push_in_flight's rule.
  bool push_in_flight(const Pull& pull) const;

  // ---- adoption
  // Which of p's pushes a broadcast that names this learner merged (the step
  // it went through); nullopt: the broadcast merged none of this learner's.
  std::optional<uint64_t> credited_through(uint32_t p, const Broadcast& b, uint32_t learner) const;
  // What moving fragment p onto a new version does to its progress.
  struct Move {
    const InFlight* merged = nullptr;  // the push the version merged, if still remembered
    bool carry = false;                // the progress it did not merge stays on top of it
  };
  // `may_carry`: the version follows the one held (or is given whole);
  // `merged_through`: the push it merged (credited_through()).
  Move plan_move(uint32_t p, bool may_carry, std::optional<uint64_t> merged_through) const;
  // Moves fragment p onto `version` as planned; returns its pushes still in
  // flight (carried unmerged), for their values to move along.
  std::deque<InFlight>& move(uint32_t p, uint64_t version, const Move& plan);
  // `merged_through` of a version given whole (a welcome's, a repair's):
  // nullopt when it merged nothing since this fragment's base.
  std::optional<uint64_t> merged_of_whole(uint32_t p, uint64_t merged_through) const;

  // ---- refusals
  // The reject policy (LearnerReplica::RejectAction), for a replica whose
  // values are finite. `holds_newer`: a broadcast of the fragment is held
  // ahead (a reordered link: the newer versions are on their way).
  LearnerReplica::RejectAction on_reject(const Reject& reject, bool registered, bool holds_newer = false);

  Progress progress(uint32_t learner, uint64_t incarnation, float loss_ema) const;
  // Barrier option, dp modes: a pushed fragment's next version has not arrived.
  bool blocked() const;

 private:
  bool data_parallel() const { return topology_->mode != Mode::kDecoupled; }
  int interval(uint64_t version) const { return sync_interval(*topology_, speed_, version); }

  const Topology* topology_;  // the replica's, which outlives its ledger
  double speed_;
  std::vector<Track> tracks_;
  bool welcomed_ = false;
  uint64_t steps_ = 0, tokens_ = 0;
  double step_ema_ = 0.0;
  double credit_lag_ = 0.0;  // steps from a push to the broadcast that merged it, moving average
  uint64_t credits_ = 0;
  uint64_t regressions_refused_ = 0;
};

}  // namespace atl
