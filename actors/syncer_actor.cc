// The syncer actor: a thin shell over SyncerCore.
//
// It decodes each Packet, checks that a learner id is used only by the actor
// that registered it, feeds the core with the actor clock's time, and carries
// out the effects: packets to learners (each encoded once), timers, log lines.
// It counts every byte in both directions, sends checkpoints to the
// checkpointer every N rounds or T seconds, and on start restores the latest
// good checkpoint (holding other messages until the checkpointer answered).
#include <caf/all.hpp>

#include <chrono>
#include <map>

#include "actors.h"
#include "timespan.h"
#include "atoll/atoms.h"
#include "atoll/cpu_clock.h"
#include "atoll/log.h"
#include "atoll/machine_load.h"
#include "atoll/module_layout.h"
#include "atoll/syncer_core.h"

namespace atl {
namespace {

using namespace std::chrono_literals;

// How long a starting syncer waits for its checkpoint to be read: 30 s, and
// 4 µs more per parameter it holds (a 17M-parameter shard read in 20.5 s,
// 1.2 µs each, so three times that), twice that with moments, so that a
// large model is never cut off and sent back to the learners' bases.
caf::timespan load_timeout(const SyncerCore& core) {
  // Its fragments' values and momentum, and their moments (m and v) when checkpoints keep them.
  const double values = static_cast<double>(core.owned_parameters()) * (core.topology().checkpoint.moments ? 2 : 1);
  return timespan_of(30.0 + 4e-6 * values);
}

struct SyncerActorState {
  static inline const char* name = "syncer";
  SyncerArgs args;
  std::unique_ptr<SyncerCore> core;
  // The transport's routing table: the actor each learner id is bound to
  // (the core decides who is admitted), and back.
  std::vector<caf::actor> learners;              // by id
  std::map<caf::actor_addr, uint32_t> ids;       // bound actor -> id
  std::map<caf::node_id, uint64_t> processes;    // names processes for the core's Senders (1, 2, ...)
  uint64_t rounds_at_checkpoint = 0;
  caf::actor_clock::time_point checkpoint_at;
  std::string ending;     // why the run ends, once its final flush began
  bool finished = false;  // Done sent: the model is final
  bool sealed = false;    // and the final evaluations are in (or their time is up): the run's records are final
  double cpu_seconds = 0.0;  // thread CPU spent handling messages and timers
  // It replaced a syncer of this process and goes on with its figures; one
  // in a new process goes on with its checkpoint's.
  bool continued = false;
};

// Adds the thread CPU time of a scope to `total`: what the syncer costs,
// whatever else the machine runs.
struct CpuMeter {
  explicit CpuMeter(double& total) : total_(total), start_(thread_cpu_seconds()) {}
  ~CpuMeter() { total_ += thread_cpu_seconds() - start_; }
  CpuMeter(const CpuMeter&) = delete;
  CpuMeter& operator=(const CpuMeter&) = delete;

 private:
  double& total_;
  double start_;
};
using SyncerActor = caf::stateful_actor<SyncerActorState>;

// Remote processes (by their Hello) are marked apart from the nodes (1, 2,
// ...) of the actors in this process.
constexpr uint64_t kRemoteProcess = uint64_t{1} << 63;

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void send_packet(SyncerActor* self, uint32_t learner, const caf::actor& to, const Packet& p) {
  if (!to) return;
  auto& st = self->state;
  st.core->count_bytes(0, p.bytes.size());
  if (!st.args.faults || !st.args.faults->active()) {
    self->send(to, p);
    return;
  }
  for (auto& d : st.args.faults->route(learner, p.bytes, self->clock().now())) {
    if (d.delay_seconds <= 0) self->send(to, Packet{std::move(d.bytes)});
    else self->delayed_send(to, timespan_of(d.delay_seconds), Packet{std::move(d.bytes)});
  }
}

void finish(SyncerActor* self, const std::string& why);
void seal(SyncerActor* self);

// "syncer: ", or "syncer shard 1: ": what begins its log lines.
std::string tag(SyncerActor* self) { return Directory::syncer_name(self->state.args.shard) + ": "; }

// `sender` receives what the core addresses to `sender_id` (a registering
// actor that is not, or not yet, the learner's registered handle).
void carry_out(SyncerActor* self, SyncerEffects& fx, const caf::actor* sender = nullptr,
               uint32_t sender_id = kNoLearner) {
  auto& st = self->state;
  for (auto& s : fx.sends) {
    caf::actor to;
    if (sender && s.learner == sender_id) to = *sender;
    else if (s.learner < st.learners.size()) to = st.learners[s.learner];
    send_packet(self, s.learner, to, Packet{encode_message(s.message)});
  }
  for (auto& m : fx.to_all) {
    const Packet p{encode_message(m)};
    for (uint32_t id = 0; id < st.learners.size(); ++id)
      if (st.core->learners()[id].connected) send_packet(self, id, st.learners[id], p);
  }
  for (const auto& t : fx.timers)
    self->delayed_send(self, timespan_of(t.seconds), timer_atom_v, static_cast<uint32_t>(t.kind), t.id, t.round);
  for (const auto& n : fx.notes) log_info(tag(self) + n);
  for (auto& e : fx.events) {
    if (const auto* merged = std::get_if<event::FirstMerge>(&e))
      log_info(tag(self) + "learner " + std::to_string(merged->learner) + " is merged again, " +
               std::to_string(merged->seconds) + " s after it came back");
    st.args.records->log->append(std::move(e));
  }
  fx = {};
  if (!st.finished && st.core->flushed()) finish(self, st.ending);
  else if (st.finished && !st.sealed && st.core->final_evaluations_awaited().empty()) seal(self);
}

// The syncer's sample, every tick and at the end: what the view shows, and
// where a restarted syncer continues from.
void publish(SyncerActor* self) {
  auto& st = self->state;
  const auto& core = *st.core;
  const auto now = self->clock().now();
  SyncerSample sample;
  sample.shard = st.args.shard;
  for (uint32_t p = 0; p < core.fragments().size(); ++p)
    if (core.owns(p)) {
      sample.parameters += core.fragments()[p].size;
      ++sample.fragments;
    }
  sample.seconds = core.elapsed(now);
  sample.start = core.run_start();
  sample.cpu_seconds = st.cpu_seconds;
  sample.recovering = core.recovering(now);
  sample.tokens = core.total_tokens();
  sample.allocated_seconds = core.allocated_seconds(now);
  sample.stats = core.stats();
  sample.learners = core.learners();
  for (uint32_t p = 0; p < core.fragments().size(); ++p) sample.versions.push_back(core.version(p));
  st.args.records->publish(std::move(sample), st.args.shard);
}

// A checkpoint of this syncer now, with its figures of the run.
Packet checkpoint_packet(SyncerActor* self) {
  auto& st = self->state;
  const int64_t now_ms = unix_ms();
  CheckpointView view = st.core->checkpoint(now_ms);
  view.figures = encode_figures(st.core->figures(self->clock().now(), now_ms, st.cpu_seconds));
  return Packet{encode_checkpoint(view)};
}

void maybe_checkpoint(SyncerActor* self) {
  auto& st = self->state;
  const auto& c = st.args.topology.checkpoint;
  if (!st.args.use_checkpointer || c.dir.empty()) return;
  const uint64_t rounds = st.core->stats().rounds;
  if (rounds == st.rounds_at_checkpoint) return;
  const auto now = self->clock().now();
  const bool by_rounds = c.every_rounds > 0 && rounds - st.rounds_at_checkpoint >= static_cast<uint64_t>(c.every_rounds);
  const bool by_time = c.every_seconds > 0 && now - st.checkpoint_at >= timespan_of(c.every_seconds);
  if (!by_rounds && !by_time) return;
  caf::actor cp = st.args.directory->get(Directory::checkpointer_name(st.args.shard));
  if (!cp) return;
  self->send(cp, save_atom_v, checkpoint_packet(self));
  st.rounds_at_checkpoint = rounds;
  st.checkpoint_at = now;
  SyncerEffects fx;  // moments for the next one
  st.core->request_checkpoint_moments(fx);
  carry_out(self, fx);
}

// Tells every connected learner the run is over (learners in other
// processes end here); then seals the run, once the learners that evaluate
// the model (atoll.Evaluator) reported their figure of the final model, or
// their time is up (SyncerCore::final_evaluations_awaited).
void finish(SyncerActor* self, const std::string& why) {
  auto& st = self->state;
  st.finished = true;
  st.core->on_finished(self->clock().now());
  log_info(tag(self) + why);
  const Packet done{encode_message(Done{why})};
  for (uint32_t id = 0; id < st.learners.size(); ++id)
    if (st.learners[id]) send_packet(self, id, st.learners[id], done);
  const auto awaited = st.core->final_evaluations_awaited();
  if (awaited.empty()) return seal(self);
  std::string ids;
  for (uint32_t l : awaited) ids += (ids.empty() ? "" : ", ") + std::to_string(l);
  log_info(tag(self) + "waiting up to " + std::to_string(static_cast<int>(kFinalEvaluationSeconds)) +
           " s for the evaluation of the final model by learner(s) " + ids);
  publish(self);
  self->delayed_send(self, timespan_of(kFinalEvaluationSeconds), seal_atom_v);
}

// The run's records are final: the last sample, then the latch.
void seal(SyncerActor* self) {
  auto& st = self->state;
  if (st.sealed) return;
  st.sealed = true;
  if (const auto awaited = st.core->final_evaluations_awaited(); !awaited.empty())
    log_warn(tag(self) + "no evaluation of the final model from " + std::to_string(awaited.size()) +
             " learner(s) in time: the report keeps the newest one made during the run");
  publish(self);
  st.args.records->seal_shard(st.args.shard, st.args.shards_here);
}

// The run ends: first every fragment's last round (outer.final_flush), then
// finish() once the core says the model is final (carry_out checks).
void end_run(SyncerActor* self, const std::string& why) {
  auto& st = self->state;
  if (st.finished || st.core->flushing()) return;
  st.ending = why;
  SyncerEffects fx;
  st.core->begin_flush(self->clock().now(), fx);
  carry_out(self, fx);
}

// A shard held apart from the others (atoll syncer --shard i/S): its process
// never holds the whole model.
bool held_apart(const SyncerArgs& args) { return args.shards_here < static_cast<size_t>(args.topology.syncer.shards); }

// The model at the curve's next planned point (RunOptions::curve_points). A
// shard held apart writes its part beside its checkpoints instead, durable
// across its restarts, for `atoll assemble` to evaluate.
void take_point(SyncerActor* self, uint64_t tokens, double elapsed) {
  auto& st = self->state;
  auto& snapshots = st.args.records->snapshots;
  if (!held_apart(st.args)) {
    snapshots.add({elapsed, tokens, st.core->parameters()}, st.args.shard);
    return;
  }
  const auto point = static_cast<uint32_t>(snapshots.count(st.args.shard));
  snapshots.add({elapsed, tokens, {}}, st.args.shard);
  caf::actor cp = st.args.use_checkpointer ? st.args.directory->get(Directory::checkpointer_name(st.args.shard))
                                           : caf::actor{};
  if (cp && !st.args.topology.checkpoint.dir.empty()) self->send(cp, point_atom_v, point, checkpoint_packet(self));
  else log_warn(tag(self) + "point " + std::to_string(point) + " of the curve is not written: no checkpointer");
}

// Keeps the curve's points (RunOptions::curve_points) and ends the run at its token budget.
// The budget is judged by one count: a shard held apart from shard 0 (atoll
// syncer --shard i/S) leaves it to shard 0, whose end its learners pass on
// (a restarted shard's own count lags, and would miss the end).
void check_budget(SyncerActor* self) {
  auto& st = self->state;
  auto& snapshots = st.args.records->snapshots;
  const uint64_t tokens = st.core->total_tokens();
  const double elapsed = st.core->elapsed(self->clock().now());
  if (!st.core->flushing() && snapshots.due(tokens, elapsed, st.args.shard)) take_point(self, tokens, elapsed);
  const uint64_t budget = st.args.topology.tokens;
  const bool judges = st.args.shard == 0 || !held_apart(st.args);
  if (st.finished || !judges || budget == 0 || tokens < budget) return;
  end_run(self, "token budget of " + std::to_string(budget) + " reached");
}

// The core's name for a sender: its process and its actor id. Actors of
// this process's nodes are numbered as first seen; a packet that came
// through the door names the learner's process as its Hello proved it.
Sender sender_of(SyncerActor* self, const caf::actor& sender, std::optional<uint64_t> remote) {
  if (!sender) return {};
  if (remote) return Sender{kRemoteProcess | *remote, sender.id(), true};
  auto& processes = self->state.processes;
  const auto [it, added] = processes.try_emplace(sender.node(), processes.size() + 1);
  return Sender{it->second, sender.id()};
}

void on_packet(SyncerActor* self, Packet& p, std::optional<uint64_t> remote) {
  auto& st = self->state;
  CpuMeter meter(st.cpu_seconds);
  st.core->count_bytes(p.bytes.size(), 0);
  const auto now = self->clock().now();
  auto sender = caf::actor_cast<caf::actor>(self->current_sender());
  const auto known = st.ids.find(sender.address());
  std::optional<uint32_t> sender_id;
  if (known != st.ids.end()) sender_id = known->second;
  SyncerEffects fx;
  auto msg = decode_message(p.bytes, st.core->max_message_bytes());
  if (!msg.ok()) {
    st.core->on_malformed(sender_id, msg.status(), fx);
    return carry_out(self, fx, &sender, sender_id.value_or(0));
  }
  if (auto* r = std::get_if<Register>(&*msg)) {
    if (st.finished) {  // late (reconnecting) learners learn it too
      send_packet(self, r->learner, sender, Packet{encode_message(Done{"the run is over"})});
      return;
    }
    const Admission a = st.core->on_register(*r, sender_of(self, sender, remote), now, fx);
    if (a.accepted()) {  // this actor is learner r->learner from now on (its welcome may come later)
      auto& slot = st.learners[r->learner];
      if (slot != sender) {
        if (slot) {
          self->demonitor(slot);
          st.ids.erase(slot.address());
        }
        slot = sender;
        st.ids[sender.address()] = r->learner;
        self->monitor(sender);
      }
    }
    carry_out(self, fx, &sender, r->learner);
    return check_budget(self);
  }
  // Every other message names a learner: it must come from that learner's actor.
  uint32_t claimed = 0;
  if (auto* q = std::get_if<Push>(&*msg)) claimed = q->learner;
  else if (auto* g = std::get_if<Progress>(&*msg)) claimed = g->learner;
  else if (auto* e = std::get_if<Evaluation>(&*msg)) claimed = e->learner;
  else if (auto* lv = std::get_if<Leave>(&*msg)) claimed = lv->learner;
  else if (std::holds_alternative<Moments>(*msg)) claimed = sender_id.value_or(kNoLearner);
  else if (auto* d = std::get_if<Done>(&*msg); d && st.args.topology.syncer.shards > 1) {
    // Another shard ended the run, as a learner passes on: also one not (yet) registered here (its
    // Register may be on its way, or too large to get through), since the door proved the token.
    if (!st.finished && !st.core->flushing())
      log_info(tag(self) + (sender_id ? "learner " + std::to_string(*sender_id) : std::string("a learner")) + " says " +
               d->reason + "; ending it here too");
    return end_run(self, d->reason);
  } else {
    st.core->on_malformed(sender_id, Status::invalid_argument(std::string("a learner may not send ") + message_name(*msg)), fx);
    return carry_out(self, fx, &sender, sender_id.value_or(0));
  }
  if (!sender_id || *sender_id != claimed) {
    st.core->refuse(claimed, RejectReason::kUnknownLearner, kNoFragment,
                    "learner " + std::to_string(claimed) + " is not registered from this actor", fx);
    return carry_out(self, fx, &sender, claimed);
  }
  if (auto* q = std::get_if<Push>(&*msg)) st.core->on_push(*q, now, fx);
  else if (auto* mo = std::get_if<Moments>(&*msg)) st.core->on_moments(claimed, *mo, now, fx);
  else if (auto* ev = std::get_if<Evaluation>(&*msg)) st.core->on_evaluation(*ev, now, fx);
  else if (auto* lv = std::get_if<Leave>(&*msg)) st.core->on_leave(*lv, now, fx);
  else {
    const auto& progress = std::get<Progress>(*msg);
    // A learner process on this machine is the run's own, not a load on it.
    if (remote && progress.machine != 0 && progress.machine == machine_id())
      st.args.records->learner_cpu.note(*remote, progress.process_cpu_seconds);
    st.core->on_progress(progress, now, fx);
  }
  carry_out(self, fx);
  maybe_checkpoint(self);
  check_budget(self);
}

// A free open slot for a learner without an id (atoll/syncer_core.h,
// "Membership"): a Welcome that names it, with the topology and the model's
// layout (what a topology request gets), or a Reject saying why not.
Packet claim_slot(SyncerActor* self, uint64_t process) {
  auto& st = self->state;
  if (st.finished) return Packet{encode_message(Reject{RejectReason::kFull, kNoFragment, "the run is over"})};
  SyncerEffects fx;
  const Admission a = st.core->claim(process, self->clock().now(), fx);
  carry_out(self, fx);
  if (a.refused()) return Packet{encode_message(Reject{a.reason, kNoFragment, a.detail})};
  Welcome w;
  w.learner = a.learner;
  w.topology = st.args.topology;
  w.layout = shapes_of(st.core->layout());
  return Packet{encode_message(w)};
}

caf::behavior running(SyncerActor* self) {
  auto& state = self->state;
  const std::string name = Directory::syncer_name(state.args.shard);
  state.args.directory->put(name, caf::actor_cast<caf::actor>(self));
  self->attach_functor([dir = state.args.directory, name, addr = self->address()] { dir->erase(name, addr); });
  state.checkpoint_at = self->clock().now();
  if (state.args.tick_seconds > 0) self->send(self, tick_atom_v);
  return {
      [self](Packet& p) { on_packet(self, p, std::nullopt); },
      [self](Packet& p, uint64_t process) { on_packet(self, p, process); },
      [self](claim_atom) -> Packet {  // from an actor of this process (a learner supervisor)
        const auto asker = caf::actor_cast<caf::actor>(self->current_sender());
        return claim_slot(self, sender_of(self, asker, std::nullopt).process);
      },
      [self](claim_atom, uint64_t process) -> Packet {  // from the gateway, for a learner process
        return claim_slot(self, kRemoteProcess | process);
      },
      [self](timer_atom, uint32_t kind, uint32_t id, uint64_t round) {
        CpuMeter meter(self->state.cpu_seconds);
        SyncerEffects fx;
        const auto timer_kind = static_cast<SyncerEffects::TimerKind>(kind);
        self->state.core->on_timer({timer_kind, id, round, 0.0}, self->clock().now(), fx);
        carry_out(self, fx);
        if (timer_kind == SyncerEffects::TimerKind::kGrace) maybe_checkpoint(self);
      },
      [self](end_atom, const std::string& why) { end_run(self, why); },  // Run::stop(), a signal, a time limit
      [self](seal_atom) {  // Run::wait() or the final evaluations' time: no more waiting
        if (!self->state.finished) finish(self, "the run was stopped");
        seal(self);
      },
      [self](tick_atom) {
        check_budget(self);  // a time-based curve, and a budget reached before a restart
        publish(self);  // kept current: a syncer restarted after a kill continues from it
        maybe_checkpoint(self);
        self->delayed_send(self, timespan_of(self->state.args.tick_seconds), tick_atom_v);
      },
      [self](save_atom) -> Packet {  // Run::checkpoint_now(): the checkpoint, for the caller to have written
        auto& st = self->state;
        if (!st.args.use_checkpointer || st.args.topology.checkpoint.dir.empty()) return Packet{};
        st.rounds_at_checkpoint = st.core->stats().rounds;
        st.checkpoint_at = self->clock().now();
        return checkpoint_packet(self);
      },
      [self](snapshot_atom) -> FinalModel {
        publish(self);
        const auto& core = *self->state.core;
        FinalModel model{core.parameters(), {}};
        for (uint32_t p = 0; p < core.fragments().size(); ++p) model.versions.push_back(core.version(p));
        return model;
      },
  };
}

// A syncer in a new process goes on with the run's figures its restored
// checkpoint carries (SyncerCore::continue_from).
void go_on_with(SyncerActor* self, std::span<const uint8_t> encoded) {
  auto figures = decode_figures(encoded);
  if (!figures.ok()) {
    log_warn(tag(self) + "the checkpoint's figures of the run are not read (counting from zero): " +
             figures.status().to_string());
    return;
  }
  log_info(tag(self) + "continuing the run's figures from its checkpoint (" + std::to_string(figures->stats.rounds) +
           " rounds, " + std::to_string(figures->tokens) + " tokens, " +
           std::to_string(static_cast<int>(figures->seconds)) + " s since the run started)");
  // The curve's points the checkpoint's count had passed were written before
  // it (the checkpointer takes them in order); later ones are taken again
  // when this process passes them.
  auto& st = self->state;
  auto& snapshots = st.args.records->snapshots;
  while (held_apart(st.args) && snapshots.due(figures->tokens, figures->seconds, st.args.shard))
    snapshots.add({figures->seconds, figures->tokens, {}}, st.args.shard);
  st.core->continue_from(std::move(*figures), self->clock().now(), unix_ms());
}

caf::behavior syncer(SyncerActor* self, SyncerArgs args) {
  auto& state = self->state;
  state.args = std::move(args);
  auto core = SyncerCore::create(state.args.topology, self->clock().now(), state.args.run_started, state.args.shard);
  if (!core.ok()) {
    log_error(tag(self) + core.status().to_string());
    self->quit(caf::make_error(caf::sec::invalid_argument, core.status().to_string()));
    return {};
  }
  state.core = std::move(*core);
  if (!state.args.cluster_token.empty()) state.core->require_token(state.args.cluster_token);
  state.learners.resize(learner_slots(state.args.topology));
  if (const auto previous = state.args.records->shard(state.args.shard)) {
    state.core->continue_from(previous->stats, previous->learners,
                              previous->start == SteadyTime{} ? std::nullopt : std::optional(previous->start));
    state.continued = true;
    log_info(tag(self) + "continuing the statistics of the syncer before it (" + std::to_string(previous->stats.rounds) +
             " rounds)");
  }
  self->set_down_handler([self](const caf::down_msg& dm) {
    auto& st = self->state;
    const auto it = st.ids.find(dm.source);
    if (it == st.ids.end()) return;
    const uint32_t id = it->second;
    st.ids.erase(it);
    st.learners[id] = nullptr;
    SyncerEffects fx;
    st.core->on_learner_down(id, self->clock().now(), fx);
    carry_out(self, fx);
  });
  caf::actor cp = state.args.use_checkpointer ? state.args.directory->get(Directory::checkpointer_name(state.args.shard))
                                              : caf::actor{};
  auto& readiness = state.args.records->readiness;
  if (!cp || state.args.topology.checkpoint.dir.empty()) {
    readiness.set_syncer_serving(true);
    return running(self);
  }
  // Restore before serving anyone: other messages wait until this answer.
  readiness.set_syncer_serving(false);
  self->request(cp, load_timeout(*state.core), load_atom_v, state.core->layout().fingerprint())
      .await(
          [self](Packet& file) {
            self->state.args.records->readiness.set_syncer_serving(true);
            if (file.bytes.empty()) return;
            auto saved = decode_checkpoint(file.bytes);
            Status s = saved.ok() ? self->state.core->restore(*saved, self->clock().now()) : saved.status();
            if (!s.ok()) {
              log_warn(tag(self) + "checkpoint not restored: " + s.to_string());
              return;
            }
            log_info(tag(self) + "restored checkpoint of round " + std::to_string(saved->rounds));
            if (!self->state.continued && !saved->figures.empty()) go_on_with(self, saved->figures);
          },
          [self](caf::error& e) {
            self->state.args.records->readiness.set_syncer_serving(true);
            log_warn(tag(self) + "no checkpoint restored: " + to_string(e));
          });
  return running(self);
}

}  // namespace

caf::actor spawn_syncer(caf::actor_system& sys, SyncerArgs args) { return sys.spawn(syncer, std::move(args)); }

}  // namespace atl
