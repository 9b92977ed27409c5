#include "atoll/learner_core.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>
#include <set>
#include <string>

#include "atoll/cluster_token.h"

namespace atl {
namespace {

// Exponential moving average that starts at its first sample.
double ema(double avg, double x, uint64_t n, double alpha = 0.2) { return n <= 1 ? x : avg + alpha * (x - avg); }

// Eager updates: the weight a Nesterov step of the syncer gives one of
// `merged_learners` equal pushes right away, lr x (1 + momentum) / n; at most 1,
// what carrying the progress whole gives it. An estimate: the syncer weighs
// pushes by tokens, and an lr warmup or delayed Nesterov changes its step.
float eager_share(const OuterSpec& o, size_t merged_learners) {
  const float n = static_cast<float>(std::max<size_t>(1, merged_learners));
  return std::min(1.0f, o.nesterov.lr * (1.0f + o.nesterov.momentum) / n);
}

}  // namespace

LearnerCore::LearnerCore(uint32_t id, uint64_t incarnation, const Topology& topology, LearnerSpec spec,
                         std::vector<Fragment> fragments, size_t parameters, uint32_t initial_crc,
                         double speed_label, uint32_t batch_label)
    : params_(parameters),
      id_(id),
      incarnation_(incarnation),
      topology_(topology),
      spec_(spec),
      fragments_(std::move(fragments)),
      tracks_(fragments_.size()),
      fragment_welcomed_(fragments_.size(), false),
      initial_crc_(initial_crc),
      speed_label_(speed_label),
      batch_label_(batch_label),
      held_(fragments_.size()),
      held_since_(fragments_.size()),
      stale_(fragments_.size()) {}

Register LearnerCore::make_register(std::string_view cluster_token, uint32_t shard) const {
  const int shards = topology().syncer.shards;
  const uint64_t fingerprint = layout().fingerprint();
  Register r{id_, incarnation_, fingerprint,
             cluster_token.empty() ? "" : join_proof(cluster_token, id_, incarnation_, fingerprint), {},
             initial_crc_};
  r.speed = speed_label_;
  r.batch_size = batch_label_;
  if (welcomed_)
    for (uint32_t p = 0; p < tracks_.size(); ++p)
      if (shard_of(p, shards) == shard) r.bases.push_back({p, tracks_[p].version, encode_payload(Codec::kFp32, 0, tracks_[p].base)});
  return r;
}

namespace {

// A syncer in shards keeps moments per shard: shard s's part of a
// whole-model vector is its fragments' values back to back, in fragment order.
std::vector<float> shard_part(const std::vector<Fragment>& fragments, int shards, uint32_t shard,
                              std::span<const float> whole) {
  std::vector<float> part;
  for (const Fragment& f : fragments) {
    if (shard_of(static_cast<uint32_t>(f.id), shards) != shard) continue;
    const size_t at = part.size();
    part.resize(at + f.size);
    gather(f, whole, std::span<float>(part).subspan(at, f.size));
  }
  return part;
}

size_t shard_part_size(const std::vector<Fragment>& fragments, int shards, uint32_t shard) {
  size_t n = 0;
  for (const Fragment& f : fragments) n += shard_of(static_cast<uint32_t>(f.id), shards) == shard ? f.size : 0;
  return n;
}

// The inverse of shard_part(): its values into their places in `whole`.
void take_shard_part(const std::vector<Fragment>& fragments, int shards, uint32_t shard,
                     std::span<const float> part, std::span<float> whole) {
  size_t at = 0;
  for (const Fragment& f : fragments) {
    if (shard_of(static_cast<uint32_t>(f.id), shards) != shard) continue;
    scatter(f, part.subspan(at, f.size), whole);
    at += f.size;
  }
}

}  // namespace

Result<Moments> LearnerCore::moments_for(const MomentsPull& pull) const {
  if (!welcomed_) return Status::unavailable("no optimizer state to give before the first welcome");
  auto state = optimizer_state();
  if (!state.ok()) return state.status();
  const int shards = topology().syncer.shards;
  if (shards == 1) return Moments{pull.request, std::move(*state)};
  if (pull.shard >= static_cast<uint32_t>(shards))
    return Status::invalid_argument("moments asked by shard " + std::to_string(pull.shard) + " of " +
                                    std::to_string(shards));
  // The asking shard's part only: it keeps the moments of its own fragments.
  std::vector<float> m(params_.size()), v(params_.size());
  ATOLL_RETURN_IF_ERROR(decode_payload(state->m, m));
  ATOLL_RETURN_IF_ERROR(decode_payload(state->v, v));
  return Moments{pull.request,
                 OptimizerState{state->step, encode_payload(Codec::kBf16, 0, shard_part(fragments_, shards, pull.shard, m)),
                                encode_payload(Codec::kBf16, 0, shard_part(fragments_, shards, pull.shard, v))}};
}

Status LearnerCore::welcome(const Welcome& w) {
  // One syncer welcomes with every fragment; a shard of a sharded syncer
  // (syncer.shards = S) with exactly its own (shard_of()).
  const int shards = topology().syncer.shards;
  const uint32_t shard = w.fragments.empty() ? 0 : shard_of(w.fragments.front().fragment, shards);
  size_t expected = 0;
  for (uint32_t p = 0; p < fragments_.size(); ++p) expected += shard_of(p, shards) == shard ? 1 : 0;
  if (w.fragments.size() != expected)
    return Status::invalid_argument("welcome has " + std::to_string(w.fragments.size()) + " fragments, expected " +
                                    std::to_string(expected) +
                                    (shards > 1 ? " (those of syncer shard " + std::to_string(shard) + ")" : ""));
  std::vector<std::vector<float>> values(fragments_.size());
  std::vector<uint64_t> versions(fragments_.size()), merged_through(fragments_.size());
  std::vector<bool> named(fragments_.size(), false);
  std::vector<float> initial;  // made once, if a fragment comes without values
  for (const auto& fv : w.fragments) {
    if (fv.fragment >= fragments_.size() || named[fv.fragment] || shard_of(fv.fragment, shards) != shard)
      return Status::invalid_argument("welcome names fragment " + std::to_string(fv.fragment) +
                                      " twice, out of range or of another shard");
    named[fv.fragment] = true;
    values[fv.fragment].resize(fragments_[fv.fragment].size);
    versions[fv.fragment] = fv.version;
    merged_through[fv.fragment] = fv.merged_through;
    if (fv.values.count == 0 && fv.version == 0) {  // the seed's initialization, which we have too
      if (initial.empty()) {
        auto made = initial_values();
        if (!made.ok())
          return made.status().with_context("welcome leaves out the values of fragment " + std::to_string(fv.fragment));
        initial = std::move(*made);
      }
      gather(fragments_[fv.fragment], initial, values[fv.fragment]);
      continue;
    }
    ATOLL_RETURN_IF_ERROR(decode_payload(fv.values, values[fv.fragment])
                              .with_context("welcome fragment " + std::to_string(fv.fragment)));
  }
  if (w.moments && !welcomed_ && shards == 1) {
    std::vector<float> m(params_.size()), v(params_.size());
    ATOLL_RETURN_IF_ERROR(decode_payload(w.moments->m, m).with_context("welcome moments"));
    ATOLL_RETURN_IF_ERROR(decode_payload(w.moments->v, v).with_context("welcome moments"));
    ATOLL_RETURN_IF_ERROR(take_optimizer_state(w.moments->step, std::move(m), std::move(v)));
  } else if (w.moments && !welcomed_) {  // one shard's part: taken once every shard gave its own
    const size_t n = shard_part_size(fragments_, shards, shard);
    std::vector<float> m(n), v(n);
    const std::string where = "welcome moments of syncer shard " + std::to_string(shard);
    ATOLL_RETURN_IF_ERROR(decode_payload(w.moments->m, m).with_context(where));
    ATOLL_RETURN_IF_ERROR(decode_payload(w.moments->v, v).with_context(where));
    if (moment_parts_.from.empty()) {
      moment_parts_.from.assign(static_cast<size_t>(shards), false);
      moment_parts_.m.assign(params_.size(), 0.0f);
      moment_parts_.v.assign(params_.size(), 0.0f);
    }
    take_shard_part(fragments_, shards, shard, m, moment_parts_.m);
    take_shard_part(fragments_, shards, shard, v, moment_parts_.v);
    moment_parts_.from[shard] = true;
    moment_parts_.step = std::max(moment_parts_.step, w.moments->step);
  }
  for (size_t p = 0; p < fragments_.size(); ++p) {
    if (!named[p]) continue;  // another shard's
    Track& t = tracks_[p];
    if (fragment_welcomed_[p] && versions[p] <= t.version) {
      if (versions[p] < t.version) ++regressions_refused_;  // the syncer is behind: keep what we adopted
      t.pushed = t.unasked = false;  // what we pushed may be lost: push again when due
      continue;
    }
    if (fragment_welcomed_[p]) {  // a newer version (a resync)
      catch_up(static_cast<uint32_t>(p), versions[p], std::move(values[p]), merged_through[p]);
      continue;
    }
    scatter(fragments_[p], values[p], params_);
    adopted(static_cast<uint32_t>(p), 0.0f, values[p]);
    t = Track{};
    t.since = t.due_from = steps_;
    t.version = versions[p];
    t.base = std::move(values[p]);
    fragment_welcomed_[p] = true;
  }
  // Trains once every fragment has a base: every shard has welcomed it.
  welcomed_ = std::all_of(fragment_welcomed_.begin(), fragment_welcomed_.end(), [](bool b) { return b; });
  if (welcomed_ && !moment_parts_.from.empty()) {
    // Every part, or none: zeros beside a peer's moments at its step would make those parameters' first
    // updates several times too large, which is what handing moments avoids.
    if (std::all_of(moment_parts_.from.begin(), moment_parts_.from.end(), [](bool b) { return b; }))
      ATOLL_RETURN_IF_ERROR(
          take_optimizer_state(moment_parts_.step, std::move(moment_parts_.m), std::move(moment_parts_.v)));
    moment_parts_ = {};
  }
  // Broadcasts held for a version the welcome brought (or passed) follow it now.
  for (uint32_t p = 0; p < fragments_.size(); ++p) ATOLL_RETURN_IF_ERROR(adopt_held(p));
  return {};
}

void LearnerCore::finish_step(const StepResult& r, double step_seconds) {
  ++steps_;
  tokens_ += static_cast<uint64_t>(r.tokens);
  loss_ema_ = ema(loss_ema_, r.loss, steps_, 0.05);
  step_ema_ = ema(step_ema_, step_seconds, steps_);
  last_tokens_ = r.tokens;
  last_seconds_ = step_seconds;
  for (auto& t : tracks_) {
    ++t.steps;
    t.tokens += static_cast<uint64_t>(r.tokens);
    t.seconds += step_seconds;
  }
}

Push LearnerCore::make_push(uint32_t fragment, uint64_t round) {
  Track& t = tracks_[fragment];
  const Fragment& f = fragments_[fragment];
  std::vector<float> delta(f.size);
  gather(f, params_, delta);
  const auto& o = topology().outer;
  if (o.carry_progress && !data_parallel()) {
    remember_push(t.in_flight, InFlight{steps_, delta, t.steps, t.tokens, t.seconds});
  }
  for (size_t i = 0; i < delta.size(); ++i) delta[i] -= t.base[i];
  if (!t.push_offset.empty())
    for (size_t i = 0; i < delta.size(); ++i) delta[i] -= t.push_offset[i];
  keep_largest(delta, o.push_block, o.push_density);
  Payload payload = encode_payload(o.push_codec, o.push_block, delta);
  if (o.carry_progress && o.push_error_feedback && !data_parallel() && !t.in_flight.empty()) {
    // The syncer adds what decodes: carrying from the base plus that keeps
    // what the push left out in the progress, for the next push.
    if (decode_payload(payload, delta).ok()) {
      std::vector<float>& reference = t.in_flight.back().values;
      for (size_t i = 0; i < delta.size(); ++i)
        reference[i] = t.base[i] + (t.push_offset.empty() ? 0.0f : t.push_offset[i]) + delta[i];
    }
  }
  t.pushed = true;
  t.unasked = round == 0;
  Push push{id_, incarnation_, fragment, round, t.version, t.steps, t.tokens, t.seconds, std::move(payload)};
  push.since = t.since;
  push.through = steps_;
  return push;
}

Result<Push> LearnerCore::answer(const Pull& pull) {
  if (pull.fragment >= fragments_.size())
    return Status::invalid_argument("pull for fragment " + std::to_string(pull.fragment) + " of " +
                                    std::to_string(fragments_.size()));
  if (!fragment_welcomed_[pull.fragment])  // no base to push against: meant for an earlier incarnation
    return Status::unavailable("pull for fragment " + std::to_string(pull.fragment) + " before the first welcome");
  if (!readable(pull.fragment))
    return Status::unavailable("fragment " + std::to_string(pull.fragment) + " was not read at this step boundary");
  return make_push(pull.fragment, pull.round);
}

bool LearnerCore::push_in_flight(const Pull& pull) const {
  if (pull.last || pull.fragment >= tracks_.size()) return false;
  const Track& t = tracks_[pull.fragment];
  return t.unasked && pull.version == t.version;
}

std::vector<Push> LearnerCore::due_pushes() {
  std::vector<Push> out;
  if (data_parallel()) {
    // The gradient of the last step, against the version it was computed on.
    Track& t = tracks_[0];
    if (t.pushed || t.steps == 0) return out;
    t.pushed = true;
    out.push_back(Push{id_, incarnation_, 0, 0, t.version, 1, static_cast<uint64_t>(last_tokens_), last_seconds_,
                       encode_payload(Codec::kFp32, 0, gradient())});
    return out;
  }
  for (uint32_t p = 0; p < fragments_.size(); ++p) {
    const Track& t = tracks_[p];
    if (!t.pushed && readable(p) &&
        steps_ - t.due_from >= steps_until_due(static_cast<int>(p), static_cast<int>(fragments_.size()),
                                   topology().outer.stream, sync_interval(topology(), speed_label_, t.version),
                                   t.version))
      out.push_back(make_push(p, 0));
  }
  return out;
}

Status LearnerCore::apply(const Broadcast& b) {
  if (b.fragment >= fragments_.size())
    return Status::invalid_argument("broadcast for fragment " + std::to_string(b.fragment) + " of " +
                                    std::to_string(fragments_.size()));
  if (!fragment_welcomed_[b.fragment])
    return Status::unavailable("broadcast of fragment " + std::to_string(b.fragment) + " before the first welcome");
  const Track& t = tracks_[b.fragment];
  if (b.version <= t.version) return {};  // already have it (or newer)
  if (b.repair) {
    if (b.merged.size() != 1 || b.merged.front() != id_ || b.merged_through.size() != 1)
      return Status::invalid_argument("a repair of fragment " + std::to_string(b.fragment) +
                                      " that is not for learner " + std::to_string(id_));
    std::vector<float> global(fragments_[b.fragment].size);
    ATOLL_RETURN_IF_ERROR(decode_payload(b.values, global).with_context("repair of fragment " +
                                                                        std::to_string(b.fragment)));
    catch_up(b.fragment, b.version, std::move(global), b.merged_through.front());
    ++repairs_adopted_;
    return adopt_held(b.fragment);  // those held for versions it passed are dropped
  }
  if (b.version > t.version + 1 && !data_parallel()) {
    // It overtook the next version (a reordered or delayed link): wait for
    // those between, so that each is adopted, and carries progress, in turn.
    auto& held = held_[b.fragment];
    if (held.empty()) held_since_[b.fragment] = steps_;
    held.insert_or_assign(b.version, b);
    ++broadcasts_held_;
    // A reordered link delivers those between within a few messages and well
    // within a sync interval of steps; otherwise they were lost.
    const auto interval = static_cast<uint64_t>(std::max(1, sync_interval(topology().outer, t.version)));
    if (held.size() <= kMaxHeldBroadcasts && steps_ - held_since_[b.fragment] < interval) return {};
    // Too many ahead: those between were lost. The newest values are adopted
    // at once; a difference to a version missed makes the learner resync.
    const Broadcast newest = std::move(held.rbegin()->second);
    held.clear();
    return adopt(newest);
  }
  ATOLL_RETURN_IF_ERROR(adopt(b));
  return adopt_held(b.fragment);
}

void LearnerCore::catch_up(uint32_t p, uint64_t version, std::vector<float> global, uint64_t merged_through) {
  std::optional<uint64_t> merged;
  if (merged_through > tracks_[p].since) merged = merged_through;  // kUnknownMerged: dropped
  move_onto(p, version, std::move(global), /*may_carry=*/true, merged, topology().learners.size());
}

Status LearnerCore::adopt_held(uint32_t fragment) {
  auto& held = held_[fragment];
  while (!held.empty()) {
    auto it = held.begin();
    if (it->first <= tracks_[fragment].version) {  // passed by a welcome
      held.erase(it);
      continue;
    }
    if (it->first != tracks_[fragment].version + 1) break;  // still waiting for one between
    const Broadcast next = std::move(it->second);
    held.erase(it);
    ATOLL_RETURN_IF_ERROR(adopt(next));
  }
  return {};
}

Status LearnerCore::adopt(const Broadcast& b) {
  Track& t = tracks_[b.fragment];
  const Fragment& f = fragments_[b.fragment];
  std::vector<float> global(f.size);
  ATOLL_RETURN_IF_ERROR(decode_payload(b.values, global).with_context("broadcast of fragment " +
                                                                      std::to_string(b.fragment)));
  if (b.delta) {
    if (b.base_version != t.version)
      return Status::unavailable("broadcast of fragment " + std::to_string(b.fragment) + " version " +
                                 std::to_string(b.version) + " is a difference to version " +
                                 std::to_string(b.base_version) + ", and this learner holds version " +
                                 std::to_string(t.version));
    for (size_t i = 0; i < global.size(); ++i) global[i] += t.base[i];
  }
  // Which of its pushes the new version merged: the one the broadcast names
  // (an older syncer names none: the last one in flight).
  std::optional<uint64_t> merged_through;
  if (const auto named = std::find(b.merged.begin(), b.merged.end(), id_); named != b.merged.end()) {
    const auto at = static_cast<size_t>(named - b.merged.begin());
    merged_through = !b.merged_through.empty() ? b.merged_through[at]
                     : t.in_flight.empty()     ? FragmentValues::kUnknownMerged
                                               : t.in_flight.back().through;
  }
  move_onto(b.fragment, b.version, std::move(global), /*may_carry=*/b.version == t.version + 1, merged_through,
            b.merged.size());
  return {};
}

void LearnerCore::move_onto(uint32_t p, uint64_t version, std::vector<float> global, bool may_carry,
                            std::optional<uint64_t> merged_through, size_t merged_learners) {
  Track& t = tracks_[p];
  const Fragment& f = fragments_[p];
  std::vector<float> local(f.size);
  gather(f, params_, local);
  const auto& o = topology().outer;
  Track next;
  next.due_from = steps_;  // due H steps after this adoption, unless it carries from a merged push
  // The same step as an update, for a replica elsewhere: s * values + b.
  float scale = 0.0f;
  std::vector<float> offset;
  const InFlight* merged = nullptr;
  if (merged_through)
    for (const InFlight& push : t.in_flight)
      if (push.through == *merged_through) merged = &push;
  if (merged) credit_lag_ = ema(credit_lag_, static_cast<double>(steps_ - merged->through), ++credits_);
  // Progress carried longer than a few sync intervals beyond the learner's
  // merge lag (a learner that is never merged in time) is dropped rather than
  // pushed at many times a push's weight.
  const uint64_t carried = t.steps - (merged ? merged->steps : 0);
  if (!data_parallel() && o.carry_progress && may_carry && carried <= carry_limit(o, t.version, credit_lag_) &&
      (merged || !merged_through)) {
    // What the new version did not merge: the steps since the merged push, or
    // every step since the base when this learner was not merged.
    const std::vector<float>& reference = merged ? merged->values : t.base;
    // Eager: the progress since the merged push at the share the syncer will
    // give it, not whole; its next push still measures it whole.
    const float share = merged && o.eager_updates ? eager_share(o, merged_learners) : 1.0f;
    if (share < 1.0f) {
      next.push_offset.resize(local.size());
      for (size_t i = 0; i < local.size(); ++i) next.push_offset[i] = (share - 1.0f) * (local[i] - reference[i]);
    } else if (!merged) {
      next.push_offset = std::move(t.push_offset);  // still measured from where it was
    }
    // A translation, also when eager: a replica elsewhere (a Python loop) that
    // stepped on since `local` was read keeps those steps whole, as its next
    // push measures them.
    offset.resize(global.size());
    for (size_t i = 0; i < global.size(); ++i)
      offset[i] = global[i] - reference[i] + (share - 1.0f) * (local[i] - reference[i]);
    for (size_t i = 0; i < local.size(); ++i) local[i] += offset[i];
    scale = 1.0f;
    next.steps = carried;
    next.tokens = t.tokens - (merged ? merged->tokens : 0);
    next.seconds = t.seconds - (merged ? merged->seconds : 0.0);
    if (merged) {
      // Later pushes hold the merged progress too: the syncer takes none of them.
      next.since = next.due_from = merged->through;
    } else {
      next.since = t.since;
      next.in_flight = std::move(t.in_flight);
      for (InFlight& push : next.in_flight)  // not merged: share 1, offset = global - base
        for (size_t i = 0; i < offset.size(); ++i) push.values[i] += offset[i];
    }
  } else {
    next.since = steps_;  // the progress so far is dropped (a credit for a push no longer known, too)
    const float alpha = data_parallel() ? 0.0f : o.blend_alpha;
    if (alpha > 0.0f)
      for (size_t i = 0; i < local.size(); ++i) local[i] = alpha * local[i] + (1.0f - alpha) * global[i];
    else
      local = global;  // overwrite: also a replica that went non-finite is healed
    scale = alpha;
    offset = global;
    if (alpha > 0.0f)
      for (float& x : offset) x *= 1.0f - alpha;
  }
  scatter(f, local, params_);
  adopted(p, scale, std::move(offset));
  next.version = version;
  next.base = std::move(global);
  t = std::move(next);
}

Progress LearnerCore::progress() const {
  Progress p{id_, incarnation_, steps_, tokens_, step_ema_, {}, static_cast<float>(loss_ema_)};
  for (const auto& t : tracks_) p.fragments.push_back({t.version, steps_ - t.due_from});
  return p;
}

LearnerCore::RejectAction LearnerCore::on_reject(const Reject& r, bool registered) {
  if (r.reason == RejectReason::kBadToken || r.reason == RejectReason::kFingerprintMismatch) return RejectAction::kStop;
  if (r.fragment < fragments_.size()) {  // about a push: it may go again
    Track& t = tracks_[r.fragment];
    t.pushed = t.unasked = false;
    if (data_parallel()) t.steps = 0;  // the gradient is gone: compute a new one
    std::vector<float> mine(fragments_[r.fragment].size);
    gather(fragments_[r.fragment], params_, mine);
    if (!std::all_of(mine.begin(), mine.end(), [](float v) { return std::isfinite(v); })) return RejectAction::kRestart;
    if (r.reason == RejectReason::kStale && !data_parallel()) {
      // Another push from this base would be refused too: the next version
      // carries the progress. Newer versions are on their way if the fragment
      // moved on since the last stale refusal, or one is held: a delayed or
      // reordered link, not a lost broadcast, and registering again would
      // only bring a welcome that is late as well.
      t.pushed = true;
      StaleMark& mark = stale_[r.fragment];
      if (!held_[r.fragment].empty()) return RejectAction::kGoOn;
      if (mark.version != t.version) {
        mark = {t.version, 1};
        return RejectAction::kGoOn;
      }
      if (++mark.refusals < kStaleRefusalsBeforeResync) return RejectAction::kGoOn;
      mark = {};  // resync: the welcome brings what was missed
    }
  }
  if (r.reason == RejectReason::kStale || (r.reason == RejectReason::kUnknownLearner && registered))
    return RejectAction::kResync;
  return RejectAction::kGoOn;
}

std::set<uint32_t> LearnerCore::due_soon() const {
  std::set<uint32_t> out;
  if (!welcomed_ || data_parallel()) return out;
  for (uint32_t p = 0; p < fragments_.size(); ++p) {
    const Track& t = tracks_[p];
    if (!t.pushed &&
        steps_ - t.due_from + 1 >= steps_until_due(static_cast<int>(p), static_cast<int>(fragments_.size()),
                                       topology().outer.stream, sync_interval(topology(), speed_label_, t.version), t.version))
      out.insert(p);
  }
  return out;
}

bool LearnerCore::blocked() const {
  if (!data_parallel() && !topology().outer.barrier) return false;
  for (const auto& t : tracks_)
    if (t.pushed) return true;
  return false;
}

}  // namespace atl
