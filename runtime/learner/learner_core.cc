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
      ledger_(topology_, speed_label, fragments_.size()),
      values_(fragments_.size()),
      initial_crc_(initial_crc),
      speed_label_(speed_label),
      batch_label_(batch_label),
      held_(fragments_.size()),
      held_since_(fragments_.size()) {}

Register LearnerCore::make_register(std::string_view cluster_token, uint32_t shard) const {
  const int shards = topology().syncer.shards;
  const uint64_t fingerprint = layout().fingerprint();
  Register r{id_, incarnation_, fingerprint,
             cluster_token.empty() ? "" : join_proof(cluster_token, id_, incarnation_, fingerprint), {},
             initial_crc_};
  r.speed = speed_label_;
  r.batch_size = batch_label_;
  if (welcomed())
    for (uint32_t p = 0; p < fragments_.size(); ++p)
      if (shard_of(p, shards) == shard) r.bases.push_back({p, version(p), encode_payload(Codec::kFp32, 0, values_[p].base)});
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
  if (!welcomed()) return Status::unavailable("no optimizer state to give before the first welcome");
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
  if (w.moments && !welcomed() && shards == 1) {
    std::vector<float> m(params_.size()), v(params_.size());
    ATOLL_RETURN_IF_ERROR(decode_payload(w.moments->m, m).with_context("welcome moments"));
    ATOLL_RETURN_IF_ERROR(decode_payload(w.moments->v, v).with_context("welcome moments"));
    ATOLL_RETURN_IF_ERROR(take_optimizer_state(w.moments->step, std::move(m), std::move(v)));
  } else if (w.moments && !welcomed()) {  // one shard's part: taken once every shard gave its own
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
    const auto fragment = static_cast<uint32_t>(p);
    switch (ledger_.welcome(fragment, versions[p])) {
      case FragmentLedger::Welcomed::kHeld:  // never back: keep what we adopted
        break;
      case FragmentLedger::Welcomed::kNewer:  // a resync
        catch_up(fragment, versions[p], std::move(values[p]), merged_through[p]);
        break;
      case FragmentLedger::Welcomed::kFirst:
        scatter(fragments_[p], values[p], params_);
        adopted(fragment, 0.0f, values[p]);
        values_[p] = Values{std::move(values[p]), {}};
        break;
    }
  }
  // Trains once every fragment has a base: every shard has welcomed it.
  if (welcomed() && !moment_parts_.from.empty()) {
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
  ledger_.finish_step(r.tokens, step_seconds);
  loss_ema_ = moving_average(loss_ema_, r.loss, ledger_.steps(), 0.05);
  last_tokens_ = r.tokens;
  last_seconds_ = step_seconds;
}

Push LearnerCore::make_push(uint32_t fragment, uint64_t round) {
  const Values& v = values_[fragment];
  const Fragment& f = fragments_[fragment];
  std::vector<float> delta(f.size);
  gather(f, params_, delta);
  const auto& o = topology().outer;
  const bool remembered = o.carry_progress && !data_parallel();
  std::vector<float> at_push;  // where its carry starts once merged
  if (remembered) at_push = delta;
  for (size_t i = 0; i < delta.size(); ++i) delta[i] -= v.base[i];
  if (!v.push_offset.empty())
    for (size_t i = 0; i < delta.size(); ++i) delta[i] -= v.push_offset[i];
  keep_largest(delta, o.push_block, o.push_density);
  Payload payload = encode_payload(o.push_codec, o.push_block, delta);
  if (remembered && o.push_error_feedback) {
    // The syncer adds what decodes: carrying from the base plus that keeps
    // what the push left out in the progress, for the next push.
    if (decode_payload(payload, delta).ok())
      for (size_t i = 0; i < delta.size(); ++i)
        at_push[i] = v.base[i] + (v.push_offset.empty() ? 0.0f : v.push_offset[i]) + delta[i];
  }
  return ledger_.push(fragment, round, id_, incarnation_, std::move(payload), std::move(at_push));
}

Result<Push> LearnerCore::answer(const Pull& pull) {
  if (pull.fragment >= fragments_.size())
    return Status::invalid_argument("pull for fragment " + std::to_string(pull.fragment) + " of " +
                                    std::to_string(fragments_.size()));
  if (!welcomed(pull.fragment))  // no base to push against: meant for an earlier incarnation
    return Status::unavailable("pull for fragment " + std::to_string(pull.fragment) + " before the first welcome");
  if (!readable(pull.fragment))
    return Status::unavailable("fragment " + std::to_string(pull.fragment) + " was not read at this step boundary");
  return make_push(pull.fragment, pull.round);
}

bool LearnerCore::push_in_flight(const Pull& pull) const { return ledger_.push_in_flight(pull); }

std::vector<Push> LearnerCore::due_pushes() {
  std::vector<Push> out;
  if (data_parallel()) {
    // The gradient of the last step, against the version it was computed on.
    const FragmentLedger::Track& t = ledger_.track(0);
    if (t.pushed || t.steps == 0) return out;
    ledger_.gradient_pushed();
    out.push_back(Push{id_, incarnation_, 0, 0, t.version, 1, static_cast<uint64_t>(last_tokens_), last_seconds_,
                       encode_payload(Codec::kFp32, 0, gradient())});
    return out;
  }
  for (uint32_t p = 0; p < fragments_.size(); ++p)
    if (readable(p) && ledger_.due(p)) out.push_back(make_push(p, 0));
  return out;
}

Status LearnerCore::apply(const Broadcast& b) {
  if (b.fragment >= fragments_.size())
    return Status::invalid_argument("broadcast for fragment " + std::to_string(b.fragment) + " of " +
                                    std::to_string(fragments_.size()));
  if (!welcomed(b.fragment))
    return Status::unavailable("broadcast of fragment " + std::to_string(b.fragment) + " before the first welcome");
  const uint64_t held_version = version(b.fragment);
  if (b.version <= held_version) return {};  // already have it (or newer)
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
  if (b.version > held_version + 1 && !data_parallel()) {
    // It overtook the next version (a reordered or delayed link): wait for
    // those between, so that each is adopted, and carries progress, in turn.
    auto& held = held_[b.fragment];
    if (held.empty()) held_since_[b.fragment] = steps();
    held.insert_or_assign(b.version, b);
    ++broadcasts_held_;
    // A reordered link delivers those between within a few messages and well
    // within a sync interval of steps; otherwise they were lost.
    const auto interval = static_cast<uint64_t>(std::max(1, sync_interval(topology().outer, held_version)));
    if (held.size() <= kMaxHeldBroadcasts && steps() - held_since_[b.fragment] < interval) return {};
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
  move_onto(p, version, std::move(global), /*may_carry=*/true, ledger_.merged_of_whole(p, merged_through),
            topology().learners.size());
}

Status LearnerCore::adopt_held(uint32_t fragment) {
  auto& held = held_[fragment];
  while (!held.empty()) {
    auto it = held.begin();
    if (it->first <= version(fragment)) {  // passed by a welcome
      held.erase(it);
      continue;
    }
    if (it->first != version(fragment) + 1) break;  // still waiting for one between
    const Broadcast next = std::move(it->second);
    held.erase(it);
    ATOLL_RETURN_IF_ERROR(adopt(next));
  }
  return {};
}

Status LearnerCore::adopt(const Broadcast& b) {
  const Fragment& f = fragments_[b.fragment];
  const uint64_t held_version = version(b.fragment);
  std::vector<float> global(f.size);
  ATOLL_RETURN_IF_ERROR(decode_payload(b.values, global).with_context("broadcast of fragment " +
                                                                      std::to_string(b.fragment)));
  if (b.delta) {
    if (b.base_version != held_version)
      return Status::unavailable("broadcast of fragment " + std::to_string(b.fragment) + " version " +
                                 std::to_string(b.version) + " is a difference to version " +
                                 std::to_string(b.base_version) + ", and this learner holds version " +
                                 std::to_string(held_version));
    const std::vector<float>& base = values_[b.fragment].base;
    for (size_t i = 0; i < global.size(); ++i) global[i] += base[i];
  }
  move_onto(b.fragment, b.version, std::move(global), /*may_carry=*/b.version == held_version + 1,
            ledger_.credited_through(b.fragment, b, id_), b.merged.size());
  return {};
}

void LearnerCore::move_onto(uint32_t p, uint64_t version, std::vector<float> global, bool may_carry,
                            std::optional<uint64_t> merged_through, size_t merged_learners) {
  Values& v = values_[p];
  const Fragment& f = fragments_[p];
  std::vector<float> local(f.size);
  gather(f, params_, local);
  const auto& o = topology().outer;
  const FragmentLedger::Move plan = ledger_.plan_move(p, may_carry, merged_through);
  const FragmentLedger::InFlight* merged = plan.merged;
  Values next;
  // The same step as an update, for a replica elsewhere: s * values + b.
  float scale = 0.0f;
  std::vector<float> offset;
  if (plan.carry) {
    // What the new version did not merge: the steps since the merged push, or
    // every step since the base when this learner was not merged.
    const std::vector<float>& reference = merged ? merged->values : v.base;
    // Eager: the progress since the merged push at the share the syncer will
    // give it, not whole; its next push still measures it whole.
    const float share = merged && o.eager_updates ? eager_share(o, merged_learners) : 1.0f;
    if (share < 1.0f) {
      next.push_offset.resize(local.size());
      for (size_t i = 0; i < local.size(); ++i) next.push_offset[i] = (share - 1.0f) * (local[i] - reference[i]);
    } else if (!merged) {
      next.push_offset = std::move(v.push_offset);  // still measured from where it was
    }
    // A translation, also when eager: a replica elsewhere (a Python loop) that
    // stepped on since `local` was read keeps those steps whole, as its next
    // push measures them.
    offset.resize(global.size());
    for (size_t i = 0; i < global.size(); ++i)
      offset[i] = global[i] - reference[i] + (share - 1.0f) * (local[i] - reference[i]);
    for (size_t i = 0; i < local.size(); ++i) local[i] += offset[i];
    scale = 1.0f;
  } else {
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
  // Pushes carried unmerged stay in flight: their values move as the replica's did (share 1, offset).
  for (FragmentLedger::InFlight& push : ledger_.move(p, version, plan))
    for (size_t i = 0; i < offset.size(); ++i) push.values[i] += offset[i];
  scatter(f, local, params_);
  adopted(p, scale, std::move(offset));
  next.base = std::move(global);
  v = std::move(next);
}

Progress LearnerCore::progress() const { return ledger_.progress(id_, incarnation_, static_cast<float>(loss_ema_)); }

LearnerCore::RejectAction LearnerCore::on_reject(const Reject& r, bool registered) {
  if (r.fragment < fragments_.size() && r.reason != RejectReason::kBadToken &&
      r.reason != RejectReason::kFingerprintMismatch) {
    // A replica that went non-finite must start afresh, whatever was refused.
    std::vector<float> mine(fragments_[r.fragment].size);
    gather(fragments_[r.fragment], params_, mine);
    if (!std::all_of(mine.begin(), mine.end(), [](float x) { return std::isfinite(x); })) return RejectAction::kRestart;
  }
  return ledger_.on_reject(r, registered, r.fragment < held_.size() && !held_[r.fragment].empty());
}

std::set<uint32_t> LearnerCore::due_soon() const {
  std::set<uint32_t> out;
  if (!welcomed() || data_parallel()) return out;
  for (uint32_t p = 0; p < fragments_.size(); ++p)
    if (ledger_.due(p, /*ahead=*/1)) out.insert(p);
  return out;
}

bool LearnerCore::blocked() const { return ledger_.blocked(); }

}  // namespace atl
