// LearnerSession: one learner incarnation's side of the protocol, without CAF
// (docs/design.md section 5). SyncerCore's counterpart: events go in with the
// time, and what to do comes out as values (LearnerEffects) for a driver to
// carry out. The learner actor (actors/learner_actor.cc), the cluster
// simulator (sim/) and the learner_session test drive the same session.
//
//   joining ──(every shard's Welcome)──> training ──(Done from every shard)──> over
//   (Register to each shard,             (steps; broadcasts adopted and pulls
//    again until welcomed)                answered at step boundaries)
//                                          │
//                                       leave() ──> leaving ──(Done, or the drain)──> over
//                                                   (no more steps; its last progress
//                                                    as unasked pushes, then Leave)
//
// A sharded syncer (syncer.shards = S) is S syncers to a learner: it registers
// with each, trains once every one has welcomed it, pushes each fragment to
// its owner (shard_of()), tells every shard its progress, and is over when
// every shard said Done (or, a shard being down, kOtherShardsDoneSeconds after
// the first). The first Done it gets it passes on to every other shard, and
// again before each Register to a shard that has not welcomed it (one that
// comes back later): the run ends once, at every shard, by the one shard that
// judges the budget. A shard lost pauses only its fragments:
// it registers again.
//
// A step boundary, in order: the messages that arrived during the step, in
// arrival order (a pull that a later broadcast of its fragment follows is
// dropped: its round has closed), then the pushes that fell due, then its
// Progress, then the next step (after a slow learner's extra time).
//
// A replica trained outside atoll (a Python loop, atoll/replica_exchange.h)
// takes its steps in the user's thread and hands them over
// (on_replica_steps()): what the syncer sends is adopted at once, and pulls
// and moment requests are answered at the first boundary that read what they need.
//
// Time: `now` is seconds on any monotonic clock, the same for every call.
// Not thread-safe: one driver calls it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "atoll/exchange_replica.h"
#include "atoll/learner_replica.h"
#include "atoll/messages.h"
#include "atoll/replica_exchange.h"
#include "atoll/step_pacer.h"

namespace atl {

enum class LearnerTimer : uint8_t {
  kLookup,           // register again with the shards that have not welcomed it
  kResync,           // blocked on a broadcast this long (tag: steps then): it was lost
  kOtherShardsDone,  // one shard said Done; the others did not in time
  kDrain,            // leaving, and the syncer did not confirm in time
  kFinalEvaluation,  // the user's evaluation of the final model did not come in time
  kNextStep,         // a slow learner's extra time, or an injected stall, is over
};

struct LearnerEffects {
  struct Send {
    uint32_t shard;
    Message message;
  };
  struct Timer {
    LearnerTimer kind;
    double seconds;    // from now
    uint64_t tag = 0;  // handed back to on_timer()
  };
  enum class Level : uint8_t { kInfo, kWarn, kError };
  struct Log {
    Level level;
    std::string text;  // "learner 3.2: ..."
  };
  // How this incarnation ends.
  enum class End : uint8_t {
    kNone,
    kStopped,  // in order (the run is over, it left): not restarted
    kRefused,  // refused for good (a bad token, another model): the run fails, saying `end_reason`
    kFailed,   // an error (a diverged replica, a failed step): its supervisor restarts it
  };

  std::vector<Send> sends;
  std::vector<Timer> timers;
  std::vector<Log> logs;
  bool start_step = false;          // run one inner step, then call on_step_done()
  std::vector<uint32_t> adopted;    // fragments whose version changed (replica().version())
  uint64_t regressions_refused = 0; // welcomes that offered an older version, ignored
  bool welcomed = false;            // every shard has welcomed it (again)
  std::optional<double> reintegrated;  // a restarted incarnation's first welcome: seconds since start
  bool run_over = false;            // the run is over for it (Done, not a departure)
  End end = End::kNone;
  std::string end_reason;
};

class LearnerSession {
 public:
  struct Options {
    int shards = 1;              // syncer.shards
    std::string cluster_token;   // proven in every Register (empty: none needed)
    bool restarted = false;      // its first welcome is a re-integration
    std::shared_ptr<StepPacer> pacer;  // dedicated hardware paces its steps (null: shared)
    double speed = 1.0;          // its spec's: a slower learner waits 1/speed - 1 of each step
    int batch_size = 1;          // for the pacer
  };
  static constexpr double kLookupRetrySeconds = 0.05;
  // A Register lost or refused is sent again after kRegisterRetrySeconds; a
  // large one (every base, 4 bytes a parameter) after the time it takes at
  // kRegisterRate, doubling while unanswered up to kRegisterRetryMaxSeconds,
  // so that a syncer still reading a large checkpoint is not flooded.
  static constexpr double kRegisterRetrySeconds = 0.5;
  static constexpr double kRegisterRate = 100e6;  // bytes per second
  static constexpr double kRegisterRetryMaxSeconds = 60.0;
  static constexpr double kResyncAfterSeconds = 2.0;      // blocked this long: register again
  static constexpr double kOtherShardsDoneSeconds = 30.0; // one shard said Done: the others' last rounds end within this
  static constexpr double kRepeatLogSeconds = 10.0;       // a refusal or malformed message is logged at most once this often

  // Over atoll's own replica or one without parameters: its steps are the driver's to run.
  LearnerSession(std::shared_ptr<LearnerReplica> replica, Options options, double now);
  // Over a replica trained in the user's loop: its mirror here, and the exchange with that loop.
  LearnerSession(std::shared_ptr<ExchangeReplica> mirror, std::shared_ptr<ReplicaExchange> exchange, Options options,
                 double now);

  // Registers with every shard `reachable` (by shard: the driver has a way
  // to it) that has not welcomed it; kLookup again until each has.
  void lookup(const std::vector<bool>& reachable, double now, LearnerEffects& fx);
  // A message from syncer shard `shard`. Shared, not copied: one broadcast
  // reaches many sessions, and it may wait in the inbox until a step ends.
  void on_message(uint32_t shard, std::shared_ptr<const Message> message, double now, LearnerEffects& fx);
  void on_message(uint32_t shard, Message message, double now, LearnerEffects& fx);
  // The step that start_step asked for is done. `booked_seconds`: the
  // device time to book (a simulated step's); unset: the wall time since
  // start_step, stretched for a slow learner.
  void on_step_done(const LearnerReplica::StepResult& result, double now, LearnerEffects& fx,
                    std::optional<double> booked_seconds = std::nullopt);
  // Its chips stop (an elastic learner's pause): a step under way is lost,
  // nothing of it booked; what arrived meanwhile is handled; no step until resume().
  void pause(double now, LearnerEffects& fx);
  void resume(double now, LearnerEffects& fx);
  void on_step_failed(const std::string& what, LearnerEffects& fx);
  void on_timer(LearnerTimer kind, uint64_t tag, double now, LearnerEffects& fx);
  // The steps the user's loop handed over since the last call (external replicas).
  void on_replica_steps(std::deque<ReplicaStep> steps, double now, LearnerEffects& fx);
  // A message from syncer shard `shard` that did not decode (`why`): dropped.
  void on_malformed(uint32_t shard, const Status& why, double now, LearnerEffects& fx);
  // Syncer shard `shard` went away: its fragments pause; it registers again.
  void on_shard_lost(uint32_t shard, const std::string& why, double now, LearnerEffects& fx);
  // Departs in order: no more steps, the last progress as unasked pushes,
  // then Leave; Done, or `drain_seconds` later, ends it.
  void leave(std::string reason, double drain_seconds, double now, LearnerEffects& fx);
  // Injected faults: no step for `seconds`; steps `factor` times slower for `seconds`.
  void stall(double seconds, double now, LearnerEffects& fx);
  void slow(double factor, double seconds, double now);

  const LearnerReplica& replica() const { return *replica_; }
  bool welcomed_by(uint32_t shard) const { return shards_[shard].welcomed; }
  bool all_welcomed() const;
  bool computing() const { return computing_; }
  // It began to leave (and may have left).
  bool leaving() const { return leave_reason_.has_value(); }
  bool over() const { return phase_ == Phase::kOver; }
  // Drops every pull in `queue` that a later broadcast of its fragment
  // follows (in the queue, or `next`, arriving after it): its round has
  // closed, and an answer would only count as late. Returns how many.
  // `tags`, if given, runs beside `queue` (one per message) and loses the same entries.
  // REQUIRES: no null message in `queue`.
  static size_t drop_closed_pulls(std::deque<std::shared_ptr<const Message>>& queue, const Message* next = nullptr,
                                  std::deque<uint32_t>* tags = nullptr);

 private:
  // Where this incarnation is; it only moves forward (advance()), and may skip phases:
  //   kJoining     registering: it trains nothing until every shard welcomed it
  //   kTraining    welcomed: steps; pushes when due; broadcasts adopted, pulls answered
  //   kLastRounds  pulled for the run's last rounds: answers, trains no more
  //   kLeaving     leave(): no more steps; its last progress goes, then Leave
  //   kStopping    Done (the run is over for it): no more steps; another shard's last pulls
  //                are still answered, an external replica's final evaluation awaited
  //   kOver        ended: LearnerEffects::end said how
  enum class Phase : uint8_t { kJoining, kTraining, kLastRounds, kLeaving, kStopping, kOver };
  void advance(Phase to) { phase_ = std::max(phase_, to); }

  struct Shard {
    bool welcomed = false;
    bool done = false;
  };
  std::string who() const;
  bool any_reachable() const;  // a way to some shard: what it sends can go
  void log(LearnerEffects& fx, LearnerEffects::Level level, std::string text) const;
  // A warning logged at most once per kRepeatLogSeconds for each `kind`, the
  // next line counting those left out: over a corrupting link the syncer may
  // refuse every Progress, and thousands of messages a second may not decode.
  void warn_repeated(LearnerEffects& fx, const std::string& kind, double now, std::string text);
  void send(LearnerEffects& fx, Message m, std::optional<uint32_t> shard = std::nullopt);
  void end(LearnerEffects& fx, LearnerEffects::End how, std::string reason);
  void handle(uint32_t shard, const Message& m, double now, LearnerEffects& fx);
  void handle_external(uint32_t shard, std::shared_ptr<const Message> m, double now, LearnerEffects& fx);
  void try_step(double now, LearnerEffects& fx);
  void handle_inbox(double now, LearnerEffects& fx);
  void resync(std::optional<uint32_t> shard, double now, LearnerEffects& fx);
  void send_last_progress(LearnerEffects& fx);
  void say_leave(LearnerEffects& fx);
  void tell_run_over(uint32_t shard, LearnerEffects& fx);
  void gone(LearnerEffects& fx);
  void run_over(const std::string& reason, LearnerEffects& fx);
  void final_evaluation_done(LearnerEffects& fx);
  void sync_exchange();
  void answer_deferred(LearnerEffects& fx);

  std::shared_ptr<LearnerReplica> replica_;
  std::shared_ptr<ExchangeReplica> mirror_;     // external replicas: the same object as replica_
  std::shared_ptr<ReplicaExchange> exchange_;   // external replicas
  Options options_;
  double started_;
  std::vector<Shard> shards_;
  std::vector<bool> reachable_;   // as of the last lookup
  int unanswered_registers_ = 0;  // sent since the last welcome: large Registers back off
  bool computing_ = false;        // a step runs
  bool delaying_ = false;         // a slow learner's extra time, or a stall
  bool paused_ = false;           // its chips stopped: no step until resume()
  double step_started_ = 0.0;
  double paced_until_ = -1.0;     // the end of the speed delay under way (< 0: none)
  double overslept_ = 0.0;        // seconds a late timer stretched a step, booked with the next
  std::deque<std::shared_ptr<const Message>> inbox_;  // arrived during a step
  std::deque<uint32_t> inbox_shards_;   // beside inbox_: the shard each came from
  // External: pulls and moment requests waiting for a boundary that reads them.
  std::deque<std::shared_ptr<const Message>> deferred_;
  uint32_t moments_shard_ = 0;          // the shard whose MomentsPull is answered next
  Phase phase_ = Phase::kJoining;
  bool reintegrated_ = false;
  bool resync_armed_ = false;
  struct Repeated {  // warn_repeated()'s, by kind
    double logged_at = -kRepeatLogSeconds;
    uint64_t unlogged = 0;
  };
  std::map<std::string, Repeated> repeated_;
  double stalled_until_ = 0.0, slow_until_ = 0.0;
  double slow_factor_ = 1.0;
  bool evaluated_ = false;        // external: the user's loop sent an evaluation this incarnation
  bool awaiting_final_evaluation_ = false;
  bool frozen_ = false;           // external: its replica changes no more; later steps are not booked
  bool leave_sent_ = false;
  std::optional<std::string> leave_reason_;  // set when it begins to leave
  std::string others_done_reason_;  // a shard said Done ("syncer shard N ended the run: ..."): told to the others
};

}  // namespace atl
