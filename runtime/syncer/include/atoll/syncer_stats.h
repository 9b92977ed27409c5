// What the syncer knows and has counted: one record per learner, its
// statistics, the learners' evaluations. Plain values, copied into the run
// records (atoll/run_records.h) for the report, the run view and the chaos
// verdict, which need these and not the SyncerCore (atoll/syncer_core.h) that keeps them.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>
#include <vector>

#include "atoll/admission.h"
#include "atoll/messages.h"

namespace atl {

// The syncer's clock: the core takes the time as an argument, so tests and
// the simulator run it in virtual time.
using SteadyTime = std::chrono::steady_clock::time_point;

// Everything the syncer knows of one learner, across its incarnations.
struct LearnerRecord {
  bool connected = false;           // welcomed and not known to be down
  uint64_t incarnation = 0;
  uint64_t registrations = 0;
  uint64_t steps = 0, tokens = 0;   // reported by the current incarnation
  uint64_t past_steps = 0, past_tokens = 0;  // earlier incarnations
  double step_seconds = 0.0;        // moving average, as reported
  double loss = 0.0;                // moving average of the training loss, as reported
  std::optional<SteadyTime> down_at;  // when it was last seen failing
  uint64_t failures = 0;
  std::optional<SteadyTime> awaiting_first_merge;  // welcomed after a failure, at this time
  SteadyTime registered_at{};       // its last Register that was admitted
  // Per fragment: the current incarnation's progress merged goes up to this
  // inner step (Push::through); a push with an older `since` would merge some twice.
  std::vector<uint64_t> merged_through;
  bool merges_known = false;  // merged_through covers the whole incarnation: this syncer welcomed it first
  uint64_t merged = 0;              // pushes merged
  uint32_t initial_crc = 0;         // of its initialization, from its last Register
  std::vector<FragmentProgress> progress;  // per fragment, as reported
  // Admission (atoll/admission.h): the sender the id is bound to (actor 0:
  // none, or it went down) and the process its last incarnation came from.
  Sender sender;
  // A welcome waiting for a peer's AdamW moments: the request and the
  // incarnation it welcomes (0: none).
  uint64_t moments_request = 0;
  uint64_t moments_incarnation = 0;
  uint32_t moments_from = 0;  // the peer asked
  // Its own labels for the report, from its last Register (0: the topology's).
  double speed = 0.0;
  uint32_t batch_size = 0;
  bool dropped = false;             // elastic_dp: left the group after a failure
  bool expected_back = false;       // connected under the syncer this one replaced

  // Membership (see SyncerCore). A slot's member is allocated to the run:
  // a fixed slot from the start until it departs, an open slot from its
  // welcome until it departs or is released.
  bool member = false;
  enum class Leaving : uint8_t {
    kNo,
    kMerging,  // it said Leave: its last answers are being merged
    kDone,     // they are; it was told Done and is about to go
  };
  Leaving leaving = Leaving::kNo;
  bool qualified = false;           // trained H steps on a version it adopted (open slots: counts toward K)
  // An open slot claimed by, or held for (a member that failed), this
  // process until then (0: not reserved).
  uint64_t reserved_for = 0;
  std::optional<SteadyTime> reserved_until;
  double member_seconds = 0.0;      // learner time allocated before the current membership
  double member_since = 0.0;        // seconds since the run started, when the current membership began
  uint64_t departures = 0;          // orderly ones
};

// The held-out quality of the global model as a learner measured it with
// the user's own function (atoll.Evaluator): for models atoll does not run.
struct EvaluationPoint {
  double seconds = 0.0;       // since the run started, when it arrived
  uint64_t tokens = 0;        // trained by every learner by then
  uint32_t learner = 0;
  uint64_t versions_min = 0;  // the oldest fragment version it evaluated
  uint64_t versions_sum = 0;  // over fragments: orders evaluations of one run
  double loss = 0.0, bits_per_byte = 0.0, accuracy = 0.0;  // NaN: not measured
  uint64_t count = 0;
  bool final = false;         // of the final model: after the last rounds, at every final version
};

// A round's close: when (seconds since the core started) and of which fragment
// (0 in the dp modes, whose rounds take the whole model).
struct RoundEnd {
  double seconds = 0.0;
  uint32_t fragment = 0;
  friend bool operator<(const RoundEnd& a, const RoundEnd& b) { return a.seconds < b.seconds; }
  friend bool operator==(const RoundEnd&, const RoundEnd&) = default;
};

struct SyncerStats {
  uint64_t rounds = 0;             // merges over all fragments (dp: steps applied)
  uint64_t merged_pushes = 0;
  uint64_t late = 0;               // answers that arrived after their round closed
  uint64_t stale_refused = 0;
  uint64_t repairs = 0;             // versions sent again, whole, to a learner that stayed behind
  uint64_t rejected = 0;           // every Reject sent, stale included
  uint64_t cancelled_rounds = 0;   // rounds closed without a merge (no quorum in time, or none possible)
  uint64_t discarded_rounds = 0;   // merges whose result was not finite, rolled back
  double quorum_sum = 0.0;         // pushes merged, summed over rounds
  double grace_wait_sum = 0.0;     // seconds from quorum to close, summed over rounds
  double round_seconds_sum = 0.0;  // decoupled: seconds from a round's pulls to its broadcast, summed
  // Broadcasts that every learner connected when it went out reported
  // adopted (in a Progress) before the next one of its fragment: how many,
  // and the seconds that took, summed and at most. Transfer, the wait for a
  // step boundary and the Progress back are all in it.
  uint64_t adopted_broadcasts = 0;
  double adopted_seconds_sum = 0.0, adopted_seconds_max = 0.0;
  double good_seconds = 0.0;       // learner step time whose progress was merged
  // Message bytes, as the transport counted them (SyncerCore::count_bytes):
  // from learners, and to learners.
  uint64_t bytes_received = 0, bytes_sent = 0;
  std::vector<RoundEnd> round_ends;  // one per round, in the order they closed
  double first_welcome = -1.0;     // seconds since the core started: training began (-1: not yet)
  double final_seconds = -1.0;     // when the model became final, its last rounds closed (-1: not yet)
  std::vector<double> recovery_seconds;  // from a learner's failure (seen) to its next welcome
  uint64_t recovered_fragments = 0;     // fragments a restarted syncer took from a learner's base
  uint64_t moments_handed = 0;          // restarted learners welcomed with a peer's AdamW moments
  std::vector<EvaluationPoint> evaluations;  // as they arrived (at most kMaxEvaluations, the newest)
  static constexpr size_t kMaxEvaluations = 10000;

  double quorum_mean() const { return rounds ? quorum_sum / double(rounds) : 0.0; }
  double grace_wait_mean() const { return rounds ? grace_wait_sum / double(rounds) : 0.0; }
  double round_seconds_mean() const { return rounds ? round_seconds_sum / double(rounds) : 0.0; }
  double adopted_seconds_mean() const {
    return adopted_broadcasts ? adopted_seconds_sum / double(adopted_broadcasts) : 0.0;
  }
};

// The syncer's plain counts, each declared once: its name (its key in the
// run report's JSON, for the run and for each shard), the field, and what it
// counts. A syncer in shards counts per shard; the run's count is the sum
// (merge_shard_stats). A new count is a field above, a line here, and the
// code that counts it: the merge and the report's writers read this list.
struct SyncerCount {
  const char* name;
  uint64_t SyncerStats::*field;
  const char* meaning;
};
inline constexpr SyncerCount kSyncerCounts[] = {
    {"merged_pushes", &SyncerStats::merged_pushes, "pushes merged"},
    {"late", &SyncerStats::late, "answers that arrived after their round closed"},
    {"stale_refused", &SyncerStats::stale_refused, "pushes refused as stale"},
    {"repairs", &SyncerStats::repairs, "versions sent again, whole, to a learner that stayed behind"},
    {"cancelled_rounds", &SyncerStats::cancelled_rounds, "rounds closed without a merge"},
    {"discarded_rounds", &SyncerStats::discarded_rounds, "merges whose result was not finite, rolled back"},
    {"recovered_fragments", &SyncerStats::recovered_fragments, "fragments a restarted syncer took from a learner's base"},
    {"moments_handed", &SyncerStats::moments_handed, "restarted learners welcomed with a peer's AdamW moments"},
};
inline constexpr size_t kSyncerCountNumber = std::size(kSyncerCounts);

// A copy of the counts alone, in kSyncerCounts' order.
struct SyncerCountValues {
  std::array<uint64_t, kSyncerCountNumber> values{};
  static SyncerCountValues of(const SyncerStats& stats) {
    SyncerCountValues v;
    for (size_t i = 0; i < kSyncerCountNumber; ++i) v.values[i] = stats.*kSyncerCounts[i].field;
    return v;
  }
  // By name. REQUIRES: a name in kSyncerCounts (else std::out_of_range).
  uint64_t operator[](std::string_view name) const { return values.at(index(name)); }
  uint64_t& operator[](std::string_view name) { return values.at(index(name)); }
  static size_t index(std::string_view name) {
    size_t i = 0;
    while (i < kSyncerCountNumber && name != kSyncerCounts[i].name) ++i;
    return i;
  }
};

}  // namespace atl
