#include "atoll/syncer_core.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "atoll/cluster_token.h"
#include "atoll/job.h"
#include "atoll/merge.h"
#include "atoll/nesterov.h"

namespace atl {
namespace {

constexpr uint32_t kNoFragment = 0xffffffffu;

double seconds_between(SteadyTime a, SteadyTime b) { return std::chrono::duration<double>(b - a).count(); }

// Why a payload that has the right count did not decode.
RejectReason decode_reason(const Status& s) {
  return s.message().find("finite") != std::string_view::npos ? RejectReason::kNonFinite : RejectReason::kMalformed;
}

}  // namespace

Result<std::unique_ptr<SyncerCore>> SyncerCore::create(const Topology& topology, SteadyTime now,
                                                      std::optional<SteadyTime> started) {
  auto model = make_model(topology);
  if (!model.ok()) return model.status();
  auto fragments = plan_fragments((*model)->layout(), topology);
  if (!fragments.ok()) return fragments.status();
  return std::unique_ptr<SyncerCore>(
      new SyncerCore(topology, std::move(*model), std::move(*fragments), now, started.value_or(now)));
}

SyncerCore::SyncerCore(const Topology& topology, std::unique_ptr<Model> model, std::vector<Fragment> fragments,
                       SteadyTime now, SteadyTime started)
    : topology_(topology),
      model_(std::move(model)),
      fragments_(std::move(fragments)),
      states_(fragments_.size()),
      learners_(topology.learners.size()),
      dropped_(topology.learners.size(), false),
      created_(now),
      start_(started) {
  const std::vector<float> theta = initial_parameters(*model_, topology_);
  initial_crc_ = parameters_crc(theta);
  for (size_t p = 0; p < fragments_.size(); ++p) {
    states_[p].values.resize(fragments_[p].size);
    gather(fragments_[p], theta, states_[p].values);
    states_[p].momentum.assign(fragments_[p].size, 0.0f);
    if (delta_broadcasts()) states_[p].held = states_[p].values;  // what every welcome gives
  }
  if (topology_.mode != Mode::kDecoupled) {
    AdamWConfig c = topology_.inner;
    if (c.total_steps == 0 && topology_.tokens > 0) {
      uint64_t per_step = 0;  // tokens of one synchronous step, all learners
      for (uint32_t m = 0; m < topology_.learners.size(); ++m)
        per_step += static_cast<uint64_t>(tokens_per_step(topology_, m));
      c.total_steps = std::max<int64_t>(c.warmup_steps + 1, static_cast<int64_t>(topology_.tokens / per_step));
    }
    dp_optimizer_ = std::make_unique<AdamW>(model_->layout(), c);
  }
}

Status SyncerCore::restore(const CheckpointState& state) {
  if (state.fingerprint != layout().fingerprint())
    return Status::invalid_argument("checkpoint belongs to another model (fingerprint " +
                                    std::to_string(state.fingerprint) + ")");
  if (state.fragments.size() != fragments_.size())
    return Status::invalid_argument("checkpoint has " + std::to_string(state.fragments.size()) +
                                    " fragments, this run " + std::to_string(fragments_.size()));
  for (const auto& f : state.fragments) {
    if (f.fragment >= fragments_.size() || f.values.size() != fragments_[f.fragment].size)
      return Status::invalid_argument("checkpoint fragment " + std::to_string(f.fragment) + " does not fit this run");
    for (float v : f.values)
      if (!std::isfinite(v)) return Status::invalid_argument("checkpoint holds non-finite parameters");
  }
  if (const auto& o = state.optimizer) {
    if (o->m.size() != layout().size())
      return Status::invalid_argument("checkpoint optimizer state has " + std::to_string(o->m.size()) +
                                      " values, the model " + std::to_string(layout().size()));
    if (dp_optimizer_) ATOLL_RETURN_IF_ERROR(dp_optimizer_->load_state(o->step, o->m, o->v));
    else checkpoint_moments_ = *o;
  }
  restored_ = true;
  for (const auto& f : state.fragments) {
    auto& s = states_[f.fragment];
    s.values = f.values;
    s.momentum = f.momentum;
    s.version = f.version;
    s.open = false;
    s.last = false;
    s.answers.clear();
    s.waiting.clear();
    s.held.clear();  // learners hold versions this syncer does not know
    s.initial = false;
  }
  for (const auto& saved : state.learners) {
    if (saved.learner >= learners_.size()) continue;
    LearnerRecord& l = learners_[saved.learner];
    // A syncer in a new process knows nothing yet: it takes the training
    // counts (its token budget goes on). One restarted in-process has fresher
    // ones from the syncer before it (continue_from) and keeps those.
    if (l.registrations == 0 && l.past_tokens + l.tokens == 0) {
      l.past_steps = saved.past_steps;
      l.past_tokens = saved.past_tokens;
      l.steps = saved.steps;
      l.tokens = saved.tokens;
      l.registrations = saved.incarnation > 0 ? 1 : 0;  // the same incarnation coming back is not new
    }
    l.incarnation = std::max(l.incarnation, saved.incarnation);
  }
  stats_.rounds = std::max(stats_.rounds, state.rounds);
  return {};
}

void SyncerCore::continue_from(const SyncerStats& stats, const std::vector<LearnerRecord>& learners) {
  const uint64_t rounds = stats_.rounds;  // from a checkpoint, if one was restored
  stats_ = stats;
  stats_.rounds = std::max(stats_.rounds, rounds);
  expected_back_.assign(learners_.size(), false);
  for (size_t m = 0; m < learners.size() && m < learners_.size(); ++m) {
    LearnerRecord& l = learners_[m];
    const LearnerRecord& old = learners[m];
    expected_back_[m] = old.connected;
    // The last incarnation's counts stay its own: if it registers again, its
    // next Progress replaces them (its counts are cumulative); a new
    // incarnation folds them into the past when it is welcomed.
    l.incarnation = old.incarnation;
    l.past_steps = old.past_steps;
    l.past_tokens = old.past_tokens;
    l.steps = old.steps;
    l.tokens = old.tokens;
    l.merged = old.merged;
    l.failures = old.failures;
    l.step_seconds = old.step_seconds;
    l.registrations = old.registrations;
  }
}

CheckpointState SyncerCore::checkpoint(int64_t unix_ms) const {
  CheckpointState c;
  c.fingerprint = layout().fingerprint();
  c.created_unix_ms = unix_ms;
  c.rounds = stats_.rounds;
  for (size_t p = 0; p < states_.size(); ++p)
    c.fragments.push_back({static_cast<uint32_t>(p), states_[p].version, states_[p].values, states_[p].momentum});
  for (size_t m = 0; m < learners_.size(); ++m)
    c.learners.push_back({static_cast<uint32_t>(m), learners_[m].incarnation, learners_[m].past_steps,
                          learners_[m].past_tokens, learners_[m].steps, learners_[m].tokens});
  if (!topology_.checkpoint.moments) return c;
  if (dp_optimizer_) {
    const auto m = dp_optimizer_->first_moment(), v = dp_optimizer_->second_moment();
    c.optimizer = CheckpointState::OptimizerRecord{dp_optimizer_->step(), {m.begin(), m.end()}, {v.begin(), v.end()}};
  } else {
    c.optimizer = checkpoint_moments_;
  }
  return c;
}

void SyncerCore::request_checkpoint_moments(SyncerEffects& fx) {
  if (!topology_.checkpoint.moments || topology_.mode != Mode::kDecoupled) return;
  std::optional<uint32_t> most;
  for (uint32_t m = 0; m < learners_.size(); ++m)
    if (learners_[m].connected && learners_[m].steps > 0 && (!most || learners_[m].steps > learners_[*most].steps))
      most = m;
  if (!most) return;
  checkpoint_request_ = next_request_++;
  fx.sends.push_back({*most, MomentsPull{checkpoint_request_}});
}

bool SyncerCore::recovering(SteadyTime now) const {
  if (seconds_between(created_, now) >= kRecoverySeconds) return false;
  for (size_t m = 0; m < expected_back_.size(); ++m)
    if (expected_back_[m] && !learners_[m].connected) return true;
  return false;
}

uint64_t SyncerCore::total_tokens() const {
  uint64_t t = 0;
  for (const auto& l : learners_) t += l.past_tokens + l.tokens;
  return t;
}

std::vector<float> SyncerCore::parameters() const {
  std::vector<float> theta(layout().size());
  for (size_t p = 0; p < fragments_.size(); ++p) scatter(fragments_[p], states_[p].values, theta);
  return theta;
}

// ---- learners

void SyncerCore::refuse(uint32_t learner, RejectReason reason, uint32_t fragment, std::string detail,
                        SyncerEffects& fx) {
  ++stats_.rejected;
  ++stats_.rejected_by_reason[static_cast<size_t>(reason)];
  if (reason == RejectReason::kStale) ++stats_.stale_refused;
  fx.notes.push_back("refused from learner " + std::to_string(learner) + " (" + reject_reason_name(reason) +
                     "): " + detail);
  fx.sends.push_back({learner, Reject{reason, fragment, std::move(detail)}});
}

bool SyncerCore::current(uint32_t learner, uint64_t incarnation) const {
  return learner < learners_.size() && learners_[learner].connected &&
         learners_[learner].incarnation == incarnation;
}

int SyncerCore::connected_count() const {
  int n = 0;
  for (const auto& l : learners_) n += l.connected ? 1 : 0;
  return n;
}

int SyncerCore::effective_quorum() const {
  // Failed learners that are not back leave the set a round waits for, or
  // K = M would hang; learners still joining (or being welcomed) do not.
  int failed = 0;
  for (const auto& l : learners_) failed += (!l.connected && l.down_at) ? 1 : 0;
  const int live = static_cast<int>(learners_.size()) - failed;
  return std::max(1, std::min(topology_.outer.quorum, live));
}

double SyncerCore::slowest_step_seconds() const {
  double t = 0.0;
  for (const auto& l : learners_)
    if (l.connected) t = std::max(t, l.step_seconds);
  return t;
}

bool SyncerCore::admits(const Register& r) const {
  return token_.empty() || check_join_proof(token_, r.token, r.learner, r.incarnation, r.fingerprint);
}

void SyncerCore::on_register(const Register& r, bool same_actor, SteadyTime now, SyncerEffects& fx) {
  if (!admits(r))
    return refuse(r.learner, RejectReason::kBadToken, kNoFragment,
                  r.token.empty() ? "no cluster token given" : "the cluster token does not match", fx);
  if (r.learner >= learners_.size())
    return refuse(r.learner, RejectReason::kUnknownLearner, kNoFragment,
                  "learner " + std::to_string(r.learner) + " is not in this topology of " +
                      std::to_string(learners_.size()),
                  fx);
  if (r.fingerprint != layout().fingerprint())
    return refuse(r.learner, RejectReason::kFingerprintMismatch, kNoFragment,
                  "model fingerprint " + std::to_string(r.fingerprint) + ", the syncer's is " +
                      std::to_string(layout().fingerprint()),
                  fx);
  LearnerRecord& l = learners_[r.learner];
  if (l.connected) {
    if (same_actor && r.incarnation == l.incarnation) {  // a resync: it missed something
      fx.notes.push_back("learner " + std::to_string(r.learner) + " resynchronizes");
      l.initial_crc = r.initial_crc;
      adopt_bases(r, now, fx);
      return welcome(r.learner, r.incarnation, std::nullopt, now, fx);
    }
    if (r.incarnation <= l.incarnation)
      return refuse(r.learner, RejectReason::kDuplicateLearner, kNoFragment,
                    "learner " + std::to_string(r.learner) + " incarnation " + std::to_string(l.incarnation) +
                        " is connected; refused incarnation " + std::to_string(r.incarnation),
                    fx);
  }
  for (const auto& [request, p] : pending_moments_)
    if (p.learner == r.learner && p.incarnation == r.incarnation) return;  // a retry while we ask a peer
  l.initial_crc = r.initial_crc;
  adopt_bases(r, now, fx);
  // A restarted learner starts with a healthy peer's AdamW moments, if there
  // is a peer: fresh moments make its first updates several times too large.
  // (At the start of a run every learner is fresh alike.)
  // After a restore from a checkpoint a learner without bases is not fresh
  // either (a whole restart): the checkpoint's moments stand in for a peer's.
  if (r.bases.empty() && (r.incarnation > 1 || restored_) && topology_.mode == Mode::kDecoupled) {
    std::optional<uint32_t> peer;
    for (uint32_t m = 0; m < learners_.size(); ++m)
      if (m != r.learner && learners_[m].connected && learners_[m].steps > 0 &&
          (!peer || learners_[m].steps > learners_[*peer].steps))
        peer = m;
    if (peer) {
      const uint64_t request = next_request_++;
      pending_moments_[request] = {r.learner, r.incarnation};
      fx.sends.push_back({*peer, MomentsPull{request}});
      fx.timers.push_back({SyncerEffects::TimerKind::kMoments, r.learner, request, kMomentsSeconds});
      return;
    }
    if (const auto& o = checkpoint_moments_)
      return welcome(r.learner, r.incarnation,
                     OptimizerState{o->step, encode_payload(Codec::kBf16, 0, o->m), encode_payload(Codec::kBf16, 0, o->v)},
                     now, fx);
  }
  welcome(r.learner, r.incarnation, std::nullopt, now, fx);
}

void SyncerCore::adopt_bases(const Register& r, SteadyTime now, SyncerEffects& fx) {
  const bool recovering = seconds_between(created_, now) < kRecoverySeconds;
  for (const auto& base : r.bases) {
    if (base.fragment >= states_.size()) continue;
    FragmentState& s = states_[base.fragment];
    if (base.version <= s.version) continue;
    if (!recovering) {
      fx.notes.push_back("learner " + std::to_string(r.learner) + " holds version " + std::to_string(base.version) +
                         " of fragment " + std::to_string(base.fragment) + ", ahead of the syncer's " +
                         std::to_string(s.version) + "; ignored outside recovery");
      continue;
    }
    std::vector<float> values(fragments_[base.fragment].size);
    if (Status st = decode_payload(base.values, values); !st.ok()) {
      fx.notes.push_back("base of fragment " + std::to_string(base.fragment) + " from learner " +
                         std::to_string(r.learner) + " ignored: " + std::string(st.message()));
      continue;
    }
    // The newest version any learner adopted wins; momentum stays the
    // checkpoint's (DESIGN section 6).
    if (s.open) cancel_round(base.fragment, "the fragment was recovered at a newer version", fx);
    s.answers.clear();
    s.values = std::move(values);
    s.version = base.version;
    s.held.clear();  // other learners hold older versions
    s.initial = false;
    ++stats_.recovered_fragments;
    fx.notes.push_back("recovered fragment " + std::to_string(base.fragment) + " at version " +
                       std::to_string(base.version) + " from learner " + std::to_string(r.learner) + "'s base");
    fx.to_all.push_back(broadcast(base.fragment, {}));  // learners welcomed before move forward too
  }
}

void SyncerCore::welcome(uint32_t learner, uint64_t incarnation, std::optional<OptimizerState> moments,
                         SteadyTime now, SyncerEffects& fx) {
  LearnerRecord& l = learners_[learner];
  const bool resync = l.connected && l.incarnation == incarnation;
  if (!resync) {
    // A new incarnation of a learner known before is back after a failure,
    // even one this syncer did not see (it happened while the syncer was down).
    const bool replaced = l.registrations > 0 && incarnation != l.incarnation;
    if (incarnation != l.incarnation || l.registrations == 0) {
      l.past_steps += l.steps;
      l.past_tokens += l.tokens;
      l.steps = l.tokens = 0;
    }
    l.connected = true;
    l.incarnation = incarnation;
    ++l.registrations;
    l.progress.assign(states_.size(), {});
    for (size_t p = 0; p < states_.size(); ++p) l.progress[p].version = states_[p].version;
    l.merged_base.assign(states_.size(), std::nullopt);
    dropped_[learner] = false;
    if (l.down_at || replaced) {
      // Seconds since the failure, when this syncer saw it; unknown (NaN) otherwise.
      double recovery = std::numeric_limits<double>::quiet_NaN();
      if (l.down_at) {
        recovery = seconds_between(*l.down_at, now);
        stats_.recovery_seconds.push_back(recovery);
      }
      fx.events.push_back({"registration", learner, incarnation, recovery});
      l.awaiting_first_merge = now;
      l.down_at.reset();
    }
  }
  Welcome w;
  w.learner = learner;
  w.incarnation = incarnation;
  w.topology = topology_;
  for (uint32_t p = 0; p < states_.size(); ++p) {
    if (states_[p].initial && states_[p].version == 0 && l.initial_crc == initial_crc_)
      w.fragments.push_back({p, 0, Payload{}});  // the learner makes the same values from the seed
    else
      w.fragments.push_back(held_values(p));
  }
  if (moments) ++stats_.moments_handed;
  w.moments = std::move(moments);
  fx.sends.push_back({learner, std::move(w)});
  if (!resync)
    fx.notes.push_back("learner " + std::to_string(learner) + " registered (incarnation " +
                       std::to_string(incarnation) + (w.moments ? ", with a peer's moments)" : ")"));
  if (topology_.mode != Mode::kDecoupled) return check_step(now, fx);
  for (uint32_t p = 0; p < states_.size(); ++p) check_due(p, now, fx);
}

void SyncerCore::on_moments(uint32_t learner, const Moments& m, SteadyTime now, SyncerEffects& fx) {
  if (m.request != 0 && m.request == checkpoint_request_) {
    CheckpointState::OptimizerRecord o{m.state.step, std::vector<float>(layout().size()),
                                       std::vector<float>(layout().size())};
    if (decode_payload(m.state.m, o.m).ok() && decode_payload(m.state.v, o.v).ok() && o.step >= 0)
      checkpoint_moments_ = std::move(o);
    else
      fx.notes.push_back("moments from learner " + std::to_string(learner) + " do not fit the model; not kept");
    checkpoint_request_ = 0;
    return;
  }
  const auto it = pending_moments_.find(m.request);
  if (it == pending_moments_.end()) return;  // answered after the timeout: the learner was welcomed already
  const PendingWelcome pending = it->second;
  pending_moments_.erase(it);
  std::vector<float> check(layout().size());
  std::optional<OptimizerState> moments = m.state;
  if (!decode_payload(m.state.m, check).ok() || !decode_payload(m.state.v, check).ok()) {
    fx.notes.push_back("moments from learner " + std::to_string(learner) + " do not fit the model; not used");
    moments.reset();
  }
  welcome(pending.learner, pending.incarnation, std::move(moments), now, fx);
}

void SyncerCore::on_learner_down(uint32_t learner, SteadyTime now, SyncerEffects& fx) {
  if (learner >= learners_.size()) return;
  // A learner that dies while its welcome waits for a peer's moments is not welcomed.
  std::erase_if(pending_moments_, [&](const auto& kv) { return kv.second.learner == learner; });
  if (!learners_[learner].connected) return;
  LearnerRecord& l = learners_[learner];
  l.connected = false;
  l.down_at = now;
  ++l.failures;
  fx.notes.push_back("learner " + std::to_string(learner) + " is down");
  if (topology_.mode == Mode::kElasticDp)
    fx.timers.push_back({SyncerEffects::TimerKind::kReconfigure, learner, l.failures,
                         topology_.outer.reconfigure_seconds});
  if (topology_.mode != Mode::kDecoupled) return;
  for (uint32_t p = 0; p < states_.size(); ++p) {
    auto& s = states_[p];
    if (s.open) {
      s.waiting.erase(learner);
      check_round(p, now, fx);
    } else {
      check_due(p, now, fx);  // the quorum may be within reach of fewer learners now
    }
  }
}

void SyncerCore::on_malformed(std::optional<uint32_t> learner, const Status& why, SyncerEffects& fx) {
  const RejectReason reason =
      why.code() == Status::Code::kOutOfRange ? RejectReason::kTooLarge : RejectReason::kMalformed;
  if (learner) return refuse(*learner, reason, kNoFragment, std::string(why.message()), fx);
  ++stats_.rejected;
  ++stats_.rejected_by_reason[static_cast<size_t>(reason)];
  fx.notes.push_back("refused a message from an unknown sender: " + std::string(why.message()));
}

void SyncerCore::on_progress(const Progress& m, SteadyTime now, SyncerEffects& fx) {
  if (!current(m.learner, m.incarnation)) return;  // an old incarnation's last words
  if (m.fragments.size() != states_.size())
    return refuse(m.learner, RejectReason::kBadShape, kNoFragment,
                  "progress for " + std::to_string(m.fragments.size()) + " fragments, expected " +
                      std::to_string(states_.size()),
                  fx);
  LearnerRecord& l = learners_[m.learner];
  l.steps = m.step;
  l.tokens = m.tokens;
  // Step times feed the grace window: an absurd one must not become an absurd wait.
  if (std::isfinite(m.step_seconds)) l.step_seconds = std::clamp(m.step_seconds, 0.0, 3600.0);
  if (std::isfinite(m.loss)) l.loss = m.loss;
  l.progress = m.fragments;
  if (topology_.mode != Mode::kDecoupled) return;
  for (uint32_t p = 0; p < states_.size(); ++p) check_due(p, now, fx);
}

// ---- pushes

void SyncerCore::on_push(const Push& m, SteadyTime now, SyncerEffects& fx) {
  if (!current(m.learner, m.incarnation))
    return refuse(m.learner, RejectReason::kUnknownLearner, m.fragment,
                  "learner " + std::to_string(m.learner) + " incarnation " + std::to_string(m.incarnation) +
                      " is not registered",
                  fx);
  if (m.fragment >= states_.size())
    return refuse(m.learner, RejectReason::kUnknownFragment, m.fragment,
                  "fragment " + std::to_string(m.fragment) + " of " + std::to_string(states_.size()), fx);
  FragmentState& s = states_[m.fragment];
  // A refused answer still takes its learner out of the round it answers, or
  // the round would wait for it forever.
  const auto refuse_answer = [&](RejectReason reason, std::string detail) {
    refuse(m.learner, reason, m.fragment, std::move(detail), fx);
    if (s.open && s.waiting.erase(m.learner) > 0) check_round(m.fragment, now, fx);
  };
  if (m.base_version > s.version)
    return refuse_answer(RejectReason::kMalformed, "base version " + std::to_string(m.base_version) +
                                                       " is ahead of the global version " + std::to_string(s.version));
  if (topology_.mode == Mode::kDecoupled && m.round != 0 && (!s.open || m.round != s.round)) {
    ++stats_.late;  // answers a round that already closed: late, whatever its base (not an offence)
    return;
  }
  const auto staleness = static_cast<uint64_t>(topology_.outer.max_staleness);
  if (m.base_version + staleness < s.version)
    return refuse_answer(RejectReason::kStale, "base version " + std::to_string(m.base_version) + " is older than " +
                                                   std::to_string(s.version) + " - " + std::to_string(staleness));
  if ((m.steps == 0) != (m.tokens == 0))
    return refuse_answer(RejectReason::kMalformed, std::to_string(m.steps) + " steps with " +
                                                       std::to_string(m.tokens) + " tokens");
  const size_t size = fragments_[m.fragment].size;
  if (m.delta.count != size)
    return refuse_answer(RejectReason::kBadShape, "payload of " + std::to_string(m.delta.count) +
                                                      " values for a fragment of " + std::to_string(size));
  Answer a{m.base_version, m.steps, m.tokens, std::isfinite(m.seconds) ? std::max(0.0, m.seconds) : 0.0,
           std::vector<float>(size)};
  if (Status st = decode_payload(m.delta, a.delta); !st.ok())
    return refuse_answer(decode_reason(st), std::string(st.message()));
  const auto& merged = learners_[m.learner].merged_base[m.fragment];
  if (merged && m.base_version <= *merged) {
    ++stats_.late;  // this progress (from this base) is in the global model already
    if (s.open && s.waiting.erase(m.learner) > 0) check_round(m.fragment, now, fx);
    return;
  }

  if (topology_.mode != Mode::kDecoupled) {
    if (m.base_version != s.version || m.steps == 0) {  // a gradient for a step already applied
      ++stats_.late;
      return;
    }
    s.answers[m.learner] = std::move(a);
    return check_step(now, fx);
  }

  if (s.open) {
    // An unasked push does not answer a last pull: the answer to come holds more progress.
    if (!s.last || m.round != 0) s.waiting.erase(m.learner);
    s.answers[m.learner] = std::move(a);
    return check_round(m.fragment, now, fx);
  }
  if (m.base_version != s.version) {
    ++stats_.late;  // pushed unasked on a version already replaced
    return;
  }
  if (a.steps > 0) s.answers[m.learner] = std::move(a);  // early: counts when the round opens
  check_due(m.fragment, now, fx);
}

// ---- decoupled rounds

void SyncerCore::check_due(uint32_t p, SteadyTime now, SyncerEffects& fx) {
  FragmentState& s = states_[p];
  if (s.open || flushing()) return;
  const uint64_t threshold =
      steps_until_due(static_cast<int>(p), static_cast<int>(states_.size()), sync_interval(topology_.outer, s.version),
                      s.version);
  int due = 0;
  for (uint32_t m = 0; m < learners_.size(); ++m) {
    const auto& l = learners_[m];
    if (!l.connected) continue;
    const auto it = s.answers.find(m);
    const bool pushed = it != s.answers.end() && it->second.base_version == s.version && it->second.steps >= threshold;
    const bool reported = p < l.progress.size() && l.progress[p].version == s.version && l.progress[p].steps >= threshold;
    due += (pushed || reported) ? 1 : 0;
  }
  if (due >= effective_quorum()) open_round(p, now, fx);
}

void SyncerCore::open_round(uint32_t p, SteadyTime now, SyncerEffects& fx) {
  FragmentState& s = states_[p];
  s.open = true;
  s.round = next_round_++;
  s.opened = now;
  s.quorum = false;
  s.waiting.clear();
  const auto staleness = static_cast<uint64_t>(topology_.outer.max_staleness);
  std::erase_if(s.answers, [&](const auto& kv) { return kv.second.base_version + staleness < s.version; });
  for (uint32_t m = 0; m < learners_.size(); ++m) {
    if (!learners_[m].connected) continue;
    const auto it = s.answers.find(m);
    if (it != s.answers.end() && it->second.base_version == s.version && it->second.steps > 0)
      continue;  // pushed its progress unasked: already answered
    s.waiting.insert(m);
    fx.sends.push_back({m, Pull{p, s.round}});
  }
  fx.timers.push_back({SyncerEffects::TimerKind::kQuorum, p, s.round, quorum_deadline_seconds()});
  check_round(p, now, fx);
}

double SyncerCore::quorum_deadline_seconds() const {
  // Generous: a due learner answers within about one of its steps.
  return std::max(1.0, 20.0 * slowest_step_seconds());
}

double SyncerCore::grace_seconds(const FragmentState& s) const {
  const auto& o = topology_.outer;
  const double step = slowest_step_seconds();
  const double to_quorum = seconds_between(s.opened, s.quorum_at);
  const double grace = o.grace_gamma * (o.overlap * step - to_quorum);
  return std::clamp(grace, 0.0, o.grace_cap_steps * step);
}

void SyncerCore::check_round(uint32_t p, SteadyTime now, SyncerEffects& fx) {
  FragmentState& s = states_[p];
  if (!s.open) return;
  if (s.last) {
    if (s.waiting.empty()) close_last_round(p, now, fx);
    return;
  }
  int with_progress = 0;
  for (const auto& [m, a] : s.answers) with_progress += a.steps > 0 ? 1 : 0;
  if (!s.quorum && with_progress >= effective_quorum()) {
    s.quorum = true;
    s.quorum_at = now;
    const double grace = grace_seconds(s);
    if (!s.waiting.empty() && grace > 0.0) {
      fx.timers.push_back({SyncerEffects::TimerKind::kGrace, p, s.round, grace});
      return;
    }
    return close_round(p, now, fx);
  }
  if (s.waiting.empty()) {
    if (s.quorum) return close_round(p, now, fx);
    cancel_round(p, "everyone pulled answered or failed, and the quorum is still short", fx);
  }
}

void SyncerCore::cancel_round(uint32_t p, const std::string& why, SyncerEffects& fx) {
  FragmentState& s = states_[p];
  s.open = false;
  s.waiting.clear();
  // Answers with progress wait for the next round; empty ones would only make
  // it open again without anyone to pull.
  std::erase_if(s.answers, [](const auto& kv) { return kv.second.steps == 0; });
  ++stats_.cancelled_rounds;
  fx.notes.push_back("round " + std::to_string(s.round) + " of fragment " + std::to_string(p) + " cancelled: " + why);
}

void SyncerCore::close_round(uint32_t p, SteadyTime now, SyncerEffects& fx) {
  FragmentState& s = states_[p];
  const auto& o = topology_.outer;
  const auto staleness = static_cast<uint64_t>(o.max_staleness);
  std::vector<Contribution> cs;
  std::vector<std::pair<uint32_t, uint64_t>> who;  // learner, base version
  double good = 0.0;
  for (const auto& [m, a] : s.answers) {
    if (a.steps == 0 || a.base_version + staleness < s.version) continue;
    cs.push_back({a.delta, o.weighting == Weighting::kUniform ? 1.0 : token_weight(a.tokens, a.steps)});
    who.emplace_back(m, a.base_version);
    good += a.seconds;
  }
  Fragment rule_of = fragments_[p];
  if (o.force_avg) rule_of.rule = MergeRule::kAvg;
  std::vector<float> g(fragments_[p].size);
  if (!merge_fragment(rule_of, cs, g)) return cancel_round(p, "no answer carried weight", fx);
  for (float& x : g) x = -x;  // outer gradient: base - theta
  NesterovConfig outer = o.nesterov;
  if (o.lr_warmup_rounds > 0)  // round k of this fragment (k = its version) steps with (k+1)/W of lr
    outer.lr *= std::min(1.0f, static_cast<float>(s.version + 1) / static_cast<float>(o.lr_warmup_rounds));
  // The outer step on copies: a finite but huge update can still overflow.
  std::vector<float> values = s.values, momentum = s.momentum;
  nesterov_step(outer, values, momentum, g);
  if (!std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); }) ||
      !std::all_of(momentum.begin(), momentum.end(), [](float v) { return std::isfinite(v); })) {
    ++stats_.discarded_rounds;
    cancel_round(p, "the merged update is not finite; the round is discarded", fx);
    s.answers.clear();
    return;
  }
  s.values = std::move(values);
  s.momentum = std::move(momentum);
  s.initial = false;
  ++s.version;
  s.open = false;
  s.answers.clear();
  s.waiting.clear();

  ++stats_.rounds;
  stats_.merged_pushes += cs.size();
  stats_.quorum_sum += static_cast<double>(cs.size());
  stats_.grace_wait_sum += seconds_between(s.quorum_at, now);
  // A step's time is spread over fragments by their share of the parameters.
  stats_.good_seconds += good * static_cast<double>(fragments_[p].size) / static_cast<double>(layout().size());
  stats_.round_ends.push_back(elapsed(now));
  std::vector<uint32_t> merged;
  for (const auto& [m, base] : who) {
    LearnerRecord& l = learners_[m];
    ++l.merged;
    merged.push_back(m);
    if (p < l.merged_base.size()) l.merged_base[p] = base;
    if (l.awaiting_first_merge) {
      fx.events.push_back({"first_merge", m, l.incarnation, seconds_between(*l.awaiting_first_merge, now)});
      l.awaiting_first_merge.reset();
    }
  }
  fx.to_all.push_back(broadcast(p, std::move(merged)));
}

// ---- the end of a run

double SyncerCore::flush_seconds() const { return std::clamp(3.0 * slowest_step_seconds(), 1.0, 30.0); }

void SyncerCore::begin_flush(SteadyTime now, SyncerEffects& fx) {
  if (flushing()) return;
  if (topology_.mode != Mode::kDecoupled || !topology_.outer.final_flush) {
    flush_ = Flush::kDone;
    return;
  }
  flush_ = Flush::kFlushing;
  fx.notes.push_back("the run is ending: a last round for every fragment");
  fx.timers.push_back({SyncerEffects::TimerKind::kFlush, 0, 0, flush_seconds()});
  for (uint32_t p = 0; p < states_.size(); ++p) open_last_round(p, now, fx);
}

void SyncerCore::open_last_round(uint32_t p, SteadyTime now, SyncerEffects& fx) {
  FragmentState& s = states_[p];
  // A round still open becomes the last one: the answers it has stay, and a
  // learner's last answer replaces its earlier one.
  s.open = true;
  s.last = true;
  s.round = next_round_++;
  s.opened = now;
  s.waiting.clear();
  const auto staleness = static_cast<uint64_t>(topology_.outer.max_staleness);
  std::erase_if(s.answers, [&](const auto& kv) { return kv.second.base_version + staleness < s.version; });
  for (uint32_t m = 0; m < learners_.size(); ++m) {
    if (!learners_[m].connected) continue;
    s.waiting.insert(m);
    fx.sends.push_back({m, Pull{p, s.round, true}});
  }
  check_round(p, now, fx);
}

void SyncerCore::close_last_round(uint32_t p, SteadyTime now, SyncerEffects& fx) {
  FragmentState& s = states_[p];
  const bool progress = std::any_of(s.answers.begin(), s.answers.end(), [](const auto& kv) { return kv.second.steps > 0; });
  if (progress) {
    s.quorum_at = now;  // no grace wait in a last round
    close_round(p, now, fx);
  }
  s.open = s.last = false;
  s.waiting.clear();
  s.answers.clear();
  if (std::none_of(states_.begin(), states_.end(), [](const FragmentState& f) { return f.open; })) {
    flush_ = Flush::kDone;
    fx.notes.push_back("every fragment had its last round: the model is final");
  }
}

// ---- broadcasts

bool SyncerCore::delta_broadcasts() const {
  return topology_.mode == Mode::kDecoupled && is_quantized(topology_.outer.broadcast_codec);
}

FragmentValues SyncerCore::held_values(uint32_t p) const {
  const FragmentState& s = states_[p];
  if (!delta_broadcasts()) {
    const Codec codec = topology_.mode == Mode::kDecoupled ? topology_.outer.broadcast_codec : Codec::kFp32;
    return {p, s.version, encode_payload(codec, 0, s.values)};
  }
  return {p, s.version, encode_payload(Codec::kFp32, 0, s.held.empty() ? s.values : s.held)};
}

Broadcast SyncerCore::broadcast(uint32_t p, std::vector<uint32_t> merged) {
  FragmentState& s = states_[p];
  Broadcast b{p, s.version, {}, false, 0, std::move(merged)};
  if (!delta_broadcasts()) {
    b.values = held_values(p).values;
    return b;
  }
  if (s.held.empty()) {  // learners may hold any version: send the values once
    b.values = encode_payload(Codec::kFp32, 0, s.values);
    s.held = s.values;
    return b;
  }
  std::vector<float> diff(s.values.size());
  for (size_t i = 0; i < diff.size(); ++i) diff[i] = s.values[i] - s.held[i];
  b.values = encode_payload(topology_.outer.broadcast_codec, topology_.outer.broadcast_block, diff);
  b.delta = true;
  b.base_version = s.version - 1;
  // Learners add exactly what decodes; what rounding left out stays in values - held.
  if (!decode_payload(b.values, diff).ok()) {  // cannot happen for finite values; be safe all the same
    b = Broadcast{p, s.version, encode_payload(Codec::kFp32, 0, s.values), false, 0, std::move(b.merged)};
    s.held = s.values;
    return b;
  }
  for (size_t i = 0; i < diff.size(); ++i) s.held[i] += diff[i];
  return b;
}

void SyncerCore::on_timer(const SyncerEffects::Timer& t, SteadyTime now, SyncerEffects& fx) {
  if (t.kind == SyncerEffects::TimerKind::kReconfigure) {
    // Only for the failure that set it: a learner that came back and failed
    // again has its own timer.
    if (t.id < learners_.size() && !learners_[t.id].connected && learners_[t.id].failures == t.round) {
      dropped_[t.id] = true;
      fx.notes.push_back("elastic group shrinks without learner " + std::to_string(t.id));
      check_step(now, fx);
    }
    return;
  }
  if (t.kind == SyncerEffects::TimerKind::kFlush) {
    for (uint32_t p = 0; p < states_.size(); ++p)
      if (states_[p].open && states_[p].last) close_last_round(p, now, fx);
    return;
  }
  if (t.kind == SyncerEffects::TimerKind::kMoments) {
    const auto it = pending_moments_.find(t.round);
    if (it == pending_moments_.end()) return;
    const PendingWelcome pending = it->second;
    pending_moments_.erase(it);
    fx.notes.push_back("no peer moments for learner " + std::to_string(pending.learner) + " in time");
    return welcome(pending.learner, pending.incarnation, std::nullopt, now, fx);
  }
  if (t.id >= states_.size()) return;
  FragmentState& s = states_[t.id];
  if (!s.open || s.round != t.round) return;
  if (t.kind == SyncerEffects::TimerKind::kGrace) return close_round(t.id, now, fx);
  if (!s.quorum) {
    cancel_round(t.id, "no quorum within " + std::to_string(quorum_deadline_seconds()) + " s; pulling again", fx);
    check_due(t.id, now, fx);
  }
}


// ---- dp and elastic_dp

bool SyncerCore::in_group(uint32_t m) const {
  if (topology_.mode == Mode::kDp) return true;  // waits for every learner, dead or alive
  return learners_[m].connected || !dropped_[m];
}

void SyncerCore::check_step(SteadyTime now, SyncerEffects& fx) {
  FragmentState& s = states_[0];
  std::vector<Contribution> cs;
  double good = 0.0;
  for (uint32_t m = 0; m < learners_.size(); ++m) {
    if (!in_group(m)) continue;
    const auto it = s.answers.find(m);
    if (it == s.answers.end()) return;  // the barrier: someone has not sent this step's gradient
    cs.push_back({it->second.delta, static_cast<double>(it->second.tokens)});
    good += it->second.seconds;
  }
  double weight = 0.0;
  for (const auto& c : cs) weight += c.weight;
  if (cs.empty() || weight <= 0.0) return;
  std::vector<float> g(s.values.size());
  weighted_mean(cs, g);
  // AdamW keeps g^2: a gradient whose square overflows would poison it for good.
  if (!std::all_of(g.begin(), g.end(), [](float v) { return std::isfinite(v * v); })) {
    ++stats_.discarded_rounds;
    fx.notes.push_back("step of version " + std::to_string(s.version) + " discarded: the mean gradient overflows");
    for (const auto& [m, a] : s.answers)  // not the learners' fault: ask them for a fresh gradient
      fx.sends.push_back({m, Reject{RejectReason::kNonFinite, 0, "the mean gradient overflowed; compute again"}});
    s.answers.clear();
    return;
  }
  dp_optimizer_->update(s.values, g);
  s.initial = false;
  ++s.version;
  ++stats_.rounds;
  stats_.merged_pushes += cs.size();
  stats_.quorum_sum += static_cast<double>(cs.size());
  stats_.good_seconds += good;
  stats_.round_ends.push_back(elapsed(now));
  for (const auto& [m, a] : s.answers) {
    LearnerRecord& l = learners_[m];
    ++l.merged;
    if (l.awaiting_first_merge) {
      fx.events.push_back({"first_merge", m, l.incarnation, seconds_between(*l.awaiting_first_merge, now)});
      l.awaiting_first_merge.reset();
    }
  }
  s.answers.clear();
  fx.to_all.push_back(broadcast(0, {}));
}

}  // namespace atl
