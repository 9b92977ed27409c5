// The chaos injector: executes a fault plan against a running topology.
#include "injector.h"

#include <caf/all.hpp>

#include "atoll/atoms.h"
#include "atoll/log.h"
#include "atoll/rng.h"

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
  std::vector<Rng> rngs;    // per learner, for random failures
};
using InjectorActor = caf::stateful_actor<InjectorState>;

caf::timespan span(double seconds) {
  return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(std::max(0.0, seconds)));
}

double since_start(const InjectorActor* self) {
  return std::chrono::duration<double>(Clock::now() - self->state.context.started).count();
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
    case FaultKind::kKillSyncer:
    case FaultKind::kKillCheckpointer: {
      const char* name = f.kind == FaultKind::kKillSyncer ? Directory::kSyncer : Directory::kCheckpointer;
      caf::actor target = dir.get(name);
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
  const int learners = static_cast<int>(st.context.topology.learners.size());
  std::vector<int> targets;
  if (!targets_learners(f.kind) || is_message_fault(f.kind)) targets.push_back(f.learner);  // -1 = every link
  else if (f.learner >= 0) targets.push_back(f.learner);
  else for (int m = 0; m < learners; ++m) targets.push_back(m);
  for (int m : targets) {
    const bool hit = inject_one(self, f, m);
    event::Injected e;
    e.kind = f.kind;
    e.hit = hit;
    e.learner = targets_learners(f.kind) ? m : -1;
    e.recover_after = f.recover_after;
    e.duration = f.duration;
    e.factor = f.factor;
    e.seconds = f.seconds;
    e.probability = f.probability;
    e.plan = f.where;
    st.context.records->log->append(std::move(e));
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
    if (plan.faults[i].at >= now) self->delayed_send(self, span(plan.faults[i].at - now), fault_atom_v, uint64_t{i});
  }
  state.fired.assign(plan.faults.size(), false);
  if (steps) self->send(self, poll_atom_v);
  if (plan.random) {
    const size_t learners = state.context.topology.learners.size();
    for (uint32_t m = 0; m < learners; ++m) {
      state.rngs.emplace_back(Rng::derive(plan.seed, 0xfa11 + m));
      double t = state.rngs[m].exponential(plan.random->mtbf_seconds);
      // A restarted injector draws the same schedule and skips what has passed.
      while (t < now) t += recovery_of(self, m) + state.rngs[m].exponential(plan.random->mtbf_seconds);
      self->delayed_send(self, span(t - now), random_fault_atom_v, m);
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
        self->delayed_send(self, span(f.recover_after + st.rngs[m].exponential(r.mtbf_seconds)), random_fault_atom_v, m);
      },
  };
}

}  // namespace

caf::actor spawn_injector(caf::actor_system& sys, const RunContext& context, InjectorArgs args) {
  return sys.spawn(injector, context, std::move(args));
}

}  // namespace atl
