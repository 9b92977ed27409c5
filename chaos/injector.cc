// The chaos injector: executes a fault plan against a running topology.
#include "injector.h"

#include <caf/all.hpp>

#include "atoll/atoms.h"
#include "atoll/log.h"
#include "atoll/rng.h"
#include "timespan.h"

namespace atl {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
constexpr auto kPollPeriod = 20ms;

struct InjectorState {
  static inline const char* name = "chaos injector";
  InjectorArgs args;
  RunContext context;
  std::vector<bool> fired;  // step-triggered faults done
  std::vector<Rng> rngs;    // per learner slot, for random failures (preempt: the open slots')
  std::map<uint32_t, caf::actor_addr> preempted;  // learner id -> the actor to kill when its grace ends
  std::map<uint32_t, LearnerSpec> spot_specs;     // open slot -> the spec its newcomer joined with
};
using InjectorActor = caf::stateful_actor<InjectorState>;

double since_start(const InjectorActor* self) {
  return std::chrono::duration<double>(Clock::now() - self->state.context.started).count();
}

event::Injected injected(const Fault& f, bool hit, int64_t learner) {
  event::Injected e;
  e.kind = f.kind;
  e.hit = hit;
  e.learner = learner;
  e.recover_after = f.recover_after;
  e.duration = f.duration;
  e.factor = f.factor;
  e.seconds = f.seconds;
  e.probability = f.probability;
  e.speed = f.speed;
  e.batch_size = static_cast<uint32_t>(f.batch_size);
  e.shard = f.shard;
  e.plan = f.where;
  return e;
}

// A newcomer joins: the learner supervisor claims a free open slot from the
// syncer and starts it there; the injection is logged once the answer is in.
void join_one(InjectorActor* self, const Fault& f) {
  auto& st = self->state;
  const std::string supervisor = Child{Child::Role::kLearnerSupervisor, 0, {}}.name();
  caf::actor learners = st.context.directory->get(supervisor);
  const LearnerSpec spec{f.speed > 0 ? f.speed : 1.0,
                         f.batch_size > 0 ? f.batch_size : default_spec(st.context.topology, ~0u).batch_size};
  if (!learners) {
    st.context.records->log->append(injected(f, false, -1));
    log_info("chaos: join (no learner supervisor)");
    return;
  }
  self->request(learners, std::chrono::seconds(10), join_atom_v, spec.speed, static_cast<int32_t>(spec.batch_size))
      .then(
          [self, f, spec](uint32_t id) {
            self->state.spot_specs[id] = spec;
            self->state.context.records->log->append(injected(f, true, id));
            log_info("chaos: join, learner " + std::to_string(id));
          },
          [self, f](caf::error& e) {
            self->state.context.records->log->append(injected(f, false, -1));
            log_info("chaos: join refused (" + to_string(e) + ")");
          });
}

// A preemption: the learner is told to leave (its last progress may still
// be merged), is not restarted, and is killed when the grace is over if it
// has not gone by then.
bool preempt(InjectorActor* self, uint32_t learner, double grace) {
  auto& st = self->state;
  caf::actor target = st.context.directory->get(Directory::learner(learner));
  if (!target) return false;
  if (caf::actor learners = st.context.directory->get(Child{Child::Role::kLearnerSupervisor, 0, {}}.name()))
    caf::anon_send(learners, retire_atom_v, learner);
  caf::anon_send(target, leave_atom_v, std::string("preempted"), grace);
  st.preempted[learner] = target.address();
  self->delayed_send(self, timespan_of(grace), evict_atom_v, learner);
  return true;
}

bool inject_one(InjectorActor* self, const Fault& f, int learner) {
  auto& st = self->state;
  const auto now = Clock::now();
  const auto recover = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(f.recover_after));
  const auto& dir = *st.context.directory;
  switch (f.kind) {
    case FaultKind::kKill:
    case FaultKind::kCrash: {
      const std::string name = Directory::learner(static_cast<uint32_t>(learner));
      caf::actor target = dir.get(name);
      if (!target) return false;
      st.args.holds->hold(name, recover);
      if (f.kind == FaultKind::kKill) caf::anon_send_exit(target, caf::exit_reason::kill);
      else caf::anon_send(target, crash_atom_v);
      return true;
    }
    case FaultKind::kStall:
    case FaultKind::kSlow: {
      caf::actor target = dir.get(Directory::learner(static_cast<uint32_t>(learner)));
      if (!target) return false;
      if (f.kind == FaultKind::kStall) caf::anon_send(target, stall_atom_v, f.duration);
      else caf::anon_send(target, slow_atom_v, f.factor, f.duration);
      return true;
    }
    case FaultKind::kLeave: {
      caf::actor target = dir.get(Directory::learner(static_cast<uint32_t>(learner)));
      if (!target) return false;
      caf::anon_send(target, leave_atom_v, std::string("the chaos plan's leave"), 30.0);
      return true;
    }
    case FaultKind::kPreempt:
      return preempt(self, static_cast<uint32_t>(learner), f.duration);
    case FaultKind::kJoin:
      return false;  // join_one(), asynchronously
    case FaultKind::kKillSyncer:
    case FaultKind::kKillCheckpointer: {
      const std::string name = f.kind == FaultKind::kKillSyncer ? Directory::syncer_name(f.shard)
                                                                : Directory::checkpointer_name(f.shard);
      caf::actor target = dir.get(name);  // none: no such shard here, and the fault missed
      if (!target) return false;
      st.args.holds->hold(name, recover);
      caf::anon_send_exit(target, caf::exit_reason::kill);
      return true;
    }
    default: {  // message faults on the link(s) of `learner`
      static const std::map<FaultKind, LinkFaultKind> kLink = {
          {FaultKind::kPartition, LinkFaultKind::kDrop},       {FaultKind::kDelay, LinkFaultKind::kDelay},
          {FaultKind::kDuplicate, LinkFaultKind::kDuplicate}, {FaultKind::kReorder, LinkFaultKind::kReorder},
          {FaultKind::kCorrupt, LinkFaultKind::kCorrupt}};
      const auto until = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(f.duration));
      st.args.gate->add(LinkFault{kLink.at(f.kind), learner, now, until, f.seconds, f.probability});
      return true;
    }
  }
}

void inject(InjectorActor* self, const Fault& f) {
  auto& st = self->state;
  if (f.kind == FaultKind::kJoin) {
    for (int i = 0; i < f.count; ++i) join_one(self, f);
    return;
  }
  const int learners = static_cast<int>(st.context.topology.learners.size());
  std::vector<int> targets;
  if (!targets_learners(f.kind) || is_message_fault(f.kind)) targets.push_back(f.learner);  // -1 = every link
  else if (f.learner >= 0) targets.push_back(f.learner);
  else for (int m = 0; m < learners; ++m) targets.push_back(m);
  for (int m : targets) {
    const bool hit = inject_one(self, f, m);
    st.context.records->log->append(injected(f, hit, targets_learners(f.kind) ? m : -1));
    log_info(std::string("chaos: ") + fault_kind_name(f.kind) +
             (targets_learners(f.kind) ? (m < 0 ? " every link" : " learner " + std::to_string(m)) : std::string()) +
             (hit ? "" : " (target not running)"));
  }
}

double recovery_of(InjectorActor* self, uint32_t learner) {
  const auto& r = *self->state.args.plan.random;
  Rng& rng = self->state.rngs[learner];
  switch (r.recovery) {
    case RandomFaults::Recovery::kFixed: return r.recovery_seconds;
    case RandomFaults::Recovery::kUniform: return rng.uniform(r.recovery_min, r.recovery_max);
    case RandomFaults::Recovery::kExponential: return rng.exponential(r.recovery_seconds);
  }
  return r.recovery_seconds;
}

caf::behavior injector(InjectorActor* self, RunContext context, InjectorArgs args) {
  auto& state = self->state;
  state.context = std::move(context);
  state.args = std::move(args);
  const auto& plan = state.args.plan;
  const double now = since_start(self);
  bool steps = false;
  for (size_t i = 0; i < plan.faults.size(); ++i) {
    if (plan.faults[i].at < 0) {
      steps = true;
      continue;
    }
    if (plan.faults[i].at >= now) self->delayed_send(self, timespan_of(plan.faults[i].at - now), fault_atom_v, uint64_t{i});
  }
  state.fired.assign(plan.faults.size(), false);
  if (steps) self->send(self, poll_atom_v);
  if (plan.random) {
    // kill, crash: each fixed learner; preempt: each open slot's learner.
    const bool spot = plan.random->kind == FaultKind::kPreempt;
    const uint32_t first = spot ? static_cast<uint32_t>(state.context.topology.learners.size()) : 0;
    const uint32_t end = spot ? learner_slots(state.context.topology)
                              : static_cast<uint32_t>(state.context.topology.learners.size());
    state.rngs.resize(end, Rng(0));
    for (uint32_t m = first; m < end; ++m) {
      state.rngs[m] = Rng(Rng::derive(plan.seed, 0xfa11 + m));
      double t = state.rngs[m].exponential(plan.random->mtbf_seconds);
      // A restarted injector draws the same schedule and skips what has passed.
      while (t < now) t += recovery_of(self, m) + state.rngs[m].exponential(plan.random->mtbf_seconds);
      if (spot) self->delayed_send(self, timespan_of(t - now), spot_atom_v, m);
      else self->delayed_send(self, timespan_of(t - now), random_fault_atom_v, m);
    }
  }
  return {
      [self](fault_atom, uint64_t i) { inject(self, self->state.args.plan.faults[i]); },
      [self](poll_atom) {
        auto& st = self->state;
        const auto sample = st.context.records->syncer();
        bool pending = false;
        for (size_t i = 0; i < st.args.plan.faults.size(); ++i) {
          const Fault& f = st.args.plan.faults[i];
          if (f.at >= 0 || st.fired[i]) continue;
          const auto m = static_cast<size_t>(f.learner);
          if (sample && m < sample->learners.size() && sample->learners[m].steps >= f.at_step) {
            st.fired[i] = true;
            inject(self, f);
          } else {
            pending = true;
          }
        }
        if (pending) self->delayed_send(self, kPollPeriod, poll_atom_v);
      },
      [self](random_fault_atom, uint32_t m) {
        auto& st = self->state;
        const auto& r = *st.args.plan.random;
        Fault f;
        f.kind = r.kind;
        f.learner = static_cast<int>(m);
        f.recover_after = recovery_of(self, m);
        f.where = "random";
        inject(self, f);
        self->delayed_send(self, timespan_of(f.recover_after + st.rngs[m].exponential(r.mtbf_seconds)), random_fault_atom_v, m);
      },
      [self](spot_atom, uint32_t m) {  // spot capacity: the learner of open slot m is preempted ...
        auto& st = self->state;
        const auto& r = *st.args.plan.random;
        Fault f;
        f.kind = FaultKind::kPreempt;
        f.learner = static_cast<int>(m);
        f.duration = r.grace;
        f.recover_after = recovery_of(self, m);
        f.where = "random";
        const bool hit = preempt(self, m, r.grace);
        st.context.records->log->append(injected(f, hit, m));
        log_info("chaos: preempt learner " + std::to_string(m) + (hit ? "" : " (none there)"));
        // ... and comes back after the recovery as a newcomer with the same spec.
        if (hit) {
          const auto spec = st.spot_specs.count(m) ? st.spot_specs[m] : default_spec(st.context.topology, m);
          self->delayed_send(self, timespan_of(r.grace + f.recover_after), rejoin_atom_v, spec.speed,
                             static_cast<int32_t>(spec.batch_size));
        }
        self->delayed_send(self, timespan_of(r.grace + f.recover_after + st.rngs[m].exponential(r.mtbf_seconds)), spot_atom_v, m);
      },
      [self](rejoin_atom, double speed, int32_t batch) {
        Fault f;
        f.kind = FaultKind::kJoin;
        f.speed = speed;
        f.batch_size = batch;
        f.where = "random";
        join_one(self, f);
      },
      [self](evict_atom, uint32_t learner) {  // a preempted learner's grace is over
        auto& st = self->state;
        const auto it = st.preempted.find(learner);
        if (it == st.preempted.end()) return;
        caf::actor still = st.context.directory->get(Directory::learner(learner));
        if (still && still.address() == it->second) {
          log_info("chaos: learner " + std::to_string(learner) + " still there after its grace: killed");
          caf::anon_send_exit(still, caf::exit_reason::kill);
        }
        st.preempted.erase(it);
      },
  };
}

}  // namespace

caf::actor spawn_injector(caf::actor_system& sys, const RunContext& context, InjectorArgs args) {
  return sys.spawn(injector, context, std::move(args));
}

}  // namespace atl
