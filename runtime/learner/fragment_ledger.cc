#include "atoll/fragment_ledger.h"

#include <algorithm>

#include "atoll/fragments.h"

namespace atl {

FragmentLedger::FragmentLedger(const Topology& topology, double speed, size_t fragments)
    : topology_(&topology), speed_(speed), tracks_(fragments) {}

void FragmentLedger::finish_step(int64_t tokens, double step_seconds) {
  ++steps_;
  tokens_ += static_cast<uint64_t>(tokens);
  step_ema_ = moving_average(step_ema_, step_seconds, steps_);
  for (Track& t : tracks_) {
    ++t.steps;
    t.tokens += static_cast<uint64_t>(tokens);
    t.seconds += step_seconds;
  }
}

FragmentLedger::Welcomed FragmentLedger::welcome(uint32_t p, uint64_t version) {
  Track& t = tracks_[p];
  if (t.welcomed && version <= t.version) {
    if (version < t.version) ++regressions_refused_;  // the syncer is behind: keep what we adopted
    // What we pushed before registering may be lost with the old link: push
    // again when due. A push after it crossed the same link as the Register.
    if (!t.pushed_here) t.pushed = t.unasked = false;
    return Welcomed::kHeld;
  }
  if (t.welcomed) return Welcomed::kNewer;
  t = Track{};
  t.welcomed = true;
  t.since = t.due_from = steps_;
  t.version = version;
  welcomed_ = std::all_of(tracks_.begin(), tracks_.end(), [](const Track& x) { return x.welcomed; });
  return Welcomed::kFirst;
}

void FragmentLedger::registering(uint32_t shard) {
  for (uint32_t p = 0; p < tracks_.size(); ++p)
    if (shard_of(p, topology_->syncer.shards) == shard) tracks_[p].pushed_here = false;
}

bool FragmentLedger::due(uint32_t p, uint64_t ahead) const {
  const Track& t = tracks_[p];
  return !t.pushed && steps_ + ahead - t.due_from >= steps_until_due(static_cast<int>(p), static_cast<int>(size()),
                                                                    topology_->outer.stream, interval(t.version),
                                                                    t.version);
}

Push FragmentLedger::push(uint32_t p, uint64_t round, uint32_t learner, uint64_t incarnation, Payload payload,
                          std::vector<float> values) {
  Track& t = tracks_[p];
  if (topology_->outer.carry_progress && !data_parallel()) {
    // One per step boundary, at most kMaxInFlight; the oldest is kept: pushes
    // since the same credit overlap, so the syncer merges the first of them
    // to arrive (a later one only if that was lost).
    if (!t.in_flight.empty() && t.in_flight.back().through == steps_) t.in_flight.pop_back();
    t.in_flight.push_back(InFlight{steps_, t.steps, t.tokens, t.seconds, std::move(values)});
    if (t.in_flight.size() > kMaxInFlight) t.in_flight.erase(t.in_flight.begin() + 1);
  }
  t.pushed = t.pushed_here = true;
  t.unasked = round == 0;
  Push out{learner, incarnation, p, round, t.version, t.steps, t.tokens, t.seconds, std::move(payload)};
  out.since = t.since;
  out.through = steps_;
  return out;
}

bool FragmentLedger::push_in_flight(const Pull& pull) const {
  if (pull.last || pull.fragment >= tracks_.size()) return false;
  const Track& t = tracks_[pull.fragment];
  return t.unasked && pull.version == t.version;
}

std::optional<uint64_t> FragmentLedger::credited_through(uint32_t p, const Broadcast& b, uint32_t learner) const {
  const auto named = std::find(b.merged.begin(), b.merged.end(), learner);
  if (named == b.merged.end()) return std::nullopt;
  // An older syncer names no step: the last push in flight.
  const Track& t = tracks_[p];
  if (!b.merged_through.empty()) return b.merged_through[static_cast<size_t>(named - b.merged.begin())];
  return t.in_flight.empty() ? FragmentValues::kUnknownMerged : t.in_flight.back().through;
}

std::optional<uint64_t> FragmentLedger::merged_of_whole(uint32_t p, uint64_t merged_through) const {
  // kUnknownMerged counts as merged, and matches no push: the progress is dropped.
  if (merged_through > tracks_[p].since) return merged_through;
  return std::nullopt;
}

FragmentLedger::Move FragmentLedger::plan_move(uint32_t p, bool may_carry,
                                               std::optional<uint64_t> merged_through) const {
  const Track& t = tracks_[p];
  const OuterSpec& o = topology_->outer;
  Move plan;
  if (merged_through)
    for (const InFlight& f : t.in_flight)
      if (f.through == *merged_through) plan.merged = &f;
  const double lag = plan.merged ? moving_average(credit_lag_, static_cast<double>(steps_ - plan.merged->through), credits_ + 1)
                                 : credit_lag_;
  // Progress carried longer than a few sync intervals beyond the learner's
  // merge lag (a learner never merged in time) is dropped rather than pushed
  // at many times a push's weight.
  const auto limit = static_cast<uint64_t>(
      static_cast<double>(kMaxCarriedIntervals * static_cast<uint64_t>(std::max(1, sync_interval(o, t.version)))) +
      kCarriedLags * lag);
  const uint64_t carried = t.steps - (plan.merged ? plan.merged->steps : 0);
  plan.carry = !data_parallel() && o.carry_progress && may_carry && carried <= limit &&
               (plan.merged != nullptr || !merged_through);
  return plan;
}

std::deque<FragmentLedger::InFlight>& FragmentLedger::move(uint32_t p, uint64_t version, const Move& plan) {
  Track& t = tracks_[p];
  Track next;
  next.welcomed = true;
  next.since = next.due_from = steps_;  // the progress is dropped, unless carried below
  const InFlight* merged = plan.merged;
  if (merged) credit_lag_ = moving_average(credit_lag_, static_cast<double>(steps_ - merged->through), ++credits_);
  if (plan.carry) {
    next.steps = t.steps - (merged ? merged->steps : 0);
    next.tokens = t.tokens - (merged ? merged->tokens : 0);
    next.seconds = t.seconds - (merged ? merged->seconds : 0.0);
    if (merged) {
      // Later pushes hold the merged progress too: the syncer takes none of
      // them. Due as if the merged push had been adopted at once.
      next.since = next.due_from = merged->through;
    } else {
      next.since = t.since;
      next.in_flight = std::move(t.in_flight);
    }
  }
  next.version = version;
  next.stale_version = t.stale_version;
  next.stale_refusals = t.stale_refusals;
  t = std::move(next);
  return t.in_flight;
}

LearnerReplica::RejectAction FragmentLedger::on_reject(const Reject& r, bool registered, bool holds_newer) {
  using Action = LearnerReplica::RejectAction;
  if (r.reason == RejectReason::kBadToken || r.reason == RejectReason::kFingerprintMismatch) return Action::kStop;
  if (r.fragment < tracks_.size()) {  // about a push: it may go again
    Track& t = tracks_[r.fragment];
    t.pushed = t.unasked = false;
    if (data_parallel()) t.steps = 0;  // the gradient is gone: compute a new one
    if (r.reason == RejectReason::kStale && !data_parallel()) {
      // Another push from this base would be refused too: the next version
      // carries the progress. Newer versions are on their way if the fragment
      // moved on since the last stale refusal, or one is held: a delayed or
      // reordered link, not a lost broadcast, and registering again would
      // only bring a welcome that is late as well.
      t.pushed = true;
      if (holds_newer) return Action::kGoOn;
      if (t.stale_version != t.version) {
        t.stale_version = t.version;
        t.stale_refusals = 1;
        return Action::kGoOn;
      }
      if (++t.stale_refusals < LearnerReplica::kStaleRefusalsBeforeResync) return Action::kGoOn;
      t.stale_version.reset();  // resync: the welcome brings what was missed
      t.stale_refusals = 0;
    }
  }
  if (r.reason == RejectReason::kStale || (r.reason == RejectReason::kUnknownLearner && registered))
    return Action::kResync;
  return Action::kGoOn;
}

Progress FragmentLedger::progress(uint32_t learner, uint64_t incarnation, float loss_ema) const {
  Progress p{learner, incarnation, steps_, tokens_, step_ema_, {}, loss_ema};
  p.fragments.reserve(tracks_.size());  // one allocation: a Progress goes out at every inner step
  for (const Track& t : tracks_) p.fragments.push_back({t.version, steps_ - t.due_from});
  return p;
}

bool FragmentLedger::blocked() const {
  if (!data_parallel() && !topology_->outer.barrier) return false;
  return std::any_of(tracks_.begin(), tracks_.end(), [](const Track& t) { return t.pushed; });
}

}  // namespace atl
