#include "atoll/counting_replica.h"

#include <algorithm>
#include <string>

#include "atoll/fragments.h"

namespace atl {

CountingReplica::CountingReplica(uint32_t id, uint64_t incarnation, std::shared_ptr<const Model> model)
    : id_(id),
      incarnation_(incarnation),
      model_(std::move(model)),
      speed_(default_spec(model_->topology, id).speed),
      tracks_(model_->zero_deltas.size()) {}

Register CountingReplica::make_register(std::string_view, uint32_t) const {
  return Register{id_, incarnation_, model_->fingerprint, "", {}, model_->initial_crc};
}

Status CountingReplica::welcome(const Welcome& w) {
  for (const auto& fv : w.fragments)
    if (fv.fragment >= tracks_.size())
      return Status::invalid_argument("welcome names fragment " + std::to_string(fv.fragment) + " of " +
                                      std::to_string(tracks_.size()));
  for (const auto& fv : w.fragments) {
    Track& t = tracks_[fv.fragment];
    if (t.welcomed && fv.version <= t.version) {  // LearnerCore::welcome: never back, push again when due
      if (fv.version < t.version) ++regressions_refused_;
      t.pushed = t.unasked = false;
      continue;
    }
    if (t.welcomed) {  // a newer version (a resync): LearnerCore::welcome carries what it did not merge
      catch_up(t, fv.fragment, fv.version, fv.merged_through);
      continue;
    }
    t = Track{};
    t.welcomed = true;
    t.since = t.due_from = steps_;
    t.version = fv.version;
  }
  welcomed_ = std::all_of(tracks_.begin(), tracks_.end(), [](const Track& t) { return t.welcomed; });
  return {};
}

Result<Moments> CountingReplica::moments_for(const MomentsPull& pull) const {
  if (!welcomed_) return Status::unavailable("no optimizer state to give before the first welcome");
  if (pull.shard >= model_->moments.size()) return Status::invalid_argument("moments asked by an unknown shard");
  return Moments{pull.request, model_->moments[pull.shard]};
}

void CountingReplica::finish_step(const StepResult& r, double step_seconds) {
  ++steps_;
  tokens_ += static_cast<uint64_t>(r.tokens);
  step_ema_ = steps_ <= 1 ? step_seconds : step_ema_ + 0.2 * (step_seconds - step_ema_);  // LearnerCore's
  for (auto& t : tracks_) {
    ++t.steps;
    t.tokens += static_cast<uint64_t>(r.tokens);
    t.seconds += step_seconds;
  }
}

Push CountingReplica::make_push(uint32_t p, uint64_t round) {
  Track& t = tracks_[p];
  if (model_->topology.outer.carry_progress) {  // LearnerCore::make_push's bookkeeping
    remember_push(t.in_flight, Track::InFlight{steps_, t.steps, t.tokens, t.seconds});
  }
  t.pushed = true;
  t.unasked = round == 0;
  Push push{id_, incarnation_, p, round, t.version, t.steps, t.tokens, t.seconds, model_->zero_deltas[p]};
  push.since = t.since;
  push.through = steps_;
  return push;
}

Result<Push> CountingReplica::answer(const Pull& pull) {
  if (pull.fragment >= tracks_.size())
    return Status::invalid_argument("pull for fragment " + std::to_string(pull.fragment) + " of " +
                                    std::to_string(tracks_.size()));
  if (!tracks_[pull.fragment].welcomed)
    return Status::unavailable("pull for fragment " + std::to_string(pull.fragment) + " before the first welcome");
  return make_push(pull.fragment, pull.round);
}

std::vector<Push> CountingReplica::due_pushes() {
  std::vector<Push> out;
  const auto fragments = static_cast<int>(tracks_.size());
  for (uint32_t p = 0; p < tracks_.size(); ++p) {
    const Track& t = tracks_[p];
    if (!t.pushed && steps_ - t.due_from >= steps_until_due(static_cast<int>(p), fragments, model_->topology.outer.stream,
                                                sync_interval(model_->topology, speed_, t.version), t.version))
      out.push_back(make_push(p, 0));
  }
  return out;
}

Status CountingReplica::apply(const Broadcast& b) {
  if (b.fragment >= tracks_.size())
    return Status::invalid_argument("broadcast for fragment " + std::to_string(b.fragment) + " of " +
                                    std::to_string(tracks_.size()));
  Track& t = tracks_[b.fragment];
  if (!t.welcomed)
    return Status::unavailable("broadcast of fragment " + std::to_string(b.fragment) + " before the first welcome");
  if (b.version <= t.version) return {};
  if (b.repair && b.merged_through.size() == 1) {  // LearnerCore::apply: at once, as a welcome's values
    catch_up(t, b.fragment, b.version, b.merged_through.front());
    return {};
  }
  if (b.delta && b.base_version != t.version)
    return Status::unavailable("broadcast of fragment " + std::to_string(b.fragment) + " version " +
                               std::to_string(b.version) + " is a difference to version " +
                               std::to_string(b.base_version) + ", and this learner holds version " +
                               std::to_string(t.version));
  move_onto(t, b, /*may_carry=*/b.version == t.version + 1);
  return {};
}

void CountingReplica::catch_up(Track& t, uint32_t fragment, uint64_t version, uint64_t merged_through) {
  Broadcast as_broadcast{fragment, version, {}, false, 0, {}};
  if (merged_through > t.since) {
    as_broadcast.merged = {id_};
    as_broadcast.merged_through = {merged_through};
  }
  move_onto(t, as_broadcast, /*may_carry=*/true);
}

// LearnerCore::move_onto, on counts: the progress `b` did not merge stays.
void CountingReplica::move_onto(Track& t, const Broadcast& b, bool may_carry) {
  const auto& o = model_->topology.outer;
  Track next;
  next.welcomed = true;
  next.since = next.due_from = steps_;  // dropped, unless carried below
  const auto named = std::find(b.merged.begin(), b.merged.end(), id_);
  const bool credited = named != b.merged.end();
  const Track::InFlight* merged = nullptr;
  if (credited && !t.in_flight.empty()) {
    const auto at = static_cast<size_t>(named - b.merged.begin());
    const uint64_t through = b.merged_through.empty() ? t.in_flight.back().through : b.merged_through[at];
    for (const auto& f : t.in_flight)
      if (f.through == through) merged = &f;
  }
  if (merged) {  // LearnerCore's merge lag
    const auto lag = static_cast<double>(steps_ - merged->through);
    credit_lag_ = credits_++ == 0 ? lag : credit_lag_ + 0.2 * (lag - credit_lag_);
  }
  const uint64_t carried = t.steps - (merged ? merged->steps : 0);
  if (o.carry_progress && may_carry && carried <= carry_limit(o, t.version, credit_lag_) && (merged || !credited)) {
    next.steps = carried;
    next.tokens = t.tokens - (merged ? merged->tokens : 0);
    next.seconds = t.seconds - (merged ? merged->seconds : 0.0);
    next.since = merged ? merged->through : t.since;
    if (merged) next.due_from = merged->through;  // LearnerCore's cadence
    if (!merged) next.in_flight = std::move(t.in_flight);
  }
  next.version = b.version;
  next.stale_version = t.stale_version;
  next.stale_refusals = t.stale_refusals;
  t = std::move(next);
}

Progress CountingReplica::progress() const {
  Progress p{id_, incarnation_, steps_, tokens_, step_ema_, {}, 0.0f};
  for (const auto& t : tracks_) p.fragments.push_back({t.version, steps_ - t.due_from});
  return p;
}

LearnerReplica::RejectAction CountingReplica::on_reject(const Reject& r, bool registered) {
  if (r.reason == RejectReason::kBadToken || r.reason == RejectReason::kFingerprintMismatch) return RejectAction::kStop;
  if (r.fragment < tracks_.size()) {  // about a push: LearnerCore::on_reject's rule, without values
    Track& t = tracks_[r.fragment];
    t.pushed = t.unasked = false;
    if (r.reason == RejectReason::kStale) {
      t.pushed = true;  // the next version carries the progress
      if (t.stale_version != t.version) {
        t.stale_version = t.version;
        t.stale_refusals = 1;
        return RejectAction::kGoOn;
      }
      if (++t.stale_refusals < kStaleRefusalsBeforeResync) return RejectAction::kGoOn;
      t.stale_version.reset();
      t.stale_refusals = 0;
    }
  }
  if (r.reason == RejectReason::kStale || (r.reason == RejectReason::kUnknownLearner && registered))
    return RejectAction::kResync;
  return RejectAction::kGoOn;
}

bool CountingReplica::blocked() const {
  if (!model_->topology.outer.barrier) return false;
  return std::any_of(tracks_.begin(), tracks_.end(), [](const Track& t) { return t.pushed; });
}

}  // namespace atl
