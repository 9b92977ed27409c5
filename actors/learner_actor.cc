// The learner actor: a LearnerSession's transport and timers.
//
// The protocol (phases, welcomes and Done per shard, the step boundary,
// leaving) is LearnerSession's (atoll/learner_session.h); this file carries
// what it decides: packets to and from the syncer's shards (found through
// the directory and monitored), its timers, its steps on the learner's TBB
// arena (atoll's own replica; a replica trained in Python takes its steps in
// the user's thread and hands them over through the exchange), the chaos
// plan's faults, and the run's records. The actor stays responsive while a
// step runs: the session queues what the syncer sends until it is done.
#include <caf/all.hpp>

#include <chrono>

#include "actors.h"
#include "atoll/atoms.h"
#include "atoll/exchange_replica.h"
#include "atoll/learner_session.h"
#include "atoll/log.h"
#include "atoll/machine_load.h"
#include "atoll/model_replica.h"
#include "atoll/syncer_core.h"
#include "timespan.h"

namespace atl {
namespace {

struct LearnerState {
  static inline const char* name = "learner";
  LearnerArgs args;
  std::shared_ptr<ModelReplica> model;  // atoll's own replica, shared with the step under way (null: external)
  std::unique_ptr<LearnerSession> session;
  // The largest message the syncer may send: a welcome carries the whole
  // global model and a peer's moments, so the limit grows with the model.
  size_t max_message_bytes = 0;
  std::vector<caf::actor> syncers;  // by shard: its handle (null: not found, or down)
  caf::actor_clock::time_point started;
};
using LearnerActor = caf::stateful_actor<LearnerState>;

std::string who(const LearnerActor* self) {
  return "learner " + std::to_string(self->state.args.id) + "." + std::to_string(self->state.args.incarnation);
}

// Seconds since this incarnation started: the session's clock.
double now(const LearnerActor* self) {
  return std::chrono::duration<double>(self->clock().now() - self->state.started).count();
}

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
    else self->delayed_send(to, timespan_of(d.delay_seconds), Packet{std::move(d.bytes)});
  }
}

void run_step(LearnerActor* self) {
  self->state.args.pool->submit([core = self->state.model, me = caf::actor_cast<caf::actor>(self)] {
    try {
      const auto r = core->step();
      caf::anon_send(me, step_done_atom_v, static_cast<double>(r.loss), r.tokens, r.compute_seconds);
    } catch (const std::exception& e) {  // an exception must end this learner, not the process
      caf::anon_send(me, step_failed_atom_v, std::string(e.what()));
    }
  });
}

// Carries out what the session decided.
void carry_out(LearnerActor* self, LearnerEffects& fx) {
  auto& st = self->state;
  for (const auto& l : fx.logs) {
    if (l.level == LearnerEffects::Level::kInfo) log_info(l.text);
    else if (l.level == LearnerEffects::Level::kWarn) log_warn(l.text);
    else log_error(l.text);
  }
  for (auto& s : fx.sends) {
    if (auto* progress = std::get_if<Progress>(&s.message)) {  // where it runs, for the syncer's machine load
      progress->machine = machine_id();
      progress->process_cpu_seconds = process_cpu_seconds();
    }
    send_to_shard(self, s.shard, s.message);
  }
  for (const auto& t : fx.timers)
    self->delayed_send(self, timespan_of(t.seconds), timer_atom_v, static_cast<uint32_t>(t.kind), t.tag);
  auto& records = *st.args.records;
  for (uint32_t f : fx.adopted) records.adopted.note(f, st.session->replica().version(f));
  records.counters.regressions_refused += fx.regressions_refused;
  if (fx.welcomed) records.readiness.welcomed(st.args.id);
  if (fx.reintegrated) records.log->append(event::Reintegrated{st.args.id, st.args.incarnation, *fx.reintegrated});
  if (fx.run_over) records.latch.finish();
  if (fx.start_step) run_step(self);
  switch (fx.end) {
    case LearnerEffects::End::kNone: return;
    case LearnerEffects::End::kStopped: return self->quit(caf::exit_reason::normal);  // not restarted
    case LearnerEffects::End::kRefused:
      records.fail(Status::refused(fx.end_reason));
      return self->quit(caf::exit_reason::normal);
    case LearnerEffects::End::kFailed:  // its supervisor restarts it
      return self->quit(caf::make_error(caf::sec::runtime_error, fx.end_reason));
  }
}

// Runs one session event and carries out what it decided.
template <class F>
void on(LearnerActor* self, F&& event) {
  LearnerEffects fx;
  event(*self->state.session, now(self), fx);
  carry_out(self, fx);
}

// Finds every shard that has not welcomed it (a new handle is monitored) and
// lets the session register with those it can reach.
void lookup(LearnerActor* self) {
  auto& st = self->state;
  std::vector<bool> reachable(st.syncers.size());
  for (uint32_t s = 0; s < st.syncers.size(); ++s) {
    if (!st.session->welcomed_by(s))
      if (caf::actor found = st.args.directory->syncer_for(st.args.id, s); found && found != st.syncers[s]) {
        st.syncers[s] = found;
        self->monitor(found);
      }
    reachable[s] = static_cast<bool>(st.syncers[s]);
  }
  on(self, [&](LearnerSession& s, double t, LearnerEffects& fx) { s.lookup(reachable, t, fx); });
}

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

// A replica that cannot be made ends this learner, saying why.
caf::behavior fail(LearnerActor* self, const Status& why) {
  log_error(who(self) + ": " + why.to_string());
  self->quit(caf::make_error(caf::sec::invalid_argument, why.to_string()));
  return {};
}

caf::behavior learner(LearnerActor* self, LearnerArgs args) {
  auto& st = self->state;
  st.args = std::move(args);
  st.started = self->clock().now();
  const auto& external = st.args.external;
  LearnerSession::Options options{.shards = st.args.job->topology().syncer.shards,
                                  .cluster_token = st.args.cluster_token,
                                  .restarted = st.args.restarted,
                                  .pacer = st.args.pacer};
  size_t parameters = 0;
  if (external) {
    auto mirror = ExchangeReplica::create(st.args.id, st.args.incarnation, st.args.job->topology(), external->layout(),
                                          external->speed_label(), external->batch_label());
    if (!mirror.ok()) return fail(self, mirror.status());
    parameters = (*mirror)->parameter_count();
    st.session = std::make_unique<LearnerSession>(std::move(*mirror), external, std::move(options), 0.0);
  } else {
    auto model = ModelReplica::create(st.args.id, st.args.incarnation, st.args.job, st.args.spec);
    if (!model.ok()) return fail(self, model.status());
    st.model = std::move(*model);
    options.speed = st.model->spec().speed;
    options.batch_size = st.model->spec().batch_size;
    parameters = st.model->parameter_count();
    st.session = std::make_unique<LearnerSession>(st.model, std::move(options), 0.0);
  }
  st.max_message_bytes = SyncerCore::max_message_bytes(parameters);
  st.syncers.assign(static_cast<size_t>(st.args.job->topology().syncer.shards), caf::actor{});
  if (external) {
    external->begin_incarnation(st.args.incarnation);
    external->set_notify([me = caf::actor_cast<caf::actor>(self)] { caf::anon_send(me, replica_step_atom_v); },
                         self->id());
    // The exchange outlives the actor system: its handle of this actor must not.
    self->attach_functor([external, id = self->id()] { external->clear_notify(id); });
  }
  st.args.directory->put(Directory::learner(st.args.id), caf::actor_cast<caf::actor>(self));
  self->attach_functor([dir = st.args.directory, name = Directory::learner(st.args.id), addr = self->address()] {
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
    auto& syncers = self->state.syncers;
    for (uint32_t s = 0; s < syncers.size(); ++s) {
      if (!syncers[s] || syncers[s].address() != dm.source) continue;
      syncers[s] = nullptr;
      on(self, [&](LearnerSession& session, double t, LearnerEffects& fx) {
        session.on_shard_lost(s, to_string(dm.reason), t, fx);
      });
    }
  });
  lookup(self);
  return {
      [self](Packet& p) {
        const auto shard = from_syncer(self);
        if (!shard) return;
        auto msg = decode_message(p.bytes, self->state.max_message_bytes);
        if (!msg.ok()) {
          on(self, [&](LearnerSession& s, double t, LearnerEffects& fx) { s.on_malformed(*shard, msg.status(), t, fx); });
          return;
        }
        on(self, [&](LearnerSession& s, double t, LearnerEffects& fx) { s.on_message(*shard, std::move(*msg), t, fx); });
      },
      [self](step_done_atom, double loss, int64_t tokens, double compute) {
        on(self, [&](LearnerSession& s, double t, LearnerEffects& fx) {
          s.on_step_done({static_cast<float>(loss), tokens, compute}, t, fx);
        });
      },
      [self](step_failed_atom, std::string& what) {
        on(self, [&](LearnerSession& s, double, LearnerEffects& fx) { s.on_step_failed(what, fx); });
      },
      [self](timer_atom, uint32_t kind, uint64_t tag) {
        // A lookup finds the shards again first: one may have restarted elsewhere.
        if (static_cast<LearnerTimer>(kind) == LearnerTimer::kLookup) {
          if (!self->state.session->all_welcomed()) lookup(self);
          return;
        }
        on(self, [&](LearnerSession& s, double t, LearnerEffects& fx) {
          s.on_timer(static_cast<LearnerTimer>(kind), tag, t, fx);
        });
      },
      [self](replica_step_atom) {
        auto steps = self->state.args.external->steps();
        on(self, [&](LearnerSession& s, double t, LearnerEffects& fx) { s.on_replica_steps(std::move(steps), t, fx); });
      },
      [self](leave_atom, std::string& reason, double drain_seconds) {
        on(self, [&](LearnerSession& s, double t, LearnerEffects& fx) { s.leave(std::move(reason), drain_seconds, t, fx); });
      },
      [self](crash_atom) {
        throw std::runtime_error("crash injected by the chaos plan");  // ends this learner as a bug would
      },
      [self](stall_atom, double seconds) {
        on(self, [&](LearnerSession& s, double t, LearnerEffects& fx) { s.stall(seconds, t, fx); });
      },
      [self](slow_atom, double factor, double seconds) {
        on(self, [&](LearnerSession& s, double t, LearnerEffects&) { s.slow(factor, seconds, t); });
      },
  };
}

}  // namespace

caf::actor spawn_learner(caf::actor_system& sys, LearnerArgs args) { return sys.spawn(learner, std::move(args)); }

}  // namespace atl
