// SyncerCore's membership (docs/design.md section 6, "Membership"): claims
// of open slots, orderly departures, and the holds on a failed member's slot.
//
// The rule, as atoll/syncer_core.h states it: slots below the topology's
// [[learners]] count are fixed and members from the start; the others are
// open, claimed by learners without an id and held by one member at a time.
// A newcomer counts toward the quorum cap only once qualified (H steps on a
// version it adopted); a leaver is pulled no more, its last answers make
// their fragments due, and it is told Done once they are settled.
#include <algorithm>

#include "atoll/syncer_core.h"
#include "round_protocol.h"
#include "syncer_state.h"

namespace atl {
namespace {

SteadyTime after(SteadyTime now, double seconds) {
  return now + std::chrono::duration_cast<SteadyTime::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

Admission SyncerCore::claim(uint64_t process, SteadyTime now, SyncerEffects& fx) {
  expire_reservations(now, fx);
  const auto slots = static_cast<uint32_t>(s_->learners.size());
  const std::string limit = "membership.max_learners = " + std::to_string(slots) + ", " +
                            std::to_string(s_->fixed) + " of them [[learners]] started by id";
  if (flushing()) return Admission::refuse(RejectReason::kFull, "the run is ending: it takes no new learners");
  if (s_->fixed == slots)
    return Admission::refuse(RejectReason::kFull, "this run has no open slots (" + limit + ")");
  for (uint32_t m = s_->fixed; m < slots; ++m) {
    LearnerRecord& l = s_->learners[m];
    // Free: nobody connected or bound to it (a registration whose welcome
    // waits for a peer's moments is bound), not a member, not reserved.
    if (l.connected || l.sender.actor != 0 || l.member || l.reserved_for != 0) continue;
    l.reserved_for = process;
    l.reserved_until = after(now, kLeaseSeconds);
    fx.notes.push_back("open slot " + std::to_string(m) + " claimed");
    Admission a{Admission::Verdict::kAccept, {}, {}, m};
    return a;
  }
  return Admission::refuse(RejectReason::kFull,
                           "all " + std::to_string(slots - s_->fixed) + " open slots are taken (" + limit + ")");
}

void SyncerCore::on_leave(const Leave& m, SteadyTime now, SyncerEffects& fx) {
  if (!current(m.learner, m.incarnation)) return;  // an old incarnation's last words
  LearnerRecord& l = s_->learners[m.learner];
  if (l.leaving != LearnerRecord::Leaving::kNo) return;  // said twice
  l.leaving = LearnerRecord::Leaving::kMerging;
  ++s_->merging;
  depart(m.learner, now, true, m.reason.empty() ? "left" : m.reason, fx);
  settle_departures(fx);
}

double SyncerCore::allocated_seconds(SteadyTime now) const {
  const double t = s_->elapsed(now);
  double total = 0.0;
  for (const LearnerRecord& l : s_->learners) total += l.member_seconds + (l.member ? std::max(0.0, t - l.member_since) : 0.0);
  return total;
}

void SyncerCore::depart(uint32_t learner, SteadyTime now, bool orderly, std::string reason, SyncerEffects& fx) {
  LearnerRecord& l = s_->learners[learner];
  if (!l.member) return;
  l.member = false;
  l.member_seconds += std::max(0.0, s_->elapsed(now) - l.member_since);
  l.qualified = false;
  l.reserved_for = 0;
  l.reserved_until.reset();
  l.down_at.reset();  // not waited for as a failed learner any more
  if (orderly) ++l.departures;
  fx.notes.push_back("learner " + std::to_string(learner) + (orderly ? " departs: " : " is released: ") + reason);
  fx.events.push_back(event::Departed{learner, l.incarnation, orderly, std::move(reason)});
  rounds_->on_departure(learner, now, fx);
}

void SyncerCore::expire_reservations(SteadyTime now, SyncerEffects& fx) {
  for (uint32_t m = s_->fixed; m < s_->learners.size(); ++m) {
    LearnerRecord& l = s_->learners[m];
    if (l.connected || l.reserved_for == 0 || !l.reserved_until || *l.reserved_until > now) continue;
    if (l.member) {
      depart(m, now, false, "it failed and did not come back within " + std::to_string(int(kHoldSeconds)) + " s", fx);
    } else {
      fx.notes.push_back("the claim of open slot " + std::to_string(m) + " lapsed: no learner registered in time");
      l.reserved_for = 0;
      l.reserved_until.reset();
    }
  }
}

void SyncerCore::settle_departures(SyncerEffects& fx) {
  if (s_->merging == 0) return;
  for (uint32_t m = 0; m < s_->learners.size(); ++m) {
    LearnerRecord& l = s_->learners[m];
    if (l.leaving != LearnerRecord::Leaving::kMerging || rounds_->holds_answers_of(m)) continue;
    l.leaving = LearnerRecord::Leaving::kDone;
    --s_->merging;
    fx.sends.push_back({m, Done{"departed: its last progress is settled"}});
  }
}

void SyncerCore::qualify(uint32_t learner) {
  LearnerRecord& l = s_->learners[learner];
  if (l.qualified || !s_->open_slot(learner)) return;
  for (const FragmentProgress& p : l.progress)
    if (p.steps >= static_cast<uint64_t>(sync_interval(s_->topology.outer, p.version))) {
      l.qualified = true;
      return;
    }
}

}  // namespace atl
