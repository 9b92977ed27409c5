// Supervisors.
//
// A supervisor monitors its children (a link would not do: exit_reason::kill
// cannot be trapped), restarts a failed child after a backoff, and gives up
// on a child that fails too often: RestartPolicy (atoll/restart_policy.h)
// decides both. A child given up is logged (the run's event log) and left
// stopped; the process goes on. If the supervisor itself stops, so do its
// children, even when it is killed.
//
// A learner supervisor of the syncer's process also takes newcomers (open
// membership, docs/design.md section 6): (join, speed, batch) claims a free
// slot from the syncer and starts a learner in it; (retire, id) stops
// restarting a learner (a preempted one is gone with its machine).
#include <caf/all.hpp>

#include <chrono>
#include <set>

#include "actors.h"
#include "timespan.h"
#include "atoll/atoms.h"
#include "atoll/log.h"
#include "atoll/messages.h"
#include "atoll/restart_policy.h"

namespace atl {
namespace {

struct SupervisorState {
  static inline const char* name = "supervisor";
  SupervisorSpec spec;
  std::vector<caf::actor> children;
  std::vector<uint64_t> incarnations;
  std::vector<RestartPolicy> policies;  // per child: backoff and give-up (atoll/restart_policy.h)
  std::vector<bool> gave_up;
  std::vector<bool> retired;                      // not restarted whatever its end
  std::set<caf::actor_addr> stopped_on_purpose;  // rest_for_one: siblings we stopped
  std::set<size_t> pending;                      // restart scheduled, not yet done
  // Shared with the attach functor, which must not touch the state.
  std::shared_ptr<std::vector<caf::weak_actor_ptr>> weak_children;
};
using SupervisorActor = caf::stateful_actor<SupervisorState>;

void start_child(SupervisorActor* self, size_t i) {
  auto& st = self->state;
  ++st.incarnations[i];
  caf::actor child = st.spec.children[i].start(self->system(), st.incarnations[i]);
  st.children[i] = child;
  (*st.weak_children)[i] = caf::actor_cast<caf::weak_actor_ptr>(child);
  self->monitor(child);
}

// Starts child k and, for rest_for_one, the stopped children after it, up to
// the first one still alive (it starts again once its down message arrives).
void start_from(SupervisorActor* self, size_t k) {
  auto& st = self->state;
  start_child(self, k);
  if (st.spec.strategy != SupervisorSpec::Strategy::kRestForOne) return;
  for (size_t j = k + 1; j < st.children.size(); ++j) {
    if (st.children[j]) break;
    if (!st.gave_up[j]) start_child(self, j);
  }
}

// A child's restart policy: fresh, with the supervisor's limits.
RestartPolicy policy_of(const SupervisorSpec& spec) {
  return RestartPolicy({spec.max_restarts, spec.window_seconds, spec.backoff_initial, spec.backoff_max});
}

// Starts learner `id` as a child (again, if a learner held its slot before).
void add_learner(SupervisorActor* self, uint32_t id, const LearnerSpec& spec) {
  auto& st = self->state;
  ChildSpec child = st.spec.make_learner(id, spec);
  size_t i = 0;
  while (i < st.spec.children.size() && !(st.spec.children[i].child == child.child)) ++i;
  if (i == st.spec.children.size()) {
    st.spec.children.push_back(std::move(child));
    st.children.emplace_back();
    st.incarnations.push_back(0);
    st.policies.push_back(policy_of(st.spec));
    st.gave_up.push_back(false);
    st.retired.push_back(false);
    st.weak_children->emplace_back();
  } else {
    st.spec.children[i] = std::move(child);
    st.gave_up[i] = st.retired[i] = false;
    st.incarnations[i] = 0;  // a newcomer: its first start
    st.policies[i] = policy_of(st.spec);
  }
  start_child(self, i);
  log_info(st.spec.name + ": " + st.spec.children[i].child.name() + " joins the run");
}

// Claims a free open slot from the syncer, then starts a learner in it;
// answers its id, or the syncer's reason.
caf::result<uint32_t> join_learner(SupervisorActor* self, LearnerSpec spec) {
  auto& st = self->state;
  const caf::actor syncer = st.spec.directory ? st.spec.directory->get(Directory::kSyncer) : caf::actor{};
  if (!st.spec.make_learner)
    return caf::make_error(caf::sec::runtime_error, "no syncer in this process to join: start the learner with "
                                                    "`atoll learner --join HOST:PORT` instead");
  if (!syncer)  // not up yet, or restarting: the caller may ask again
    return caf::make_error(caf::sec::request_receiver_down, "the syncer is not running now");
  auto promise = self->make_response_promise<uint32_t>();
  self->request(syncer, std::chrono::seconds(5), claim_atom_v)
      .then(
          [self, promise, spec](Packet& answer) mutable {
            auto msg = decode_message(answer.bytes);
            if (msg.ok())
              if (const auto* w = std::get_if<Welcome>(&*msg)) {
                add_learner(self, w->learner, spec);
                promise.deliver(w->learner);
                return;
              }
            const auto* r = msg.ok() ? std::get_if<Reject>(&*msg) : nullptr;
            promise.deliver(caf::make_error(caf::sec::runtime_error,
                                            r ? std::string("refused (") + reject_reason_name(r->reason) + "): " + r->detail
                                              : std::string("the syncer's answer did not decode")));
          },
          [promise](caf::error& e) mutable { promise.deliver(std::move(e)); });
  return promise;
}

caf::behavior supervisor(SupervisorActor* self, SupervisorSpec spec) {
  auto& state = self->state;
  state.spec = std::move(spec);
  const size_t n = state.spec.children.size();
  state.children.resize(n);
  state.incarnations.assign(n, 0);
  state.policies.assign(n, policy_of(state.spec));
  state.gave_up.assign(n, false);
  state.retired.assign(n, false);
  state.weak_children = std::make_shared<std::vector<caf::weak_actor_ptr>>(n);
  self->attach_functor([weak = state.weak_children](const caf::error& reason) {
    for (auto& w : *weak)
      if (w) caf::anon_send_exit(w, reason == caf::exit_reason::kill ? caf::exit_reason::kill
                                                                       : caf::exit_reason::user_shutdown);
  });
  self->set_exit_handler([self](caf::exit_msg& msg) {
    for (auto& c : self->state.children)
      if (c) self->send_exit(c, msg.reason);
    self->quit(msg.reason);
  });
  self->set_down_handler([self](const caf::down_msg& dm) {
    auto& st = self->state;
    size_t i = 0;
    while (i < st.children.size() && st.children[i].address() != dm.source) ++i;
    if (i == st.children.size()) return;
    st.children[i] = nullptr;
    if (st.retired[i]) {
      log_info(st.spec.name + ": " + st.spec.children[i].child.name() + " is gone (" + to_string(dm.reason) +
               "); retired, not restarted");
      return;
    }
    if (dm.reason == caf::exit_reason::user_shutdown || dm.reason == caf::exit_reason::normal) {
      log_info(st.spec.name + ": " + st.spec.children[i].child.name() + " stopped");
      return;  // an orderly stop, not a failure
    }
    if (st.stopped_on_purpose.erase(dm.source) > 0) {
      // A sibling stopped by rest_for_one: start it again now if every child
      // before it is back already (the restart may have come first).
      const bool earlier_pending = !st.pending.empty() && *st.pending.begin() < i;
      bool earlier_running = true;
      for (size_t j = 0; j < i; ++j) earlier_running &= st.children[j] != nullptr || st.gave_up[j];
      if (!earlier_pending && earlier_running && !st.gave_up[i]) start_from(self, i);
      return;
    }
    const Child& child = st.spec.children[i].child;
    const std::string name = child.name();
    log_warn(st.spec.name + ": " + name + " failed: " + to_string(dm.reason));
    const double now = std::chrono::duration<double>(self->clock().now().time_since_epoch()).count();
    const auto delay = st.policies[i].on_failure(now);
    if (!delay) {
      st.gave_up[i] = true;
      log_error(st.spec.name + ": gave up on " + name + " after more than " + std::to_string(st.spec.max_restarts) +
                " failures within " + std::to_string(st.spec.window_seconds) + " s");
      if (st.spec.records) st.spec.records->log->append(event::GaveUp{child});
      return;
    }
    if (st.spec.strategy == SupervisorSpec::Strategy::kRestForOne)
      for (size_t j = i + 1; j < st.children.size(); ++j)
        if (st.children[j]) {
          st.stopped_on_purpose.insert(st.children[j].address());
          self->send_exit(st.children[j], caf::exit_reason::kill);
        }
    double backoff = *delay;
    if (st.spec.restart_hold) backoff = std::max(backoff, st.spec.restart_hold(child));  // a fault's recovery time
    st.pending.insert(i);
    self->delayed_send(self, timespan_of(backoff),
                       restart_atom_v, static_cast<uint64_t>(i));
  });
  if (state.spec.directory) {
    state.spec.directory->put(state.spec.name, caf::actor_cast<caf::actor>(self));
    self->attach_functor([dir = state.spec.directory, name = state.spec.name, addr = self->address()] {
      dir->erase(name, addr);
    });
  }
  for (size_t i = 0; i < n; ++i) start_child(self, i);
  return caf::message_handler{
      [self](join_atom, double speed, int32_t batch) -> caf::result<uint32_t> {
        return join_learner(self, LearnerSpec{speed, batch});
      },
      [self](retire_atom, uint32_t learner) {
        auto& st = self->state;
        for (size_t i = 0; i < st.children.size(); ++i)
          if (st.spec.children[i].child == Child::of_learner(learner)) st.retired[i] = true;
      },
  }.or_else(caf::message_handler{
      [self](restart_atom, uint64_t index) {
        auto& st = self->state;
        const auto i = static_cast<size_t>(index);
        st.pending.erase(i);
        if (i >= st.children.size() || st.gave_up[i] || st.children[i]) return;
        start_from(self, i);
        if (st.spec.records)
          st.spec.records->log->append(event::Restarted{st.spec.children[i].child, st.incarnations[i]});
        log_info(st.spec.name + ": restarted " + st.spec.children[i].child.name() + " (incarnation " +
                 std::to_string(st.incarnations[i]) + ")");
      },
  });
}

}  // namespace

caf::actor spawn_supervisor(caf::actor_system& sys, SupervisorSpec spec) {
  return sys.spawn(supervisor, std::move(spec));
}

}  // namespace atl
