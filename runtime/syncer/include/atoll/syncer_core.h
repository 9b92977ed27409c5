// SyncerCore: the syncer's state and decisions, without CAF (docs/design.md sections 5-7).
//
// Holds the global parameters Theta, per-fragment versions and outer
// momentum, and one record per learner. A driver feeds it every event
// together with the current time and carries out the SyncerEffects it
// returns: messages to one learner, messages to all, timers. Because time is
// an argument, the same logic runs in the syncer actor (real time), in a
// test's virtual time and in the cluster simulator (atoll/simulator.h).
//
// The core decides what every mode shares: admission (atoll/admission.h),
// welcomes, recovery from learners' bases, peer moments, checkpoints, and the
// checks every push passes. When a new global version is made is the round
// protocol's decision, one per mode: decoupled rounds
// (runtime/decoupled_rounds.cc) or synchronous steps for dp and elastic_dp
// (runtime/synchronous_rounds.cc).
//
// Decoupled round of fragment p (docs/design.md section 5):
//   due     K learners did H steps since adopting p's current version
//           (their Progress says so, or they pushed p unasked)
//   pull    every connected learner that has not already pushed is asked
//   quorum  K answers with steps > 0 (K capped at the learners that have not
//           failed, or failed and are back)
//   grace   then wait until every pulled learner answered or
//           gamma * (tau * T_slowest - time_to_quorum) passed, capped at
//           grace_cap_steps * T_slowest (T_slowest: the slowest connected
//           learner's moving-average step time; the sync time in the formula of
//           docs/design.md section 5 is taken as 0 in one process)
//   merge   token-weighted AVG/RDA of base - theta_m, Nesterov, version + 1,
//           Broadcast to every connected learner
//   final   when the run ends (begin_flush): every fragment gets one last
//           round that pulls every connected learner with a last Pull and
//           waits for all answers (at most 3 slowest steps, 1 to 30 s); learners train no
//           more once pulled, so no counted token is missing from Theta. A
//           fragment holding progress then is merged and broadcast first;
//           its last round opens after that broadcast
//   Answers are folded into a running sum as they arrive (streaming merge,
//   runtime/decoupled_rounds.cc): memory does not grow with the learners.
// Broadcasts carry fp32 or bf16 values, or (int codecs) the quantized
// difference to the copy the learners hold, which the core tracks ("held"):
// what one broadcast rounds away goes with the next (error feedback).
// Answers after their round closed are counted late, never merged, and so is
// progress already merged once; pushes older than version - max_staleness are
// refused as stale. A round without quorum after quorum_deadline_seconds()
// is cancelled and opened again with fresh pulls (a pull or answer may have
// been lost). Nothing a learner sends can make Theta non-finite: bad pushes
// are refused with a Reject (which also takes the learner out of the round),
// and a merge whose result is not finite is rolled back.
//
// Membership (docs/design.md section 6): slots 0..M-1 are the topology's
// [[learners]], members from the start; slots M..max_learners-1 are open. A
// learner without an id claims the lowest free open slot (claim(): reserved
// for its process for kLeaseSeconds until it registers) and is a member from
// its welcome. A newcomer counts toward the quorum cap K only once it has
// trained H steps on a version it adopted, and a round under way keeps the
// quorum it opened with (it never waits for a newcomer, nor pulls one). A
// member that says Leave is a departure, not a failure: it is pulled no more,
// its last pushes make their fragments due, and once they are merged it gets
// Done. A member of an open slot that fails keeps its slot for kHoldSeconds,
// then is released. Goodput divides by the learner time allocated: each
// member's time as a member (allocated_seconds()).
//
// dp / elastic_dp: every step each learner in the group sends its gradient;
// when all did, their token-weighted mean drives AdamW on Theta. dp waits for
// every learner, also a dead one; elastic_dp drops a dead learner from the
// group after outer.reconfigure_seconds and takes it back when it registers.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "atoll/admission.h"
#include "atoll/checkpoint.h"
#include "atoll/fragments.h"
#include "atoll/messages.h"
#include "atoll/model.h"
#include "atoll/run_event.h"
#include "atoll/syncer_figures.h"
#include "atoll/syncer_stats.h"
#include "atoll/topology.h"

namespace atl {


// What the actor must do after an event, in this order: sends, then to_all.
struct SyncerEffects {
  struct Send {
    uint32_t learner;
    Message message;
  };
  enum class TimerKind {
    kGrace,        // the grace window of a round ends
    kQuorum,       // a round still without quorum gives up and pulls again
    kReconfigure,  // elastic_dp: a failed learner leaves the group
    kMoments,      // a restarted learner is welcomed without a peer's moments
    kFlush,        // the final rounds stop waiting for answers
    kRelease,      // a failed member's hold on its open slot ends
  };
  struct Timer {
    TimerKind kind;
    uint32_t id;     // fragment (grace, quorum) or learner (reconfigure, moments, release)
    uint64_t round;  // grace, quorum: the round; reconfigure, release: the learner's failure count;
                     // moments: the request
    double seconds;  // from now
  };
  std::vector<Send> sends;
  std::vector<Message> to_all;      // to every connected learner
  std::vector<Timer> timers;
  std::vector<std::string> notes;   // events worth a log line
  // Recoveries observed, for the run's event log: event::Registered (a
  // learner back after a failure, also one that happened while the syncer was
  // down) and event::FirstMerge (its first progress merged); for a learner in
  // another process (no supervisor here sees it) a new incarnation of a
  // known id is event::Restarted, and event::Reintegrated when it is
  // welcomed (seconds from its Register).
  std::vector<RunEvent> events;

  bool empty() const { return sends.empty() && to_all.empty() && timers.empty() && notes.empty() && events.empty(); }
};

struct SyncerState;    // what the core and its round protocol share (runtime/syncer/syncer_state.h)
class RoundProtocol;   // decoupled rounds, or dp's synchronous steps (runtime/syncer/round_protocol.h)

class SyncerCore {
 public:
  // Builds the model's layout, fragments and initial Theta from the topology.
  // `started`: when the run started (the time base of round_ends and goodput).
  // `shard`: which of the topology's syncer.shards this core is (see owns()).
  static Result<std::unique_ptr<SyncerCore>> create(const Topology& topology, SteadyTime now,
                                                    std::optional<SteadyTime> started = std::nullopt,
                                                    uint32_t shard = 0);
  ~SyncerCore();

  // Continues the statistics of the syncer this one replaces (in-process
  // restarts): counters, round history, learners' past tokens, and its clock
  // (`start`: its run_start(), which a predecessor that continued one of
  // another process moved back). Connections are not inherited: learners
  // register again.
  void continue_from(const SyncerStats& stats, const std::vector<LearnerRecord>& learners,
                     std::optional<SteadyTime> start = std::nullopt);
  // The same for a syncer restarted in a new process, from the figures of
  // the checkpoint it restored: its clock counts from the run's start too.
  // Call after restore(), whose decisions (rounds, open slots held for their
  // members) it keeps. `unix_ms`: the wall clock at `now`.
  void continue_from(SyncerFigures figures, SteadyTime now, int64_t unix_ms);
  // What it has counted so far, for a checkpoint (`cpu_seconds`: its thread's,
  // which the transport measures).
  SyncerFigures figures(SteadyTime now, int64_t unix_ms, double cpu_seconds) const;

  // A restarted syncer accepts learners' base copies newer than its own
  // versions for this long after it starts (docs/design.md section 6); afterwards a
  // base ahead of the syncer is refused.
  static constexpr double kRecoverySeconds = 10.0;
  // How long a welcome waits for a peer's moments: the peer answers at its
  // next step boundary (a step, and one more queued on a GPU), then reads and
  // sends its moments (m and v, 8 bytes a parameter) at 100 MB/s or better.
  // A fixed 2 s let an 86M-parameter GPU learner restart without them.
  static double moments_wait_seconds(double peer_step_seconds, size_t parameters) {
    return std::clamp(2.0 + 2.0 * peer_step_seconds + 8.0 * static_cast<double>(parameters) / 1e8, 2.0, 60.0);
  }

  // The final evaluations (docs/design.md section 6): once the last rounds
  // closed (flushed()), a learner that evaluated during the run (an
  // atoll.Evaluator) is told Done and evaluates the final model; the syncer
  // seals the run only when each such learner still connected has reported
  // that evaluation, or kFinalEvaluationSeconds passed. A learner that goes
  // is not waited for (kFinalEvaluationSeconds: atoll/messages.h). Empty
  // before the end, and when no learner evaluates.
  std::vector<uint32_t> final_evaluations_awaited() const;

  // Takes Theta, momentum and versions from a checkpoint, and its AdamW
  // state: dp's optimizer, or the moments a learner that registers without
  // bases is welcomed with while no peer can give fresher ones. Fails,
  // changing nothing, if it belongs to another model or fragment plan.
  // `now`: when the checkpoint was read; the recovery window (learners'
  // newer bases, kRecoverySeconds) runs from then, since reading a large
  // model's checkpoint takes longer than the window (24 s at 100M).
  Status restore(const CheckpointState& state, std::optional<SteadyTime> now = std::nullopt);
  // Borrows this core's vectors: encode it before the core changes (copy_of() keeps one).
  CheckpointView checkpoint(int64_t unix_ms) const;
  // Decoupled, checkpoint.moments: asks the learner that trained the most
  // for its AdamW moments, which the next checkpoint() carries. A shard of a
  // syncer in shards asks for, keeps and hands the moments of its own
  // fragments (owned_parameters() values each).
  void request_checkpoint_moments(SyncerEffects& fx);

  // From now on a Register must carry join_proof() of this token
  // (atoll/cluster_token.h), else it is refused as bad_token before anything
  // else is looked at. Empty (the default, one process): no proof needed.
  void require_token(std::string token) { token_ = std::move(token); }

  // The admission decision for a Register from `from` (atoll/admission.h),
  // without acting on it.
  Admission admit(const Register& reg, const Sender& from) const;
  // Admits (or refuses, with a Reject) and welcomes, or asks a peer for the
  // moments to welcome with. The verdict says whether `from` is now bound to
  // the learner id: the transport then routes that id's messages to it.
  Admission on_register(const Register& reg, const Sender& from, SteadyTime now, SyncerEffects& fx);

  // ---- membership (docs/design.md section 6)
  static constexpr double kLeaseSeconds = 30.0;  // a claimed slot waits this long for its learner's Register
  static constexpr double kHoldSeconds = 60.0;   // a failed member's open slot waits this long for it
  // Gives the lowest free open slot to a learner of `process` that has no
  // id, reserved for that process for kLeaseSeconds: its Register takes it.
  // kAccept with `learner` set, or kRefuse with kFull (none free, no open
  // slots, or the run is ending).
  Admission claim(uint64_t process, SteadyTime now, SyncerEffects& fx);
  // The learner departs in order (see above). An unknown or old incarnation is ignored.
  void on_leave(const Leave& leave, SteadyTime now, SyncerEffects& fx);
  // Learner time allocated to the run so far: each member's seconds as a member.
  double allocated_seconds(SteadyTime now) const;

  void on_moments(uint32_t learner, const Moments& moments, SteadyTime now, SyncerEffects& fx);
  void on_progress(const Progress& progress, SteadyTime now, SyncerEffects& fx);
  // A learner's evaluation of the versions it holds: kept in stats() when it
  // is finite and names versions the syncer has made; refused otherwise.
  void on_evaluation(const Evaluation& evaluation, SteadyTime now, SyncerEffects& fx);
  void on_push(const Push& push, SteadyTime now, SyncerEffects& fx);
  void on_timer(const SyncerEffects::Timer& timer, SteadyTime now, SyncerEffects& fx);
  // The sender bound to `learner` went down (its actor, process or connection).
  void on_learner_down(uint32_t learner, SteadyTime now, SyncerEffects& fx);

  // The run is ending: one last round per fragment (see above); in dp modes,
  // or without outer.final_flush, the model is final at once. No round opens
  // after this. Calling it again does nothing.
  void begin_flush(SteadyTime now, SyncerEffects& fx);
  bool flushing() const;
  // True once every final round has closed: Theta is the run's final model.
  bool flushed() const;
  // The transport saw flushed() and told the learners Done: the end of the
  // run's training, for stats().final_seconds.
  void on_finished(SteadyTime now);
  // A message from `learner` (if known) that did not decode; answers with a Reject.
  void on_malformed(std::optional<uint32_t> learner, const Status& why, SyncerEffects& fx);
  // Refuses something the transport found wrong: a Reject to `learner`,
  // counted like every other refusal.
  void refuse(uint32_t learner, RejectReason reason, uint32_t fragment, std::string detail, SyncerEffects& fx);

  // The largest packet a learner may send: a register with every base plus
  // moments in fp32, with room to spare. Anything larger is refused unread.
  size_t max_message_bytes() const { return max_message_bytes(layout().size()); }
  static size_t max_message_bytes(size_t parameters) { return 4 * parameters * sizeof(float) * 3 + (size_t{1} << 20); }

  const Topology& topology() const;
  const ParamLayout& layout() const;
  const std::vector<Fragment>& fragments() const;
  // Sharded syncer (syncer.shards = S > 1): shard i owns the fragments p with
  // shard_of(p, S) == i. It holds, merges, checkpoints, welcomes with and broadcasts
  // only those; a push of another shard's fragment is refused, and Progress
  // and Register are read for its own fragments only. Every learner talks to
  // every shard (docs/design.md section 10).
  uint32_t shard() const;
  bool owns(uint32_t fragment) const;
  size_t owned_parameters() const;  // in the fragments it owns (all of them: the model's)
  uint64_t version(uint32_t fragment) const;
  const SyncerStats& stats() const;
  // The transport's count of message bytes, into stats(): from and to learners.
  void count_bytes(uint64_t received, uint64_t sent);
  // True while a syncer that replaced another waits for the learners that
  // were connected to register again (bounded by kRecoverySeconds): until
  // then its versions may still be behind what they adopted.
  bool recovering(SteadyTime now) const;
  const std::vector<LearnerRecord>& learners() const;
  // Tokens trained by every incarnation of every learner, as reported.
  uint64_t total_tokens() const;
  // Theta as one buffer in layout order (a shard: its own fragments, zeros elsewhere).
  std::vector<float> parameters() const;
  // Seconds since the run started.
  double elapsed(SteadyTime now) const;
  SteadyTime run_start() const;  // what elapsed() counts from

 private:
  explicit SyncerCore(std::unique_ptr<SyncerState> state);

  // Registration, split: adopt newer bases (recovery), then welcome now or
  // after a peer's moments arrive.
  void adopt_bases(const Register& r, SteadyTime now, SyncerEffects& fx);
  void welcome(uint32_t learner, uint64_t incarnation, std::optional<OptimizerState> moments, SteadyTime now,
               SyncerEffects& fx);
  bool current(uint32_t learner, uint64_t incarnation) const;
  void check_push(const Push& push, SteadyTime now, SyncerEffects& fx);
  // Membership (runtime/membership.cc).
  void depart(uint32_t learner, SteadyTime now, bool orderly, std::string reason, SyncerEffects& fx);
  void expire_reservations(SteadyTime now, SyncerEffects& fx);
  // Leavers whose last answers are settled get Done.
  void settle_departures(SyncerEffects& fx);
  // An open slot's member that trained H steps on an adopted version counts toward K.
  void qualify(uint32_t learner);

  std::unique_ptr<SyncerState> s_;
  std::unique_ptr<RoundProtocol> rounds_;
  uint64_t next_request_ = 1;                          // of MomentsPulls
  uint64_t checkpoint_request_ = 0;                   // the moments asked for the next checkpoint
  std::optional<CheckpointState::OptimizerRecord> checkpoint_moments_;  // decoupled: newest answer, or restored
  bool restored_ = false;                             // from a checkpoint: learners without bases are not fresh
  std::set<uint32_t> evaluators_;                     // learners whose evaluations were taken
  std::set<uint32_t> evaluated_final_;                // of them, those that evaluated the final model
  std::string token_;  // the cluster token; empty: joins need no proof
  uint32_t initial_crc_ = 0;  // of the seed's initialization
};

}  // namespace atl
