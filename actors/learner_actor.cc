// The learner actor: drives a LearnerCore, never waits for the syncer.
//
//   joining ──(Welcome)──> training ──(Done, or refused for good)──> stopped
//   (looks up the syncer,   (steps; syncer down: trains on and
//    sends Register)          looks it up again)
//                              │
//                           (leave) ──> leaving ──(Done, or the drain timeout)──> stopped
//                                       (no more steps; its last progress as
//                                        unasked pushes, then Leave)
//
// A sharded syncer (syncer.shards = S) is S syncers to a learner: it
// registers with each, trains once every one has welcomed it, pushes each
// fragment to its owner (shard_of()), tells every shard its progress, and
// is done when every shard said so (or, a shard being down, 30 s after the
// first). A shard that goes away pauses only its fragments; the learner
// looks it up and registers with it again.
//
// One behaviour per phase: joining() knows only the welcome, a refusal and
// the end; training() everything else. What to do about a refusal and which
// queued pulls are stale are LearnerCore's (on_reject, drop_closed_pulls).
// While training, each inner step runs on the learner's TBB arena; the actor
// stays responsive and queues what the syncer sends until the step is done.
// At each step boundary it applies the queue in arrival order (answering
// pulls, adopting broadcasts), pushes what fell due, reports progress, and
// starts the next step (after a slow learner's extra device time).
//
// A learner trained outside atoll (a Python loop: atoll/replica_exchange.h)
// takes its steps in the user's thread, which hands each one over through
// the exchange. The actor adopts what the syncer sends at once (the updates
// reach the user's tensors at the next boundary), and answers pulls and
// moment requests at the first boundary that read what they need.
#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <optional>
#include <utility>

#include "actors.h"
#include "atoll/atoms.h"
#include "atoll/learner_core.h"
#include "atoll/log.h"
#include "atoll/syncer_core.h"

namespace atl {
namespace {

using namespace std::chrono_literals;
constexpr auto kLookupRetry = 50ms;
// A Register lost or refused (an old incarnation still known) is sent again
// after 500 ms. A large one (it carries every base, 4 bytes a parameter)
// waits the time it takes at kRegisterRate, doubling while unanswered up to
// kRegisterRetryMax: a syncer still reading a large model's checkpoint must
// not find a flood of them (100M parameters: 4, 8, 16, 32, 60 s; the 100M
// run queued 7 GB of Registers at a restarted shard before this).
constexpr auto kRegisterRetry = 500ms;
constexpr double kRegisterRate = 100e6;  // bytes per second
constexpr double kRegisterRetryMax = 60.0;  // seconds
constexpr auto kResyncAfter = 2s;       // blocked this long on a broadcast: it was lost, register again
constexpr auto kOtherShardsDone = 30s;  // one shard said Done: the others' last rounds end within this

struct LearnerState {
  static inline const char* name = "learner";
  LearnerArgs args;
  std::shared_ptr<LearnerCore> core;  // shared with the running step
  // The largest message the syncer may send: a welcome carries the whole
  // global model and a peer's moments, so the limit grows with the model.
  size_t max_message_bytes = 0;
  // By syncer shard (one: the syncer): its current handle (null: not found
  // or down), whether it welcomed us, whether it said Done.
  std::vector<caf::actor> syncers;
  std::vector<bool> welcomed_by, done_by;
  uint32_t from_shard = 0;     // the shard the message being handled came from
  uint32_t moments_shard = 0;  // the shard whose MomentsPull is answered next
  int unanswered_registers = 0;  // sent since the last welcome: large Registers back off
  bool computing = false;   // a step runs on the arena
  bool delaying = false;    // a slow learner's extra time after a step
  // The end of the speed delay under way (none: epoch). A timer that fires
  // late stretches the step; the next step books the overshoot, so that a
  // loaded machine's timers do not show up as lost goodput.
  caf::actor_clock::time_point paced_until{};
  double overslept = 0.0;  // seconds, not yet booked
  caf::actor_clock::time_point step_started;
  std::deque<Message> inbox;  // from the syncer, held while a step runs
  std::deque<uint32_t> inbox_shards;  // beside inbox: the shard each came from
  caf::actor_clock::time_point started;  // of this incarnation (re-integration time)
  bool reintegrated = false;             // welcomed once
  bool resync_armed = false;
  RejectReason last_refusal = RejectReason::kMalformed;  // logged once per streak
  bool stopping = false;  // the run is over for us: no more steps
  bool evaluated = false;          // a learner trained outside atoll sent an evaluation this incarnation
  bool awaiting_final_evaluation = false;  // the run is over; its evaluation of the final model goes next
  bool last_pulled = false;  // pulled for the run's last rounds: answer, but train no more
  caf::actor_clock::time_point stalled_until, slow_until;  // injected faults
  double slow_factor = 1.0;
  // Trained outside atoll (null: atoll's own replica).
  std::shared_ptr<ReplicaExchange> external;
  std::deque<Message> deferred;  // pulls and moment requests waiting for a boundary that reads them
  bool frozen = false;           // its replica changes no more: later steps are not booked
  // Departing in order (docs/design.md section 6): no more steps; its last
  // progress goes to the syncer as unasked pushes, then Leave; Done, or the
  // drain timeout, ends it. It is not restarted.
  bool leaving = false;
  bool leave_sent = false;
  std::string leave_reason;
};
using LearnerActor = caf::stateful_actor<LearnerState>;

std::string who(const LearnerActor* self) {
  return "learner " + std::to_string(self->state.args.id) + "." + std::to_string(self->state.args.incarnation);
}

caf::timespan span(double seconds) {
  return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(seconds));
}

bool any_syncer(const LearnerState& st) {
  return std::any_of(st.syncers.begin(), st.syncers.end(), [](const caf::actor& s) { return static_cast<bool>(s); });
}
bool all_of(const std::vector<bool>& v) { return std::all_of(v.begin(), v.end(), [](bool b) { return b; }); }

void send_to_shard(LearnerActor* self, uint32_t shard, const Message& m) {
  auto& st = self->state;
  const caf::actor& to = st.syncers[shard];
  if (!to) return;
  if (!st.args.faults || !st.args.faults->active()) {
    self->send(to, Packet{encode_message(m)});
    return;
  }
  for (auto& d : st.args.faults->route(st.args.id, encode_message(m), self->clock().now())) {
    if (d.delay_seconds <= 0) self->send(to, Packet{std::move(d.bytes)});
    else self->delayed_send(to, span(d.delay_seconds), Packet{std::move(d.bytes)});
  }
}

// A push goes to its fragment's shard, moments to the shard that asked, an
// evaluation to the first; progress, registrations and Leave to every shard.
void send_to_syncer(LearnerActor* self, const Message& m) {
  auto& st = self->state;
  const auto shards = static_cast<uint32_t>(st.syncers.size());
  if (const auto* push = std::get_if<Push>(&m)) return send_to_shard(self, shard_of(push->fragment, static_cast<int>(shards)), m);
  if (std::holds_alternative<Moments>(m)) return send_to_shard(self, st.moments_shard, m);
  if (std::holds_alternative<Evaluation>(m)) return send_to_shard(self, 0, m);
  for (uint32_t s = 0; s < shards; ++s) send_to_shard(self, s, m);
}

void resync(LearnerActor* self, std::optional<uint32_t> shard = std::nullopt);

// Only the syncer talks to learners: the syncer (a shard) itself, or in a
// learner process the stand-in of this learner's connection to it
// (atoll/cluster.h). Which shard, or nullopt.
std::optional<uint32_t> from_syncer(LearnerActor* self) {
  const auto& sender = self->current_sender();
  if (!sender) return std::nullopt;
  const auto& syncers = self->state.syncers;
  for (uint32_t s = 0; s < syncers.size(); ++s)
    if (syncers[s] && sender->address() == syncers[s].address()) return s;
  return std::nullopt;
}

void try_step(LearnerActor* self) {
  auto& st = self->state;
  if (st.external) return;  // the user's loop takes the steps
  if (st.core->welcomed() && st.core->blocked() && !st.resync_armed) {
    st.resync_armed = true;  // a broadcast that never comes must not block us forever
    self->delayed_send(self, kResyncAfter, resync_atom_v, st.core->steps());
  }
  if (st.stopping || st.last_pulled || st.leaving || st.computing || st.delaying || !st.core->welcomed() ||
      st.core->blocked())
    return;
  if (const auto now = self->clock().now(); now < st.stalled_until) {  // an injected stall
    st.delaying = true;
    self->delayed_send(self, st.stalled_until - now, next_step_atom_v);
    return;
  }
  st.computing = true;
  st.step_started = self->clock().now();
  st.args.pool->submit([core = st.core, me = caf::actor_cast<caf::actor>(self)] {
    try {
      const auto r = core->step();
      caf::anon_send(me, step_done_atom_v, static_cast<double>(r.loss), r.tokens, r.compute_seconds);
    } catch (const std::exception& e) {  // an exception must end this learner, not the process
      caf::anon_send(me, step_failed_atom_v, std::string(e.what()));
    }
  });
}

void say_leave(LearnerActor* self) {
  auto& st = self->state;
  send_to_syncer(self, Leave{st.args.id, st.args.incarnation, st.leave_reason});
  st.leave_sent = true;
}

// Leaving: every fragment's progress since its base goes as an unasked push,
// then Leave. Again after a welcome (a restarted syncer lost them).
void send_last_progress(LearnerActor* self) {
  auto& st = self->state;
  if (!any_syncer(st) || !st.core->welcomed()) return;
  const Progress now = st.core->progress();
  for (uint32_t p = 0; p < now.fragments.size(); ++p) {
    if (now.fragments[p].steps == 0 || !st.core->readable(p)) continue;
    if (auto push = st.core->answer(Pull{p, 0, true}); push.ok()) send_to_syncer(self, *push);
  }
  say_leave(self);
}

// The departure is over (merged, or given up on): a normal stop, so the
// supervisor does not restart it, and the run goes on without it.
void gone(LearnerActor* self) {
  auto& st = self->state;
  if (st.external) st.external->set_over("this learner left the run (" + st.leave_reason + ")", false);
  st.stopping = true;
  self->quit(caf::exit_reason::normal);
}

// Done from every shard (or the wait for the others is over): a normal stop, not restarted.
// A learner whose user's loop evaluated during the run first hands the
// syncer its evaluation of the final model (SyncerCore::final_evaluations_awaited).
void run_over(LearnerActor* self, const std::string& reason) {
  auto& st = self->state;
  log_info(who(self) + ": the run is over (" + reason + ")");
  if (st.external) st.external->set_over("the run is over (" + reason + ")", false);
  st.args.records->latch.finish();
  st.stopping = true;
  if (st.external && st.evaluated && any_syncer(st)) {
    st.awaiting_final_evaluation = true;
    st.external->set_final_evaluation_wanted(true);
    self->delayed_send(self, span(kFinalEvaluationSeconds), final_evaluation_atom_v);
    return;
  }
  self->quit(caf::exit_reason::normal);
}

// The evaluation of the final model went to the syncer, or its time is up.
void final_evaluation_done(LearnerActor* self) {
  auto& st = self->state;
  st.awaiting_final_evaluation = false;
  st.external->set_final_evaluation_wanted(false);
  self->quit(caf::exit_reason::normal);
}

void handle(LearnerActor* self, Message m) {
  auto& st = self->state;
  if (auto* w = std::get_if<Welcome>(&m)) {
    const uint64_t refused_before = st.core->regressions_refused();
    if (Status s = st.core->welcome(*w); !s.ok()) {
      log_error(who(self) + ": cannot adopt the global model: " + s.to_string());
      self->quit(caf::make_error(caf::sec::invalid_argument, s.to_string()));
      return;
    }
    st.welcomed_by[st.from_shard] = true;
    st.unanswered_registers = 0;
    st.last_refusal = RejectReason::kMalformed;
    for (uint32_t f = 0; f < st.core->fragments().size(); ++f) st.args.records->adopted.note(f, st.core->version(f));
    st.args.records->counters.regressions_refused += st.core->regressions_refused() - refused_before;
    if (st.core->welcomed()) st.args.records->readiness.welcomed(st.args.id);
    if (!st.reintegrated) {
      st.reintegrated = true;
      if (st.args.restarted)
        st.args.records->log->append(event::Reintegrated{
            st.args.id, st.args.incarnation, std::chrono::duration<double>(self->clock().now() - st.started).count()});
    }
    // Leaving: what went before this welcome (a syncer that restarted lost it), or what waited for one.
    if (st.leaving && !st.external && !st.computing) send_last_progress(self);
  } else if (auto* mp = std::get_if<MomentsPull>(&m)) {
    st.moments_shard = st.from_shard;
    if (auto moments = st.core->moments_for(*mp); moments.ok()) send_to_syncer(self, *moments);
  } else if (auto* p = std::get_if<Pull>(&m)) {
    if (auto push = st.core->answer(*p); push.ok()) send_to_syncer(self, *push);
    else log_warn(who(self) + ": " + push.status().to_string());
    st.last_pulled |= p->last;
  } else if (auto* b = std::get_if<Broadcast>(&m)) {
    if (Status s = st.core->apply(*b); s.code() == Status::Code::kUnavailable) {
      log_info(who(self) + ": " + s.to_string() + "; resynchronizing");
      resync(self, st.from_shard);  // the welcome brings the version we missed
    } else if (!s.ok()) {
      log_warn(who(self) + ": broadcast dropped: " + s.to_string());
    } else if (b->fragment < st.core->fragments().size()) {
      st.args.records->adopted.note(b->fragment, st.core->version(b->fragment));
    }
  } else if (auto* farewell = std::get_if<Done>(&m); farewell && st.leaving) {
    st.done_by[st.from_shard] = true;
    if (!all_of(st.done_by)) return;  // other shards still merge our last progress
    log_info(who(self) + ": " + farewell->reason + "; it leaves the run");
    gone(self);
  } else if (auto* d = std::get_if<Done>(&m)) {
    const bool first = std::none_of(st.done_by.begin(), st.done_by.end(), [](bool said) { return said; });
    st.done_by[st.from_shard] = true;
    st.stopping = true;  // no more steps; the other shards' last pulls are still answered
    if (!all_of(st.done_by)) {
      if (first) self->delayed_send(self, kOtherShardsDone, end_atom_v, d->reason);
      return;
    }
    run_over(self, d->reason);
  } else if (auto* r = std::get_if<Reject>(&m)) {
    const auto action = st.core->on_reject(*r, st.welcomed_by[st.from_shard]);
    if (action == LearnerCore::RejectAction::kStop) {
      // Joining again cannot help: end this side of the run, saying why.
      const std::string why = who(self) + " refused by the syncer (" + reject_reason_name(r->reason) + "): " + r->detail;
      log_error(why);
      if (st.external) st.external->set_over(why, true, true);
      st.args.records->fail(Status::refused(why));
      st.stopping = true;
      self->quit(caf::exit_reason::normal);
      return;
    }
    if (r->reason != st.last_refusal || r->reason != RejectReason::kDuplicateLearner)
      log_warn(who(self) + ": the syncer refused (" + reject_reason_name(r->reason) + "): " + r->detail);
    st.last_refusal = r->reason;
    if (action == LearnerCore::RejectAction::kRestart) {
      log_error(who(self) + ": its replica is not finite; restarting");
      self->quit(caf::make_error(caf::sec::runtime_error, "replica diverged"));
    } else if (action == LearnerCore::RejectAction::kResync) {
      resync(self, st.from_shard);  // we missed a broadcast, or the syncer restarted and does not know us
    }
  } else {
    log_warn(who(self) + ": unexpected " + message_name(m) + " from the syncer");
  }
}

// ---- a learner trained outside atoll

// Hands the exchange what the core adopted, and asks for what the next
// boundary must read: fragments falling due, and those deferred pulls need.
void sync_exchange(LearnerActor* self) {
  auto& st = self->state;
  auto& core = *st.core;
  auto updates = core.take_updates();
  for (const auto& u : updates) st.external->set_adopted(u.fragment, core.version(u.fragment), core.base(u.fragment));
  st.external->post(std::move(updates), core.take_moments());
  std::set<uint32_t> reads = core.due_soon();
  bool moments = false;
  for (const auto& m : st.deferred) {
    if (const auto* p = std::get_if<Pull>(&m)) reads.insert(p->fragment);
    else moments = true;
  }
  st.external->want(std::move(reads), moments);
  if (st.last_pulled) st.external->set_stopping();
}

// Answers what the values read now allow; the rest waits for a later boundary.
void answer_deferred(LearnerActor* self) {
  auto& st = self->state;
  std::deque<Message> waiting;
  for (auto& m : st.deferred) {
    if (const auto* p = std::get_if<Pull>(&m)) {
      if (!st.core->readable(p->fragment)) {
        waiting.push_back(std::move(m));
        continue;
      }
      if (auto push = st.core->answer(*p); push.ok()) send_to_syncer(self, *push);
      else log_warn(who(self) + ": " + push.status().to_string());
    } else if (auto moments = st.core->moments_for(std::get<MomentsPull>(m)); moments.ok()) {
      send_to_syncer(self, *moments);
    } else {
      waiting.push_back(std::move(m));
    }
  }
  st.deferred = std::move(waiting);
  // Leaving, and every last push is out: now it may say so.
  if (st.leaving && !st.leave_sent && any_syncer(st) &&
      std::none_of(st.deferred.begin(), st.deferred.end(), [](const Message& m) { return std::holds_alternative<Pull>(m); }))
    say_leave(self);
}

// Departs in order: see LearnerState::leaving.
void leave(LearnerActor* self, std::string reason, double drain_seconds) {
  auto& st = self->state;
  if (st.leaving || st.stopping) return;
  st.leaving = true;
  st.leave_reason = std::move(reason);
  if (!st.core->welcomed()) {  // nothing trained: nothing to hand over
    log_info(who(self) + ": leaves before its welcome (" + st.leave_reason + ")");
    return gone(self);
  }
  log_info(who(self) + ": leaving (" + st.leave_reason + "); its last progress goes to the syncer");
  self->delayed_send(self, span(drain_seconds), drain_atom_v);
  if (st.external) {  // the user's loop reads every fragment at its next boundary; then they go
    for (uint32_t p = 0; p < st.core->fragments().size(); ++p) st.deferred.push_back(Pull{p, 0, true});
    st.last_pulled = true;
    answer_deferred(self);
    sync_exchange(self);
    return;
  }
  if (!st.computing) send_last_progress(self);  // else at the end of the step under way
}

void handle_external(LearnerActor* self, Message m) {
  auto& st = self->state;
  if (st.core->welcomed() && (std::holds_alternative<Pull>(m) || std::holds_alternative<MomentsPull>(m))) {
    if (const auto* p = std::get_if<Pull>(&m); p && p->last) st.last_pulled = true;
    if (std::holds_alternative<MomentsPull>(m)) st.moments_shard = st.from_shard;  // answered at a later boundary
    st.deferred.push_back(std::move(m));
    answer_deferred(self);  // a frozen replica answers at once
  } else {
    // A pull of a fragment whose next version arrived belongs to a round that has closed.
    LearnerCore::drop_closed_pulls(st.deferred, &m);
    const bool welcomed = st.core->welcomed();
    handle(self, std::move(m));
    if (!welcomed && st.core->welcomed()) {
      sync_exchange(self);  // the global model first: a welcomed learner has one
      st.external->set_welcomed();
    }
  }
  sync_exchange(self);
}

// The steps the user's loop handed over since the last time, in order.
void take_steps(LearnerActor* self) {
  auto& st = self->state;
  auto& core = *st.core;
  for (auto& step : st.external->steps()) {
    if (st.awaiting_final_evaluation) {  // the run is over: only the final model's evaluation counts
      if (!step.evaluation) continue;
      step.evaluation->learner = core.id();
      step.evaluation->incarnation = core.incarnation();
      send_to_syncer(self, *step.evaluation);
      return final_evaluation_done(self);
    }
    // After the freeze only frozen reads count: fragments read again after a
    // late adoption, for the last pulls.
    if (!core.welcomed() || st.stopping || (st.frozen && !step.frozen)) continue;
    if (Status s = core.read(step.fragments, step.values, step.moments); !s.ok()) {
      log_warn(who(self) + ": a step's values were not taken: " + s.to_string());
      continue;
    }
    if (step.moments_asked && !step.moments)  // its optimizer has none to give: the syncer goes without
      std::erase_if(st.deferred, [](const Message& m) { return std::holds_alternative<MomentsPull>(m); });
    // Booked once: a step trained on the global model (not one the welcome
    // overwrote), and not after the replica froze with its last progress.
    const bool book = step.counts && !st.frozen && (!step.frozen || step.tokens > 0);
    if (book) {
      const double loss = std::isfinite(step.loss) ? step.loss : core.loss_ema();
      core.finish_step({static_cast<float>(loss), step.tokens, step.seconds}, step.seconds);
    }
    answer_deferred(self);
    if (any_syncer(st)) {
      if (!st.last_pulled)
        for (const auto& push : core.due_pushes()) send_to_syncer(self, push);
      if (book) send_to_syncer(self, core.progress());
      if (step.evaluation) {
        step.evaluation->learner = core.id();
        step.evaluation->incarnation = core.incarnation();
        send_to_syncer(self, *step.evaluation);
        st.evaluated = true;
      }
    }
    if (step.frozen) st.frozen = true;
    else core.end_boundary();
  }
  st.external->set_booked(core.steps(), core.tokens());
  sync_exchange(self);
}

// Finds every shard not yet welcoming us and registers with it; again after
// a while until each has.
void lookup(LearnerActor* self) {
  auto& st = self->state;
  bool missing = false, sent = false;
  for (uint32_t s = 0; s < st.syncers.size(); ++s) {
    if (st.welcomed_by[s]) continue;
    caf::actor found = st.args.directory->syncer_for(st.args.id, s);
    if (!found) {
      missing = true;
      continue;
    }
    if (found != st.syncers[s]) {
      st.syncers[s] = found;
      self->monitor(found);
    }
    send_to_shard(self, s, st.core->make_register(st.args.cluster_token, s));
    sent = true;
  }
  if (missing) {
    self->delayed_send(self, kLookupRetry, lookup_atom_v);
  } else if (sent) {  // again, unless welcomed by then
    const double transfer = 4.0 * static_cast<double>(st.core->parameters().size()) / kRegisterRate;
    const double first = std::chrono::duration<double>(kRegisterRetry).count();
    const double wait = transfer <= first ? first
                                          : std::min(kRegisterRetryMax,
                                                     transfer * std::ldexp(1.0, std::min(st.unanswered_registers, 8)));
    ++st.unanswered_registers;
    self->delayed_send(self, span(wait), lookup_atom_v);
  }
}

// Registers again with a shard (every shard: nullopt), bases included: its
// welcome brings every fragment we are behind on and keeps our progress elsewhere.
void resync(LearnerActor* self, std::optional<uint32_t> shard) {
  auto& st = self->state;
  for (uint32_t s = 0; s < st.welcomed_by.size(); ++s)
    if (!shard || s == *shard) st.welcomed_by[s] = false;
  lookup(self);
}

// A packet from the syncer, decoded; nullopt if it is not from the syncer
// (only the syncer talks to learners) or malformed (logged).
std::optional<Message> receive(LearnerActor* self, const Packet& p) {
  const auto shard = from_syncer(self);
  if (!shard) return std::nullopt;
  self->state.from_shard = *shard;
  auto msg = decode_message(p.bytes, self->state.max_message_bytes);
  if (!msg.ok()) {
    log_warn(who(self) + ": dropped a malformed message: " + msg.status().to_string());
    return std::nullopt;
  }
  return std::move(*msg);
}

// What every phase answers: the lookup timer, the user's steps (a learner
// trained outside atoll; they are booked once welcomed), injected faults.
caf::message_handler always(LearnerActor* self) {
  return {
      [self](lookup_atom) {
        if (!all_of(self->state.welcomed_by)) lookup(self);
      },
      [self](end_atom, const std::string& reason) {  // a shard said Done and the others did not in time
        if (self->state.leaving) return gone(self);
        run_over(self, reason);
      },
      [self](replica_step_atom) { take_steps(self); },
      [self](final_evaluation_atom) {
        if (self->state.awaiting_final_evaluation) final_evaluation_done(self);
      },
      [self](crash_atom) {
        throw std::runtime_error("crash injected by the chaos plan");  // ends this learner as a bug would
      },
      [self](stall_atom, double seconds) {
        if (self->state.external) {  // its steps are the user's: nothing here to hold back
          log_warn(who(self) + ": a stall fault does not apply to a learner trained outside atoll");
          return;
        }
        self->state.stalled_until = self->clock().now() + span(seconds);
      },
      [self](slow_atom, double factor, double seconds) {
        self->state.slow_factor = std::max(1.0, factor);
        self->state.slow_until = self->clock().now() + span(seconds);
      },
      [self](leave_atom, std::string& reason, double drain_seconds) { leave(self, std::move(reason), drain_seconds); },
      [self](drain_atom) {
        log_warn(who(self) + ": the syncer did not confirm its departure in time; leaving anyway (its last "
                             "progress may not be merged)");
        gone(self);
      },
  };
}

// Welcomed: steps on its own replica (or the user's, handed over), the
// syncer's pulls and broadcasts, pushes as they fall due.
caf::behavior training(LearnerActor* self) {
  return caf::message_handler{
      [self](Packet& p) {
        auto& st = self->state;
        auto msg = receive(self, p);
        if (!msg) return;
        if (st.external) return handle_external(self, std::move(*msg));
        if (st.computing) {
          st.inbox.push_back(std::move(*msg));
          st.inbox_shards.push_back(st.from_shard);
          return;
        }
        handle(self, std::move(*msg));
        try_step(self);
      },
      [self](step_done_atom, double loss, int64_t tokens, double compute) {
        auto& st = self->state;
        st.computing = false;
        // A learner of speed s takes 1/s times as long per step as a speed-1
        // learner on the same machine: its wall time (queueing for a core
        // included), stretched by the extra delay before its next step.
        // On dedicated hardware (atoll/step_pacer.h) it takes its share's
        // step time instead, however free the machine is.
        const double slow = self->clock().now() < st.slow_until ? st.slow_factor : 1.0;  // an injected slowdown
        const double speed = st.core->spec().speed / slow;
        const double wall = std::chrono::duration<double>(self->clock().now() - st.step_started).count();
        const double extra = st.args.pacer ? st.args.pacer->pace(wall, speed, st.core->spec().batch_size)
                             : speed < 1.0 ? wall * (1.0 / speed - 1.0)
                                           : 0.0;
        st.core->finish_step({static_cast<float>(loss), tokens, compute}, wall + extra + std::exchange(st.overslept, 0.0));
        LearnerCore::drop_closed_pulls(st.inbox, nullptr, &st.inbox_shards);
        while (!st.inbox.empty() && !st.stopping) {
          Message m = std::move(st.inbox.front());
          st.inbox.pop_front();
          st.from_shard = st.inbox_shards.front();  // what it answers goes back there
          st.inbox_shards.pop_front();
          handle(self, std::move(m));
        }
        if (any_syncer(st) && !st.stopping) {
          if (!st.last_pulled && !st.leaving)  // a last pull was answered with all progress
            for (const auto& push : st.core->due_pushes()) send_to_syncer(self, push);
          send_to_syncer(self, st.core->progress());
          if (st.leaving && !st.leave_sent) send_last_progress(self);
        }
        if (extra > 1e-6) {
          st.delaying = true;
          st.paced_until = self->clock().now() + span(extra);
          self->delayed_send(self, span(extra), next_step_atom_v);
          return;
        }
        try_step(self);
      },
      [self](next_step_atom) {
        auto& st = self->state;
        st.delaying = false;
        if (st.paced_until != caf::actor_clock::time_point{}) {  // a speed delay, not a stall
          st.overslept += std::max(0.0, std::chrono::duration<double>(self->clock().now() - st.paced_until).count());
          st.paced_until = {};
        }
        try_step(self);
      },
      [self](resync_atom, uint64_t steps) {
        auto& st = self->state;
        st.resync_armed = false;
        if (st.core->blocked() && st.core->steps() == steps && !st.computing) {
          log_warn(who(self) + ": no broadcast for " + std::to_string(kResyncAfter.count()) + " s; resynchronizing");
          resync(self);
        }
        try_step(self);
      },
      [self](step_failed_atom, std::string& what) {
        log_error(who(self) + ": inner step failed: " + what);
        self->quit(caf::make_error(caf::sec::runtime_error, what));
      },
  }.or_else(always(self));
}

// Not yet welcomed: registering with whichever syncer the directory names.
caf::behavior joining(LearnerActor* self) {
  return caf::message_handler{
      [self](Packet& p) {
        auto& st = self->state;
        auto msg = receive(self, p);
        if (!msg) return;
        // Pulls, broadcasts and moment requests meant for an earlier incarnation
        // (delayed, reordered) can arrive before our welcome: nothing to answer
        // with. A shard that welcomed us while another has not yet is answered.
        const auto* pull = std::get_if<Pull>(&*msg);
        const auto* broadcast = std::get_if<Broadcast>(&*msg);
        if ((pull || broadcast) && !st.external &&
            st.core->welcomed(pull ? pull->fragment : broadcast->fragment)) {
          handle(self, std::move(*msg));
          return;
        }
        if (pull || broadcast || std::holds_alternative<MomentsPull>(*msg)) return;
        if (!(std::holds_alternative<Welcome>(*msg) || std::holds_alternative<Reject>(*msg) ||
              std::holds_alternative<Done>(*msg))) {
          log_warn(who(self) + ": unexpected " + message_name(*msg) + " from the syncer before its welcome");
          return;
        }
        if (st.external) handle_external(self, std::move(*msg));
        else handle(self, std::move(*msg));
        if (!st.core->welcomed()) return;
        self->become(training(self));
        try_step(self);
      },
  }.or_else(always(self));
}

caf::behavior learner(LearnerActor* self, LearnerArgs args) {
  auto& state = self->state;
  state.args = std::move(args);
  state.started = self->clock().now();
  state.external = state.args.external;
  auto core = state.external ? LearnerCore::create_external(state.args.id, state.args.incarnation,
                                                            state.args.job->topology(), state.external->layout(),
                                                            state.external->speed_label(),
                                                            state.external->batch_label())
                             : LearnerCore::create(state.args.id, state.args.incarnation, state.args.job,
                                                   state.args.spec);
  if (!core.ok()) {
    log_error(who(self) + ": " + core.status().to_string());
    self->quit(caf::make_error(caf::sec::invalid_argument, core.status().to_string()));
    return {};
  }
  state.core = std::move(*core);
  size_t parameters = 0;
  for (const auto& f : state.core->fragments()) parameters += f.size;
  state.max_message_bytes = SyncerCore::max_message_bytes(parameters);
  const auto shards = static_cast<size_t>(state.args.job->topology().syncer.shards);
  state.syncers.assign(shards, caf::actor{});
  state.welcomed_by.assign(shards, false);
  state.done_by.assign(shards, false);
  if (state.external) {
    state.external->begin_incarnation(state.args.incarnation);
    state.external->set_notify([me = caf::actor_cast<caf::actor>(self)] { caf::anon_send(me, replica_step_atom_v); },
                               self->id());
    // The exchange outlives the actor system: its handle of this actor must not.
    self->attach_functor([external = state.external, id = self->id()] { external->clear_notify(id); });
  }
  state.args.directory->put(Directory::learner(state.args.id), caf::actor_cast<caf::actor>(self));
  self->attach_functor([dir = state.args.directory, name = Directory::learner(state.args.id), addr = self->address()] {
    dir->erase(name, addr);
  });
  // An exception ends this learner (its supervisor restarts it); say so in our log, not CAF's.
  self->set_exception_handler([self](std::exception_ptr& eptr) -> caf::error {
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      log_warn(who(self) + ": failed: " + e.what());
      return caf::make_error(caf::sec::runtime_error, e.what());
    } catch (...) {
      log_warn(who(self) + ": failed with an unknown exception");
      return caf::make_error(caf::sec::runtime_error);
    }
  });
  self->set_down_handler([self](const caf::down_msg& dm) {
    auto& st = self->state;
    const auto it = std::find_if(st.syncers.begin(), st.syncers.end(),
                                 [&](const caf::actor& s) { return s && s.address() == dm.source; });
    if (it == st.syncers.end()) return;
    const auto shard = static_cast<uint32_t>(it - st.syncers.begin());
    const std::string name = st.syncers.size() > 1 ? "syncer shard " + std::to_string(shard) : "the syncer";
    if (st.leaving) {  // nobody to hand the last progress to: go now rather than wait out the drain
      log_warn(who(self) + ": lost " + name + " while leaving; its last progress may not be merged");
      return gone(self);
    }
    log_warn(who(self) + ": lost " + name + " (" + to_string(dm.reason) + "); training on");
    *it = nullptr;
    st.welcomed_by[shard] = false;
    self->delayed_send(self, kLookupRetry, lookup_atom_v);
  });
  lookup(self);
  return joining(self);
}

}  // namespace

caf::actor spawn_learner(caf::actor_system& sys, LearnerArgs args) { return sys.spawn(learner, std::move(args)); }

}  // namespace atl
