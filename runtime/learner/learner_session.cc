#include "atoll/learner_session.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "atoll/fragments.h"

namespace atl {
namespace {

using Level = LearnerEffects::Level;

}  // namespace

LearnerSession::LearnerSession(std::shared_ptr<LearnerReplica> replica, Options options, double now)
    : replica_(std::move(replica)),
      options_(std::move(options)),
      started_(now),
      shards_(static_cast<size_t>(options_.shards)),
      reachable_(static_cast<size_t>(options_.shards), false) {}

LearnerSession::LearnerSession(std::shared_ptr<ExchangeReplica> mirror, std::shared_ptr<ReplicaExchange> exchange,
                               Options options, double now)
    : LearnerSession(std::shared_ptr<LearnerReplica>(mirror), std::move(options), now) {
  mirror_ = std::move(mirror);
  exchange_ = std::move(exchange);
}

std::string LearnerSession::who() const {
  return "learner " + std::to_string(replica_->id()) + "." + std::to_string(replica_->incarnation());
}

void LearnerSession::log(LearnerEffects& fx, Level level, std::string text) const {
  fx.logs.push_back({level, who() + ": " + std::move(text)});
}

void LearnerSession::warn_repeated(LearnerEffects& fx, const std::string& kind, double now, std::string text) {
  Repeated& said = repeated_[kind];
  if (now - said.logged_at < kRepeatLogSeconds) {
    ++said.unlogged;
    return;
  }
  if (said.unlogged > 0)
    text += " (and " + std::to_string(said.unlogged) + " more like it not logged since the last such line)";
  log(fx, Level::kWarn, std::move(text));
  said = {now, 0};
}

void LearnerSession::on_malformed(uint32_t shard, const Status& why, double now, LearnerEffects& fx) {
  warn_repeated(fx, "malformed", now,
                "dropped a malformed message from syncer shard " + std::to_string(shard) + ": " + why.to_string());
}

bool LearnerSession::any_reachable() const {
  return std::any_of(reachable_.begin(), reachable_.end(), [](bool r) { return r; });
}

bool LearnerSession::all_welcomed() const {
  return std::all_of(shards_.begin(), shards_.end(), [](const Shard& s) { return s.welcomed; });
}

// A push goes to its fragment's shard, moments to the shard that asked, an
// evaluation to the first; progress, registrations and Leave to every shard.
void LearnerSession::send(LearnerEffects& fx, Message m, std::optional<uint32_t> shard) {
  if (!shard) {
    if (const auto* push = std::get_if<Push>(&m)) shard = shard_of(push->fragment, options_.shards);
    else if (std::holds_alternative<Moments>(m)) shard = moments_shard_;
    else if (std::holds_alternative<Evaluation>(m)) shard = 0;
  }
  if (shard) {
    fx.sends.push_back({*shard, std::move(m)});
    return;
  }
  for (uint32_t s = 0; s + 1 < shards_.size(); ++s) fx.sends.push_back({s, m});
  fx.sends.push_back({static_cast<uint32_t>(shards_.size() - 1), std::move(m)});
}

// The run's end is one shard's (shard 0 judges the budget): a shard in
// another process learns it from its learners, which pass on the Done they
// got. It ends the run too, after its last rounds, and says Done itself.
void LearnerSession::tell_run_over(uint32_t shard, LearnerEffects& fx) {
  send(fx, Done{others_done_reason_}, shard);
}

void LearnerSession::end(LearnerEffects& fx, LearnerEffects::End how, std::string reason) {
  phase_ = Phase::kOver;
  fx.end = how;
  fx.end_reason = std::move(reason);
}

// ---- registering

void LearnerSession::lookup(const std::vector<bool>& reachable, double /*now*/, LearnerEffects& fx) {
  if (phase_ == Phase::kOver) return;
  for (size_t s = 0; s < reachable_.size() && s < reachable.size(); ++s) reachable_[s] = reachable[s];
  bool missing = false, sent = false;
  for (uint32_t s = 0; s < shards_.size(); ++s) {
    if (shards_[s].welcomed) continue;
    if (!reachable_[s]) {
      missing = true;
      continue;
    }
    // The run is over elsewhere: say so first, so that a shard that never welcomes it again (a large
    // Register that does not get through) still ends the run; then register, for its last rounds.
    if (!others_done_reason_.empty() && !shards_[s].done && phase_ != Phase::kLeaving) tell_run_over(s, fx);
    send(fx, replica_->make_register(options_.cluster_token, s), s);
    replica_->registering(s);
    sent = true;
  }
  if (missing) {
    fx.timers.push_back({LearnerTimer::kLookup, kLookupRetrySeconds});
  } else if (sent) {  // again, unless welcomed by then
    const double transfer = 4.0 * static_cast<double>(replica_->parameter_count()) / kRegisterRate;
    const double wait = transfer <= kRegisterRetrySeconds
                            ? kRegisterRetrySeconds
                            : std::min(kRegisterRetryMaxSeconds,
                                       transfer * std::ldexp(1.0, std::min(unanswered_registers_, 8)));
    ++unanswered_registers_;
    fx.timers.push_back({LearnerTimer::kLookup, wait});
  }
}

// Registers again with a shard (every shard: nullopt), bases included: its
// welcome brings every fragment it is behind on and keeps its progress elsewhere.
void LearnerSession::resync(std::optional<uint32_t> shard, double now, LearnerEffects& fx) {
  for (uint32_t s = 0; s < shards_.size(); ++s)
    if (!shard || s == *shard) shards_[s].welcomed = false;
  lookup(reachable_, now, fx);
}

void LearnerSession::on_shard_lost(uint32_t shard, const std::string& why, double /*now*/, LearnerEffects& fx) {
  if (phase_ == Phase::kOver || shard >= shards_.size()) return;
  const std::string name = shards_.size() > 1 ? "syncer shard " + std::to_string(shard) : "the syncer";
  if (phase_ == Phase::kLeaving) {  // nobody to hand the last progress to: go now rather than wait out the drain
    log(fx, Level::kWarn, "lost " + name + " while leaving; its last progress may not be merged");
    return gone(fx);
  }
  log(fx, Level::kWarn, "lost " + name + " (" + why + "); training on");
  reachable_[shard] = false;
  shards_[shard].welcomed = false;
  fx.timers.push_back({LearnerTimer::kLookup, kLookupRetrySeconds});
}

// ---- messages

void LearnerSession::on_message(uint32_t shard, Message m, double now, LearnerEffects& fx) {
  on_message(shard, std::make_shared<const Message>(std::move(m)), now, fx);
}

void LearnerSession::on_message(uint32_t shard, std::shared_ptr<const Message> m, double now, LearnerEffects& fx) {
  if (phase_ == Phase::kOver || shard >= shards_.size()) return;
  if (!replica_->welcomed()) {
    // Pulls, broadcasts and moment requests meant for an earlier incarnation
    // (delayed, reordered) can arrive before its welcome: nothing to answer
    // with. A shard that welcomed it while another has not yet is answered.
    const auto* pull = std::get_if<Pull>(m.get());
    const auto* broadcast = std::get_if<Broadcast>(m.get());
    if ((pull || broadcast) && !mirror_ && replica_->welcomed(pull ? pull->fragment : broadcast->fragment))
      return handle(shard, *m, now, fx);
    if (pull || broadcast || std::holds_alternative<MomentsPull>(*m)) return;
    if (!(std::holds_alternative<Welcome>(*m) || std::holds_alternative<Reject>(*m) ||
          std::holds_alternative<Done>(*m))) {
      log(fx, Level::kWarn, "unexpected " + std::string(message_name(*m)) + " from the syncer before its welcome");
      return;
    }
    if (mirror_) handle_external(shard, std::move(m), now, fx);
    else handle(shard, *m, now, fx);
    if (!replica_->welcomed()) return;
    advance(Phase::kTraining);
    return try_step(now, fx);
  }
  if (mirror_) return handle_external(shard, std::move(m), now, fx);
  if (computing_) {
    inbox_.push_back(std::move(m));
    inbox_shards_.push_back(shard);
    return;
  }
  handle(shard, *m, now, fx);
  try_step(now, fx);
}

void LearnerSession::handle(uint32_t shard, const Message& m, double now, LearnerEffects& fx) {
  if (phase_ == Phase::kOver) return;
  LearnerReplica& replica = *replica_;
  if (auto* w = std::get_if<Welcome>(&m)) {
    const uint64_t refused_before = replica.regressions_refused();
    if (Status s = replica.welcome(*w); !s.ok()) {
      log(fx, Level::kError, "cannot adopt the global model: " + s.to_string());
      return end(fx, LearnerEffects::End::kFailed, s.to_string());
    }
    shards_[shard].welcomed = true;
    unanswered_registers_ = 0;
    for (uint32_t f = 0; f < replica.fragment_count(); ++f) fx.adopted.push_back(f);
    fx.regressions_refused += replica.regressions_refused() - refused_before;
    if (replica.welcomed()) fx.welcomed = true;
    if (!reintegrated_) {
      reintegrated_ = true;
      if (options_.restarted) fx.reintegrated = now - started_;
    }
    // Leaving: what went before this welcome (a syncer that restarted lost it), or what waited for one.
    if (phase_ == Phase::kLeaving && !mirror_ && !computing_) send_last_progress(fx);
  } else if (auto* mp = std::get_if<MomentsPull>(&m)) {
    moments_shard_ = shard;
    if (auto moments = replica.moments_for(*mp); moments.ok()) send(fx, std::move(*moments), shard);
  } else if (auto* p = std::get_if<Pull>(&m)) {
    if (!replica.push_in_flight(*p)) {  // else the push on its way answers it
      if (auto push = replica.answer(*p); push.ok()) send(fx, std::move(*push));
      else log(fx, Level::kWarn, push.status().to_string());
    }
    if (p->last) advance(Phase::kLastRounds);
  } else if (auto* b = std::get_if<Broadcast>(&m)) {
    if (Status s = replica.apply(*b); s.code() == Status::Code::kUnavailable) {
      log(fx, Level::kInfo, s.to_string() + "; resynchronizing");
      resync(shard, now, fx);  // the welcome brings the version it missed
    } else if (!s.ok()) {
      log(fx, Level::kWarn, "broadcast dropped: " + s.to_string());
    } else if (b->fragment < replica.fragment_count()) {
      fx.adopted.push_back(b->fragment);
    }
  } else if (auto* farewell = std::get_if<Done>(&m); farewell && phase_ == Phase::kLeaving) {
    shards_[shard].done = true;
    if (std::any_of(shards_.begin(), shards_.end(), [](const Shard& s) { return !s.done; }))
      return;  // other shards still merge its last progress
    log(fx, Level::kInfo, farewell->reason + "; it leaves the run");
    gone(fx);
  } else if (auto* d = std::get_if<Done>(&m)) {
    const bool first = std::none_of(shards_.begin(), shards_.end(), [](const Shard& s) { return s.done; });
    shards_[shard].done = true;
    advance(Phase::kStopping);  // no more steps; the other shards' last pulls are still answered
    if (std::any_of(shards_.begin(), shards_.end(), [](const Shard& s) { return !s.done; })) {
      if (first) {
        others_done_reason_ = "syncer shard " + std::to_string(shard) + " ended the run: " + d->reason;
        fx.timers.push_back({LearnerTimer::kOtherShardsDone, kOtherShardsDoneSeconds});
        for (uint32_t s = 0; s < shards_.size(); ++s)
          if (!shards_[s].done) tell_run_over(s, fx);
      }
      return;
    }
    run_over(d->reason, fx);
  } else if (auto* r = std::get_if<Reject>(&m)) {
    const auto action = replica.on_reject(*r, shards_[shard].welcomed);
    if (action == LearnerReplica::RejectAction::kStop) {
      // Joining again cannot help: end this side of the run, saying why.
      const std::string why =
          who() + " refused by the syncer (" + reject_reason_name(r->reason) + "): " + r->detail;
      fx.logs.push_back({Level::kError, why});
      if (exchange_) exchange_->set_over(why, true, true);
      return end(fx, LearnerEffects::End::kRefused, why);
    }
    const std::string kind = "the syncer refused (" + std::string(reject_reason_name(r->reason)) + ")";
    warn_repeated(fx, kind, now, kind + ": " + r->detail);
    if (action == LearnerReplica::RejectAction::kRestart) {
      log(fx, Level::kError, "its replica is not finite; restarting");
      end(fx, LearnerEffects::End::kFailed, "replica diverged");
    } else if (action == LearnerReplica::RejectAction::kResync) {
      resync(shard, now, fx);  // it missed a broadcast, or the syncer restarted and does not know it
    }
  } else {
    log(fx, Level::kWarn, "unexpected " + std::string(message_name(m)) + " from the syncer");
  }
}

// ---- steps

void LearnerSession::try_step(double now, LearnerEffects& fx) {
  if (mirror_ || phase_ == Phase::kOver) return;  // an external replica: the user's loop takes the steps
  if (replica_->welcomed() && replica_->blocked() && !resync_armed_) {
    resync_armed_ = true;  // a broadcast that never comes must not block it forever
    fx.timers.push_back({LearnerTimer::kResync, kResyncAfterSeconds, replica_->steps()});
  }
  if (phase_ >= Phase::kLastRounds || paused_ || computing_ || delaying_ || !replica_->welcomed() ||
      replica_->blocked())
    return;
  if (now < stalled_until_) {  // an injected stall
    delaying_ = true;
    fx.timers.push_back({LearnerTimer::kNextStep, stalled_until_ - now});
    return;
  }
  computing_ = true;
  step_started_ = now;
  fx.start_step = true;
}

// What arrived during a step, in arrival order, less the pulls whose round closed meanwhile.
void LearnerSession::handle_inbox(double now, LearnerEffects& fx) {
  drop_closed_pulls(inbox_, nullptr, &inbox_shards_);
  while (!inbox_.empty() && phase_ < Phase::kStopping) {
    const std::shared_ptr<const Message> m = std::move(inbox_.front());
    inbox_.pop_front();
    const uint32_t shard = inbox_shards_.front();  // what it answers goes back there
    inbox_shards_.pop_front();
    handle(shard, *m, now, fx);
  }
}

void LearnerSession::on_step_done(const LearnerReplica::StepResult& result, double now, LearnerEffects& fx,
                                  std::optional<double> booked_seconds) {
  if (phase_ == Phase::kOver || !computing_) return;
  computing_ = false;
  // A learner of speed s takes 1/s times as long per step as a speed-1
  // learner on the same machine: its wall time (queueing for a core
  // included), stretched by the extra delay before its next step. On
  // dedicated hardware (atoll/step_pacer.h) it takes its share's step time
  // instead, however free the machine is.
  const double slow = now < slow_until_ ? slow_factor_ : 1.0;  // an injected slowdown
  const double speed = options_.speed / slow;
  const double wall = now - step_started_;
  const double extra = options_.pacer ? options_.pacer->pace(wall, speed, options_.batch_size)
                       : speed < 1.0  ? wall * (1.0 / speed - 1.0)
                                      : 0.0;
  replica_->finish_step(result, booked_seconds ? *booked_seconds : wall + extra + std::exchange(overslept_, 0.0));
  handle_inbox(now, fx);
  if (phase_ == Phase::kOver) return;
  if (any_reachable() && phase_ < Phase::kStopping) {
    if (phase_ < Phase::kLastRounds)  // a last pull was answered with all progress
      for (auto& push : replica_->due_pushes()) send(fx, std::move(push));
    send(fx, replica_->progress());
    if (phase_ == Phase::kLeaving && !leave_sent_) send_last_progress(fx);
  }
  if (extra > 1e-6) {
    delaying_ = true;
    paced_until_ = now + extra;
    fx.timers.push_back({LearnerTimer::kNextStep, extra});
    return;
  }
  try_step(now, fx);
}

void LearnerSession::pause(double now, LearnerEffects& fx) {
  if (phase_ == Phase::kOver) return;
  paused_ = true;
  if (!computing_) return;
  computing_ = false;
  handle_inbox(now, fx);
  if (phase_ == Phase::kLeaving && !leave_sent_) send_last_progress(fx);
}

void LearnerSession::resume(double now, LearnerEffects& fx) {
  paused_ = false;
  try_step(now, fx);
}

void LearnerSession::on_step_failed(const std::string& what, LearnerEffects& fx) {
  if (phase_ == Phase::kOver) return;
  log(fx, Level::kError, "inner step failed: " + what);
  end(fx, LearnerEffects::End::kFailed, what);
}

void LearnerSession::stall(double seconds, double now, LearnerEffects& fx) {
  if (mirror_) {  // its steps are the user's: nothing here to hold back
    log(fx, Level::kWarn, "a stall fault does not apply to a learner trained outside atoll");
    return;
  }
  stalled_until_ = now + seconds;
}

void LearnerSession::slow(double factor, double seconds, double now) {
  slow_factor_ = std::max(1.0, factor);
  slow_until_ = now + seconds;
}

void LearnerSession::on_timer(LearnerTimer kind, uint64_t tag, double now, LearnerEffects& fx) {
  if (phase_ == Phase::kOver) return;
  switch (kind) {
    case LearnerTimer::kLookup:
      if (!all_welcomed()) lookup(reachable_, now, fx);
      return;
    case LearnerTimer::kResync:
      resync_armed_ = false;
      if (replica_->blocked() && replica_->steps() == tag && !computing_) {
        log(fx, Level::kWarn, "no broadcast for " + std::to_string(static_cast<int>(kResyncAfterSeconds)) +
                                  " s; resynchronizing");
        resync(std::nullopt, now, fx);
      }
      return try_step(now, fx);
    case LearnerTimer::kOtherShardsDone:  // a shard said Done and the others did not in time
      if (phase_ == Phase::kLeaving) return gone(fx);
      return run_over(others_done_reason_, fx);
    case LearnerTimer::kDrain:
      log(fx, Level::kWarn, "the syncer did not confirm its departure in time; leaving anyway (its last "
                            "progress may not be merged)");
      return gone(fx);
    case LearnerTimer::kFinalEvaluation:
      if (awaiting_final_evaluation_) final_evaluation_done(fx);
      return;
    case LearnerTimer::kNextStep:
      delaying_ = false;
      if (paced_until_ >= 0.0) {  // a speed delay, not a stall: a late timer stretched the step
        overslept_ += std::max(0.0, now - paced_until_);
        paced_until_ = -1.0;
      }
      return try_step(now, fx);
  }
}

// ---- leaving and the end

void LearnerSession::say_leave(LearnerEffects& fx) {
  send(fx, Leave{replica_->id(), replica_->incarnation(), *leave_reason_});
  leave_sent_ = true;
}

// Leaving: every fragment's progress since its base goes as an unasked push,
// then Leave. Again after a welcome (a restarted syncer lost them).
void LearnerSession::send_last_progress(LearnerEffects& fx) {
  if (!any_reachable() || !replica_->welcomed()) return;
  for (uint32_t p = 0; p < replica_->fragment_count(); ++p) {
    if (!replica_->has_progress(p) || !replica_->readable(p)) continue;
    if (auto push = replica_->answer(Pull{p, 0, true}); push.ok()) send(fx, std::move(*push));
  }
  say_leave(fx);
}

void LearnerSession::leave(std::string reason, double drain_seconds, double /*now*/, LearnerEffects& fx) {
  if (phase_ >= Phase::kLeaving) return;
  advance(Phase::kLeaving);
  leave_reason_ = std::move(reason);
  if (!replica_->welcomed()) {  // nothing trained: nothing to hand over
    log(fx, Level::kInfo, "leaves before its welcome (" + *leave_reason_ + ")");
    return gone(fx);
  }
  log(fx, Level::kInfo, "leaving (" + *leave_reason_ + "); its last progress goes to the syncer");
  fx.timers.push_back({LearnerTimer::kDrain, drain_seconds});
  if (mirror_) {  // the user's loop reads every fragment at its next boundary; then they go
    for (uint32_t p = 0; p < replica_->fragment_count(); ++p) deferred_.push_back(std::make_shared<const Message>(Pull{p, 0, true}));
    exchange_->set_stopping();  // its last progress is asked for: the user's loop reads every fragment
    answer_deferred(fx);
    sync_exchange();
    return;
  }
  if (!computing_) send_last_progress(fx);  // else at the end of the step under way
}

// The departure is over (merged, or given up on): a normal stop, so its
// supervisor does not restart it, and the run goes on without it.
void LearnerSession::gone(LearnerEffects& fx) {
  if (exchange_) exchange_->set_over("this learner left the run (" + *leave_reason_ + ")", false);
  end(fx, LearnerEffects::End::kStopped, "it left the run (" + *leave_reason_ + ")");
}

// Done from every shard (or the wait for the others is over). A replica
// whose user's loop evaluated during the run first hands the syncer its
// evaluation of the final model (SyncerCore::final_evaluations_awaited).
void LearnerSession::run_over(const std::string& reason, LearnerEffects& fx) {
  log(fx, Level::kInfo, "the run is over (" + reason + ")");
  if (exchange_) exchange_->set_over("the run is over (" + reason + ")", false);
  fx.run_over = true;
  advance(Phase::kStopping);
  if (exchange_ && evaluated_ && any_reachable()) {
    awaiting_final_evaluation_ = true;
    exchange_->set_final_evaluation_wanted(true);
    fx.timers.push_back({LearnerTimer::kFinalEvaluation, kFinalEvaluationSeconds});
    return;
  }
  end(fx, LearnerEffects::End::kStopped, "the run is over (" + reason + ")");
}

void LearnerSession::final_evaluation_done(LearnerEffects& fx) {
  awaiting_final_evaluation_ = false;
  exchange_->set_final_evaluation_wanted(false);
  end(fx, LearnerEffects::End::kStopped, "the run is over");
}

// ---- a replica trained outside atoll

// Hands the exchange what the mirror adopted, and asks for what the next
// boundary must read: fragments falling due, and those deferred pulls need.
void LearnerSession::sync_exchange() {
  ExchangeReplica& core = *mirror_;
  auto updates = core.take_updates();
  for (const auto& u : updates) exchange_->set_adopted(u.fragment, core.version(u.fragment), core.base(u.fragment));
  exchange_->post(std::move(updates), core.take_moments());
  std::set<uint32_t> reads = core.due_soon();
  bool moments = false;
  for (const auto& m : deferred_) {
    if (const auto* p = std::get_if<Pull>(m.get())) reads.insert(p->fragment);
    else moments = true;
  }
  exchange_->want(std::move(reads), moments);
}

// Answers what the values read now allow; the rest waits for a later boundary.
void LearnerSession::answer_deferred(LearnerEffects& fx) {
  std::deque<std::shared_ptr<const Message>> waiting;
  for (auto& m : deferred_) {
    if (const auto* p = std::get_if<Pull>(m.get())) {
      if (replica_->push_in_flight(*p)) continue;  // the push on its way answers it: nothing to read
      if (!replica_->readable(p->fragment)) {
        waiting.push_back(std::move(m));
        continue;
      }
      if (auto push = replica_->answer(*p); push.ok()) send(fx, std::move(*push));
      else log(fx, Level::kWarn, push.status().to_string());
    } else if (auto moments = replica_->moments_for(std::get<MomentsPull>(*m)); moments.ok()) {
      send(fx, std::move(*moments), moments_shard_);
    } else {
      waiting.push_back(std::move(m));
    }
  }
  deferred_ = std::move(waiting);
  // Leaving, and every last push is out: now it may say so.
  if (phase_ == Phase::kLeaving && !leave_sent_ && any_reachable() &&
      std::none_of(deferred_.begin(), deferred_.end(), [](const auto& m) { return std::holds_alternative<Pull>(*m); }))
    say_leave(fx);
}

void LearnerSession::handle_external(uint32_t shard, std::shared_ptr<const Message> m, double now,
                                     LearnerEffects& fx) {
  if (replica_->welcomed() && (std::holds_alternative<Pull>(*m) || std::holds_alternative<MomentsPull>(*m))) {
    if (const auto* p = std::get_if<Pull>(m.get()); p && p->last) {
      advance(Phase::kLastRounds);
      exchange_->set_stopping();  // its last progress is asked for: the user's loop reads every fragment
    }
    if (std::holds_alternative<MomentsPull>(*m)) moments_shard_ = shard;  // answered at a later boundary
    deferred_.push_back(std::move(m));
    answer_deferred(fx);  // a frozen replica answers at once
  } else {
    // A pull of a fragment whose next version arrived belongs to a round that has closed.
    drop_closed_pulls(deferred_, m.get());
    const bool welcomed = replica_->welcomed();
    handle(shard, *m, now, fx);
    if (phase_ == Phase::kOver) return;
    if (!welcomed && replica_->welcomed()) {
      sync_exchange();  // the global model first: a welcomed learner has one
      exchange_->set_welcomed();
    }
  }
  sync_exchange();
}

void LearnerSession::on_replica_steps(std::deque<ReplicaStep> steps, double /*now*/, LearnerEffects& fx) {
  if (!mirror_ || phase_ == Phase::kOver) return;
  ExchangeReplica& core = *mirror_;
  for (auto& step : steps) {
    if (awaiting_final_evaluation_) {  // the run is over: only the final model's evaluation counts
      if (!step.evaluation) continue;
      step.evaluation->learner = core.id();
      step.evaluation->incarnation = core.incarnation();
      send(fx, *step.evaluation);
      return final_evaluation_done(fx);
    }
    // After the freeze only frozen reads count: fragments read again after a
    // late adoption, for the last pulls.
    if (!core.welcomed() || phase_ >= Phase::kStopping || (frozen_ && !step.frozen)) continue;
    if (Status s = core.read(step.fragments, step.values, step.moments); !s.ok()) {
      log(fx, Level::kWarn, "a step's values were not taken: " + s.to_string());
      continue;
    }
    if (step.moments_asked && !step.moments && !step.moments_coming)  // none to give: the syncer goes without
      std::erase_if(deferred_, [](const auto& m) { return std::holds_alternative<MomentsPull>(*m); });
    // Booked once: a step trained on the global model (not one the welcome
    // overwrote), and not after the replica froze with its last progress.
    const bool book = step.counts && !frozen_ && (!step.frozen || step.tokens > 0);
    if (book) {
      const double loss = std::isfinite(step.loss) ? step.loss : core.loss_ema();
      core.finish_step({static_cast<float>(loss), step.tokens, step.seconds}, step.seconds);
    }
    answer_deferred(fx);
    if (any_reachable()) {
      if (phase_ < Phase::kLastRounds)
        for (auto& push : core.due_pushes()) send(fx, std::move(push));
      if (book) send(fx, core.progress());
      if (step.evaluation) {
        step.evaluation->learner = core.id();
        step.evaluation->incarnation = core.incarnation();
        send(fx, *step.evaluation);
        evaluated_ = true;
      }
    }
    if (step.frozen) frozen_ = true;
    else core.end_boundary();
  }
  exchange_->set_booked(core.steps(), core.tokens());
  sync_exchange();
}

size_t LearnerSession::drop_closed_pulls(std::deque<std::shared_ptr<const Message>>& queue, const Message* next, std::deque<uint32_t>* tags) {
  // In place and without a copy: the simulator runs this at every inner step.
  // From the back: a pull is closed if a broadcast of its fragment came after it.
  std::vector<uint32_t> broadcast_after;  // fragments, each once: a few
  const auto broadcast = [&](const Message* m) {
    const auto* b = m ? std::get_if<Broadcast>(m) : nullptr;
    if (b && std::find(broadcast_after.begin(), broadcast_after.end(), b->fragment) == broadcast_after.end())
      broadcast_after.push_back(b->fragment);
  };
  const auto closed = [&](const Message& m) {
    const auto* p = std::get_if<Pull>(&m);
    return p && std::find(broadcast_after.begin(), broadcast_after.end(), p->fragment) != broadcast_after.end();
  };
  broadcast(next);
  size_t dropped = 0;
  for (size_t i = queue.size(); i-- > 0;) {
    broadcast(queue[i].get());
    if (closed(*queue[i])) {
      queue[i].reset();
      ++dropped;
    }
  }
  if (dropped == 0) return 0;
  size_t kept = 0;
  for (size_t i = 0; i < queue.size(); ++i) {
    if (!queue[i]) continue;
    if (tags) (*tags)[kept] = (*tags)[i];
    queue[kept++] = std::move(queue[i]);
  }
  queue.resize(kept);
  if (tags) tags->resize(kept);
  return dropped;
}

}  // namespace atl
