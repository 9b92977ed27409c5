#include "atoll/chaos_verdict.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "atoll/printf_string.h"

namespace atl {
namespace {

// A kill or crash that hit a learner: what re-integration bounds and alive time count.
const event::Injected* learner_failure(const TimedEvent& e) {
  const auto* x = std::get_if<event::Injected>(&e.event);
  return x && x->hit && (x->kind == FaultKind::kKill || x->kind == FaultKind::kCrash) ? x : nullptr;
}

// When `learner` was next registered at or after `from` (seconds), if ever.
std::optional<double> next_registration(const std::vector<TimedEvent>& events, int64_t learner, double from) {
  for (const auto& e : events) {
    const auto* r = std::get_if<event::Registered>(&e.event);
    if (r && int64_t{r->learner} == learner && e.t >= from) return e.t;
  }
  return std::nullopt;
}

}  // namespace

ChaosVerdict judge(const FaultPlan& plan, const Report& rep, std::span<const float> theta,
                   const std::vector<TimedEvent>& events) {
  const Invariants& inv = plan.invariants;
  ChaosVerdict v;
  if (inv.finite) {
    const auto bad = std::count_if(theta.begin(), theta.end(), [](float x) { return !std::isfinite(x); });
    if (theta.empty()) v.violations.push_back("finite: no global parameters at the end (the syncer was not there)");
    else if (bad) v.violations.push_back("finite: " + std::to_string(bad) + " global parameters are not finite");
    else if (!std::isfinite(rep.eval.loss)) v.violations.push_back("finite: the held-out loss is not finite");
  }
  // (A learner offered an older version, by a welcome overtaken by a newer
  // broadcast, keeps the newer one: that is counted, not an offence.)
  if (inv.versions_never_decrease && rep.version_decreases > 0)
    v.violations.push_back("versions_never_decrease: a global version went down " +
                           std::to_string(rep.version_decreases) + " times");
  if (inv.no_adopted_version_lost)
    for (size_t p = 0; p < rep.max_adopted_versions.size(); ++p) {
      const uint64_t final_v = p < rep.final_versions.size() ? rep.final_versions[p] : 0;
      if (final_v < rep.max_adopted_versions[p])
        v.violations.push_back("no_adopted_version_lost: fragment " + std::to_string(p) + " ends at version " +
                               std::to_string(final_v) + " but a learner adopted " +
                               std::to_string(rep.max_adopted_versions[p]));
    }
  // Every learner killed or crashed is welcomed back within the bound, counted
  // from the moment its recovery was allowed; the end of the run excuses only
  // those whose deadline it cut short. Its down time is until that welcome.
  double down = 0.0;
  for (const auto& e : events) {
    const event::Injected* x = learner_failure(e);
    if (!x) continue;
    const auto back = next_registration(events, x->learner, e.t);
    down += std::max(0.0, std::min(back.value_or(rep.wall_seconds), rep.wall_seconds) - e.t);
    if (inv.reintegrate_within_seconds <= 0) continue;
    const double deadline = e.t + x->recover_after + inv.reintegrate_within_seconds;
    if ((!back || *back > deadline) && deadline < rep.wall_seconds - 0.5)
      v.violations.push_back("reintegrate_within_seconds: learner " + std::to_string(x->learner) + " " +
                             fault_kind_name(x->kind) + "ed at " + printf_string("%.2f s", e.t) +
                             " was not welcomed back by " + printf_string("%.2f s", deadline));
  }
  // Of the learner time allocated to the run: members come and go (a
  // departure, a preemption, is no down time; a newcomer adds its time).
  const double allocated =
      rep.allocated_learner_seconds > 0 ? rep.allocated_learner_seconds : rep.learners * rep.wall_seconds;
  if (allocated > 0) v.alive_fraction = std::max(0.0, 1.0 - down / allocated);
  // Goodput is bounded by the share of learner time the learners were alive,
  // and how long a restart takes in wall time depends on what else the machine
  // runs: the bound is a share of the alive time, not of all of it.
  if (inv.min_goodput > 0 && !(rep.goodput >= inv.min_goodput * v.alive_fraction))
    v.violations.push_back(printf_string("min_goodput: %.3f < %.3f x alive %.3f = %.3f", rep.goodput, inv.min_goodput,
                                         v.alive_fraction, inv.min_goodput * v.alive_fraction));
  // A planned fault that never fired tested nothing: the run cannot pass on its account.
  for (const auto& f : plan.faults) {
    const bool fired = !f.where.empty() && std::any_of(events.begin(), events.end(), [&](const TimedEvent& e) {
      const auto* x = std::get_if<event::Injected>(&e.event);
      return x && x->plan == f.where;
    });
    if (fired) continue;
    const std::string why = std::string(fault_kind_name(f.kind)) + " of " + f.where + " was never injected: " +
                            (f.at >= 0 ? "planned at " + printf_string("%.2f s", f.at)
                                       : "its learner never reached step " + std::to_string(f.at_step)) +
                            ", the run ended at " + printf_string("%.2f s", rep.wall_seconds);
    if (inv.all_faults_injected) v.violations.push_back("all_faults_injected: " + why);
    else v.notes.push_back(why);
  }
  for (const auto& e : events) {
    if (const auto* x = std::get_if<event::Injected>(&e.event); x && x->hit) ++v.faults_injected;
    if (std::holds_alternative<event::Restarted>(e.event)) ++v.recoveries;
  }
  return v;
}

}  // namespace atl
