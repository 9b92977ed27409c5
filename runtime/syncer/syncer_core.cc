#include "atoll/syncer_core.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "atoll/cluster_token.h"
#include "atoll/huge_pages.h"
#include "atoll/job.h"
#include "round_protocol.h"
#include "syncer_state.h"

namespace atl {
namespace {

// Why a payload that has the right count did not decode.
RejectReason reject_reason(DecodeFault fault) {
  return fault == DecodeFault::kNonFinite ? RejectReason::kNonFinite : RejectReason::kMalformed;
}

}  // namespace

// ---- the state both the core and the round protocol use

bool SyncerState::counts_toward_quorum(uint32_t m) const {
  const LearnerRecord& l = learners[m];
  if (!l.member || l.leaving != LearnerRecord::Leaving::kNo) return false;
  if (!open_slot(m)) return l.connected || !l.down_at;
  return l.connected && l.qualified;
}

double SyncerState::slowest_step_seconds() const {
  double t = 0.0;
  for (uint32_t m = 0; m < learners.size(); ++m)
    if (present(m)) t = std::max(t, learners[m].step_seconds);
  return t;
}

void SyncerState::refuse(uint32_t learner, RejectReason reason, uint32_t fragment, std::string detail,
                         SyncerEffects& fx) {
  ++stats.rejected;
  if (reason == RejectReason::kStale) ++stats.stale_refused;
  fx.notes.push_back("refused from learner " + std::to_string(learner) + " (" + reject_reason_name(reason) +
                     "): " + detail);
  fx.sends.push_back({learner, Reject{reason, fragment, std::move(detail)}});
}

bool SyncerState::delta_broadcasts() const {
  return topology.mode == Mode::kDecoupled && is_quantized(topology.outer.broadcast_codec);
}

FragmentValues SyncerState::held_values(uint32_t p) const {
  const GlobalFragment& g = global[p];
  if (!delta_broadcasts()) {
    const Codec codec = topology.mode == Mode::kDecoupled ? topology.outer.broadcast_codec : Codec::kFp32;
    return {p, g.version, encode_payload(codec, 0, g.values)};
  }
  return {p, g.version, encode_payload(Codec::kFp32, 0, g.held.empty() ? g.values : g.held)};
}

Broadcast SyncerState::broadcast(uint32_t p, std::vector<uint32_t> merged, SteadyTime now) {
  GlobalFragment& g = global[p];
  g.broadcast_at = now;
  g.adopting.assign(learners.size(), false);
  g.adopting_left = 0;
  for (uint32_t m = 0; m < learners.size(); ++m)
    if (learners[m].connected) {
      g.adopting[m] = true;
      ++g.adopting_left;
    }
  Broadcast b{p, g.version, {}, false, 0, std::move(merged)};
  if (!delta_broadcasts()) {
    b.values = held_values(p).values;
    return b;
  }
  if (g.held.empty()) {  // learners may hold any version: send the values once
    b.values = encode_payload(Codec::kFp32, 0, g.values);
    reserve_huge(g.held, g.values.size());
    g.held = g.values;
    return b;
  }
  const std::span<float> diff = scratch(work, g.values.size());
  for (size_t i = 0; i < diff.size(); ++i) diff[i] = g.values[i] - g.held[i];
  b.values = encode_payload(topology.outer.broadcast_codec, topology.outer.broadcast_block, diff);
  b.delta = true;
  b.base_version = g.version - 1;
  // Learners add exactly what decodes; what rounding left out stays in values - held.
  if (!decode_payload(b.values, diff).ok()) {  // cannot happen for finite values; be safe all the same
    b = Broadcast{p, g.version, encode_payload(Codec::kFp32, 0, g.values), false, 0, std::move(b.merged)};
    g.held = g.values;
    return b;
  }
  for (size_t i = 0; i < diff.size(); ++i) g.held[i] += diff[i];
  return b;
}

void SyncerState::reserve_scratch() {
  size_t largest = 0;
  for (uint32_t p = 0; p < fragments.size(); ++p)
    if (owns(p)) largest = std::max(largest, fragments[p].size);
  for (std::vector<float>* v : {&decoded, &work}) {
    reserve_huge(*v, largest);
    v->resize(largest);  // touched once, here
  }
}

Broadcast SyncerState::repair(uint32_t p, uint32_t learner) const {
  FragmentValues v = held_values(p);
  return Broadcast{p, v.version, std::move(v.values), false, 0, {learner}, {merged_through(learner, p)}, /*repair=*/true};
}

uint64_t SyncerState::merged_through(uint32_t learner, uint32_t p) const {
  const LearnerRecord& l = learners[learner];
  return l.merges_known && p < l.merged_through.size() ? l.merged_through[p] : FragmentValues::kUnknownMerged;
}

void SyncerState::note_merged(uint32_t learner, SteadyTime now, SyncerEffects& fx) {
  LearnerRecord& l = learners[learner];
  ++l.merged;
  l.qualified = true;  // merged progress: it has trained on a version it adopted
  if (l.awaiting_first_merge) {
    fx.events.push_back(event::FirstMerge{learner, l.incarnation, seconds_between(*l.awaiting_first_merge, now)});
    l.awaiting_first_merge.reset();
  }
}

// ---- creation, checkpoints

Result<std::unique_ptr<SyncerCore>> SyncerCore::create(const Topology& topology, SteadyTime now,
                                                      std::optional<SteadyTime> started, uint32_t shard) {
  if (shard >= static_cast<uint32_t>(topology.syncer.shards))
    return Status::invalid_argument("shard " + std::to_string(shard) + " of " + std::to_string(topology.syncer.shards) +
                                    ": shards count from 0 to syncer.shards - 1");

  auto model = make_model(topology);
  if (!model.ok()) return model.status();
  auto fragments = plan_fragments((*model)->layout(), topology);
  if (!fragments.ok()) return fragments.status();
  auto s = std::make_unique<SyncerState>();
  s->topology = topology;
  s->model = std::move(*model);
  s->fragments = std::move(*fragments);
  s->global.resize(s->fragments.size());
  s->learners.resize(learner_slots(topology));
  s->fixed = static_cast<uint32_t>(topology.learners.size());
  for (uint32_t m = 0; m < s->fixed; ++m) s->learners[m].member = true;  // from the start (member_since 0)
  s->created = now;
  s->start = started.value_or(now);
  s->shard = shard;
  return std::unique_ptr<SyncerCore>(new SyncerCore(std::move(s)));
}

SyncerCore::SyncerCore(std::unique_ptr<SyncerState> state) : s_(std::move(state)) {
  const std::vector<float> theta = initial_parameters(*s_->model, s_->topology);
  initial_crc_ = parameters_crc(theta);
  for (uint32_t p = 0; p < s_->fragments.size(); ++p) {
    if (!s_->owns(p)) continue;  // another shard's: held there
    GlobalFragment& g = s_->global[p];
    const size_t n = s_->fragments[p].size;
    reserve_huge(g.values, n);
    g.values.resize(n);
    gather(s_->fragments[p], theta, g.values);
    reserve_huge(g.momentum, n);
    g.momentum.assign(n, 0.0f);
    if (s_->delta_broadcasts()) {
      reserve_huge(g.held, n);
      g.held = g.values;  // what every welcome gives
    }
  }
  s_->reserve_scratch();
  rounds_ = s_->topology.mode == Mode::kDecoupled ? make_decoupled_rounds(*s_) : make_synchronous_rounds(*s_);
}

SyncerCore::~SyncerCore() = default;

const Topology& SyncerCore::topology() const { return s_->topology; }
const ParamLayout& SyncerCore::layout() const { return s_->layout(); }
const std::vector<Fragment>& SyncerCore::fragments() const { return s_->fragments; }
uint64_t SyncerCore::version(uint32_t fragment) const { return s_->global[fragment].version; }
uint32_t SyncerCore::shard() const { return s_->shard; }
size_t SyncerCore::owned_parameters() const {
  size_t n = 0;
  for (uint32_t p = 0; p < s_->fragments.size(); ++p) n += s_->owns(p) ? s_->fragments[p].size : 0;
  return n;
}
bool SyncerCore::owns(uint32_t fragment) const { return fragment < s_->fragments.size() && s_->owns(fragment); }
const SyncerStats& SyncerCore::stats() const { return s_->stats; }
void SyncerCore::count_bytes(uint64_t received, uint64_t sent) {
  s_->stats.bytes_received += received;
  s_->stats.bytes_sent += sent;
}
const std::vector<LearnerRecord>& SyncerCore::learners() const { return s_->learners; }
double SyncerCore::elapsed(SteadyTime now) const { return s_->elapsed(now); }
SteadyTime SyncerCore::run_start() const { return s_->start; }
bool SyncerCore::flushing() const { return rounds_->flushing(); }
bool SyncerCore::flushed() const { return rounds_->flushed(); }

void SyncerCore::on_finished(SteadyTime now) {
  if (s_->stats.final_seconds < 0) s_->stats.final_seconds = s_->elapsed(now);
}

Status SyncerCore::restore(const CheckpointState& state, std::optional<SteadyTime> now) {
  if (state.fingerprint != layout().fingerprint())
    return Status::invalid_argument("checkpoint belongs to another model (fingerprint " +
                                    std::to_string(state.fingerprint) + ")");
  // Fragments of the same sizes under another plan would be read as the wrong parameters.
  if (const uint64_t plan = plan_fingerprint(s_->fragments); state.plan_fingerprint != 0 && state.plan_fingerprint != plan)
    return Status::invalid_argument("checkpoint was written for another fragment plan (plan fingerprint " +
                                    std::to_string(state.plan_fingerprint) + ", this run's " + std::to_string(plan) +
                                    "): outer.fragments or syncer.shards differ from the run that wrote it");
  size_t owned = 0;
  for (uint32_t p = 0; p < s_->fragments.size(); ++p) owned += s_->owns(p) ? 1 : 0;
  if (state.fragments.size() != owned)
    return Status::invalid_argument("checkpoint has " + std::to_string(state.fragments.size()) +
                                    " fragments, this syncer " + std::to_string(owned) +
                                    (owned == s_->fragments.size() ? "" : " (shard " + std::to_string(s_->shard) + ")"));
  for (const auto& f : state.fragments) {
    if (f.fragment >= s_->fragments.size() || f.values.size() != s_->fragments[f.fragment].size)
      return Status::invalid_argument("checkpoint fragment " + std::to_string(f.fragment) + " does not fit this run");
    if (!s_->owns(f.fragment))
      return Status::invalid_argument("checkpoint fragment " + std::to_string(f.fragment) + " belongs to shard " +
                                      std::to_string(shard_of(f.fragment, s_->topology.syncer.shards)) +
                                      ", not to shard " + std::to_string(s_->shard));
    for (float v : f.values)
      if (!std::isfinite(v)) return Status::invalid_argument("checkpoint holds non-finite parameters");
  }
  if (const auto& o = state.optimizer) {
    if (o->m.size() != owned_parameters())
      return Status::invalid_argument("checkpoint optimizer state has " + std::to_string(o->m.size()) +
                                      " values, this syncer's fragments " + std::to_string(owned_parameters()) +
                                      (owned == s_->fragments.size() ? "" : " (shard " + std::to_string(s_->shard) + ")"));
    if (Status st = rounds_->restore_optimizer(*o); st.code() == Status::Code::kNotFound) checkpoint_moments_ = *o;
    else ATOLL_RETURN_IF_ERROR(st);
  }
  restored_ = true;
  if (now) s_->created = *now;  // the recovery window starts once the checkpoint is in
  for (const auto& f : state.fragments) {
    GlobalFragment& g = s_->global[f.fragment];
    g.values = f.values;
    g.momentum = f.momentum;
    g.pending.clear();
    g.version = f.version;
    g.held.clear();  // learners hold versions this syncer does not know
    g.initial = false;
    rounds_->fragment_replaced(f.fragment, nullptr);
  }
  for (const auto& saved : state.learners) {
    if (saved.learner >= s_->learners.size()) continue;
    LearnerRecord& l = s_->learners[saved.learner];
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
    // A member of an open slot may come back to it: nobody else takes it meanwhile.
    if (s_->open_slot(saved.learner) && saved.member && !l.connected && l.reserved_for == 0) {
      l.reserved_for = saved.process;
      l.reserved_until = s_->created + std::chrono::duration_cast<SteadyTime::duration>(
                                           std::chrono::duration<double>(kHoldSeconds));
    }
  }
  s_->stats.rounds = std::max(s_->stats.rounds, state.rounds);
  return {};
}

void SyncerCore::continue_from(SyncerFigures figures, SteadyTime now, int64_t unix_ms) {
  // The run's clock goes on: its start is the one the figures count from.
  // A wall clock behind the writer's (another host) must not run the
  // shard's time backwards: at least the figures' seconds have passed.
  const double since = std::max(figures.seconds, 1e-3 * double(unix_ms - figures.started_unix_ms));
  s_->start = now - std::chrono::duration_cast<SteadyTime::duration>(std::chrono::duration<double>(since));
  // What restore() decided for open slots stands: the figures hold none.
  for (size_t m = 0; m < figures.learners.size() && m < s_->learners.size(); ++m) {
    figures.learners[m].reserved_for = s_->learners[m].reserved_for;
    figures.learners[m].reserved_until = s_->learners[m].reserved_until;
  }
  // Restarted to train on: final again when this process's last rounds close.
  figures.stats.final_seconds = -1.0;
  continue_from(figures.stats, figures.learners);
}

SyncerFigures SyncerCore::figures(SteadyTime now, int64_t unix_ms, double cpu_seconds) const {
  SyncerFigures f;
  f.seconds = s_->elapsed(now);
  f.started_unix_ms = unix_ms - static_cast<int64_t>(std::llround(1e3 * f.seconds));
  f.tokens = total_tokens();
  f.allocated_seconds = allocated_seconds(now);
  f.cpu_seconds = cpu_seconds;
  f.stats = s_->stats;
  f.learners = s_->learners;
  return f;
}

void SyncerCore::continue_from(const SyncerStats& stats, const std::vector<LearnerRecord>& learners,
                               std::optional<SteadyTime> start) {
  if (start) s_->start = *start;
  const uint64_t rounds = s_->stats.rounds;  // from a checkpoint, if one was restored
  s_->stats = stats;
  s_->stats.rounds = std::max(s_->stats.rounds, rounds);
  for (size_t m = 0; m < learners.size() && m < s_->learners.size(); ++m) {
    LearnerRecord& l = s_->learners[m];
    const LearnerRecord& old = learners[m];
    l.expected_back = old.connected;
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
    // Membership goes on. A leaver departed at its Leave (not a member); its
    // last answers went with the old syncer, and if it registers again it
    // joins anew.
    l.member = old.member;
    l.qualified = old.qualified;
    l.member_seconds = old.member_seconds;
    l.member_since = old.member_since;
    l.departures = old.departures;
    l.reserved_for = old.reserved_for;
    l.reserved_until = old.reserved_until;
  }
}

CheckpointView SyncerCore::checkpoint(int64_t unix_ms) const {
  CheckpointView c;
  c.fingerprint = layout().fingerprint();
  c.plan_fingerprint = plan_fingerprint(s_->fragments);
  c.created_unix_ms = unix_ms;
  c.rounds = s_->stats.rounds;
  for (uint32_t p = 0; p < s_->global.size(); ++p) {
    if (!s_->owns(p)) continue;
    const GlobalFragment& g = s_->global[p];
    c.fragments.push_back({static_cast<uint32_t>(p), g.version, g.values, g.momentum});
  }
  for (size_t m = 0; m < s_->learners.size(); ++m) {
    const LearnerRecord& l = s_->learners[m];
    c.learners.push_back({static_cast<uint32_t>(m), l.incarnation, l.past_steps, l.past_tokens, l.steps, l.tokens,
                          l.member, l.sender.process});
  }
  if (!s_->topology.checkpoint.moments) return c;
  if (auto o = rounds_->optimizer()) c.optimizer = o;
  else if (const auto& m = checkpoint_moments_) c.optimizer = CheckpointView::OptimizerRecord{m->step, m->m, m->v};
  return c;
}

void SyncerCore::request_checkpoint_moments(SyncerEffects& fx) {
  if (!s_->topology.checkpoint.moments || s_->topology.mode != Mode::kDecoupled) return;
  std::optional<uint32_t> most;
  for (uint32_t m = 0; m < s_->learners.size(); ++m) {
    const LearnerRecord& l = s_->learners[m];
    if (l.connected && l.steps > 0 && (!most || l.steps > s_->learners[*most].steps)) most = m;
  }
  if (!most) return;
  checkpoint_request_ = next_request_++;
  fx.sends.push_back({*most, MomentsPull{checkpoint_request_, s_->shard}});
}

bool SyncerCore::recovering(SteadyTime now) const {
  if (seconds_between(s_->created, now) >= kRecoverySeconds) return false;
  return std::any_of(s_->learners.begin(), s_->learners.end(),
                     [](const LearnerRecord& l) { return l.expected_back && !l.connected; });
}

uint64_t SyncerCore::total_tokens() const {
  uint64_t t = 0;
  for (const auto& l : s_->learners) t += l.past_tokens + l.tokens;
  return t;
}

std::vector<float> SyncerCore::parameters() const {
  std::vector<float> theta(layout().size());
  for (uint32_t p = 0; p < s_->fragments.size(); ++p)
    if (s_->owns(p)) scatter(s_->fragments[p], s_->global[p].values, theta);
  return theta;
}

// ---- learners

void SyncerCore::refuse(uint32_t learner, RejectReason reason, uint32_t fragment, std::string detail,
                        SyncerEffects& fx) {
  s_->refuse(learner, reason, fragment, std::move(detail), fx);
}

bool SyncerCore::current(uint32_t learner, uint64_t incarnation) const {
  return learner < s_->learners.size() && s_->learners[learner].connected &&
         s_->learners[learner].incarnation == incarnation;
}

Admission SyncerCore::admit(const Register& r, const Sender& from) const {
  using V = Admission::Verdict;
  // The token first: a stranger learns nothing about the run.
  if (!token_.empty() && !check_join_proof(token_, r.token, r.learner, r.incarnation, r.fingerprint))
    return Admission::refuse(RejectReason::kBadToken,
                             r.token.empty() ? "no cluster token given" : "the cluster token does not match");
  if (r.learner >= s_->learners.size())
    return Admission::refuse(RejectReason::kUnknownLearner, "learner " + std::to_string(r.learner) +
                                                                " is not in this topology of " +
                                                                std::to_string(s_->learners.size()));
  const LearnerRecord& l = s_->learners[r.learner];
  const bool bound = l.sender.actor != 0;
  const bool same_sender = bound && l.sender == from;
  // Another process holds this id and its sender is alive (else its down
  // would have unbound it): two processes were given one id. (A restart in
  // the same process is a new sender with a new incarnation instead.)
  if (bound && !same_sender && l.sender.process != from.process)
    return Admission::refuse(RejectReason::kDuplicateLearner,
                             "learner " + std::to_string(r.learner) + " is already connected from another process");
  // A new process has a new incarnation: an old or current one from
  // elsewhere is a replay, not its owner.
  if (l.sender.process != 0 && l.sender.process != from.process && r.incarnation <= l.incarnation)
    return Admission::refuse(RejectReason::kDuplicateLearner, "incarnation " + std::to_string(r.incarnation) +
                                                                  " of learner " + std::to_string(r.learner) +
                                                                  " registered from another process");
  if (r.fingerprint != layout().fingerprint())
    return Admission::refuse(RejectReason::kFingerprintMismatch,
                             "model fingerprint " + std::to_string(r.fingerprint) + ", the syncer's is " +
                                 std::to_string(layout().fingerprint()));
  if (!l.connected && l.reserved_for != 0 && l.reserved_for != from.process)
    return Admission::refuse(RejectReason::kDuplicateLearner,
                             "learner slot " + std::to_string(r.learner) + " is " +
                                 (l.member ? "held for its member, which failed and may come back"
                                           : "claimed by another learner") +
                                 "; join without an id to be given a free slot");
  if (l.connected) {
    if (same_sender && r.incarnation == l.incarnation) return {V::kResync, {}, {}, 0};  // it missed something
    if (r.incarnation <= l.incarnation)
      return Admission::refuse(RejectReason::kDuplicateLearner,
                               "learner " + std::to_string(r.learner) + " incarnation " +
                                   std::to_string(l.incarnation) + " is connected; refused incarnation " +
                                   std::to_string(r.incarnation));
  }
  if (l.moments_request != 0 && l.moments_incarnation == r.incarnation)
    return {V::kWait, {}, {}, 0};  // a retry while we ask a peer
  return {V::kAccept, {}, {}, 0};
}

Admission SyncerCore::on_register(const Register& r, const Sender& from, SteadyTime now, SyncerEffects& fx) {
  expire_reservations(now, fx);
  const Admission a = admit(r, from);
  switch (a.verdict) {
    case Admission::Verdict::kRefuse:
      s_->refuse(r.learner, a.reason, kNoFragment, a.detail, fx);
      return a;
    case Admission::Verdict::kWait:
      return a;
    case Admission::Verdict::kResync:
      fx.notes.push_back("learner " + std::to_string(r.learner) + " resynchronizes");
      s_->learners[r.learner].initial_crc = r.initial_crc;
      adopt_bases(r, now, fx);
      welcome(r.learner, r.incarnation, std::nullopt, now, fx);
      settle_departures(fx);
      return a;
    case Admission::Verdict::kAccept:
      break;
  }
  LearnerRecord& l = s_->learners[r.learner];
  l.sender = from;  // this sender is learner r.learner from now on
  l.registered_at = now;
  l.reserved_for = 0;  // a claim or a hold ends with its registration
  l.reserved_until.reset();
  l.initial_crc = r.initial_crc;
  l.speed = r.speed;
  l.batch_size = r.batch_size;
  adopt_bases(r, now, fx);
  // A restarted learner starts with a healthy peer's AdamW moments, if there
  // is a peer: fresh moments make its first updates several times too large.
  // (At the start of a run every learner is fresh alike.)
  // After a restore from a checkpoint a learner without bases is not fresh
  // either (a whole restart): the checkpoint's moments stand in for a peer's.
  // Nor is a newcomer once the global model has moved on.
  const bool moved = std::any_of(s_->global.begin(), s_->global.end(), [](const GlobalFragment& g) { return g.version > 0; });
  const bool newcomer = !l.member && moved;
  // A syncer in shards: each shard hands the moments of its own fragments.
  if (r.bases.empty() && (r.incarnation > 1 || restored_ || newcomer) && s_->topology.mode == Mode::kDecoupled) {
    std::optional<uint32_t> peer;
    for (uint32_t m = 0; m < s_->learners.size(); ++m)
      if (m != r.learner && s_->learners[m].connected && s_->learners[m].steps > 0 &&
          (!peer || s_->learners[m].steps > s_->learners[*peer].steps))
        peer = m;
    if (peer) {
      l.moments_request = next_request_++;
      l.moments_incarnation = r.incarnation;
      l.moments_from = *peer;
      fx.sends.push_back({*peer, MomentsPull{l.moments_request, s_->shard}});
      fx.timers.push_back({SyncerEffects::TimerKind::kMoments, r.learner, l.moments_request,
                           moments_wait_seconds(s_->learners[*peer].step_seconds, owned_parameters())});
    } else if (const auto& o = checkpoint_moments_) {
      welcome(r.learner, r.incarnation,
              OptimizerState{o->step, encode_payload(Codec::kBf16, 0, o->m), encode_payload(Codec::kBf16, 0, o->v)},
              now, fx);
    } else {
      welcome(r.learner, r.incarnation, std::nullopt, now, fx);
    }
  } else {
    welcome(r.learner, r.incarnation, std::nullopt, now, fx);
  }
  settle_departures(fx);  // a recovered base replaces a fragment, and the answers a leaver waits on with it
  return a;
}

void SyncerCore::adopt_bases(const Register& r, SteadyTime now, SyncerEffects& fx) {
  const bool recovering = seconds_between(s_->created, now) < kRecoverySeconds;
  for (const auto& base : r.bases) {
    if (base.fragment >= s_->global.size() || !s_->owns(base.fragment)) continue;
    GlobalFragment& g = s_->global[base.fragment];
    if (base.version <= g.version) continue;
    if (!recovering) {
      fx.notes.push_back("learner " + std::to_string(r.learner) + " holds version " + std::to_string(base.version) +
                         " of fragment " + std::to_string(base.fragment) + ", ahead of the syncer's " +
                         std::to_string(g.version) + "; ignored outside recovery");
      continue;
    }
    std::vector<float> values(s_->fragments[base.fragment].size);
    if (Status st = decode_payload(base.values, values); !st.ok()) {
      fx.notes.push_back("base of fragment " + std::to_string(base.fragment) + " from learner " +
                         std::to_string(r.learner) + " ignored: " + std::string(st.message()));
      continue;
    }
    // The newest version any learner adopted wins; momentum stays the
    // checkpoint's (docs/design.md section 6).
    rounds_->fragment_replaced(base.fragment, &fx);
    g.values = std::move(values);
    g.version = base.version;
    g.held.clear();  // other learners hold older versions
    g.initial = false;
    ++s_->stats.recovered_fragments;
    fx.notes.push_back("recovered fragment " + std::to_string(base.fragment) + " at version " +
                       std::to_string(base.version) + " from learner " + std::to_string(r.learner) + "'s base");
    fx.to_all.push_back(s_->broadcast(base.fragment, {}, now));  // learners welcomed before move forward too
  }
}

void SyncerCore::welcome(uint32_t learner, uint64_t incarnation, std::optional<OptimizerState> moments,
                         SteadyTime now, SyncerEffects& fx) {
  LearnerRecord& l = s_->learners[learner];
  if (s_->stats.first_welcome < 0) s_->stats.first_welcome = s_->elapsed(now);
  if (l.moments_incarnation == incarnation) l.moments_request = l.moments_incarnation = 0;  // no longer waiting
  const bool resync = l.connected && l.incarnation == incarnation;
  if (!resync) {
    // A learner that is not a member joins (an open slot, or a fixed one it
    // had departed from). Otherwise a new incarnation of a learner known
    // before is back after a failure, even one this syncer did not see (it
    // happened while the syncer was down).
    const bool joins = !l.member;
    const bool replaced = !joins && l.registrations > 0 && incarnation != l.incarnation;
    if (incarnation != l.incarnation || l.registrations == 0) {
      l.past_steps += l.steps;
      l.past_tokens += l.tokens;
      l.steps = l.tokens = 0;
      l.merged_through.clear();
      // A restored syncer knows the incarnation (and not what its predecessor merged of it).
      l.merges_known = incarnation != l.incarnation;
    }
    // What was merged of an incarnation's progress stays known while it registers again.
    if (l.merged_through.size() != s_->global.size()) l.merged_through.assign(s_->global.size(), 0);
    l.connected = true;
    l.incarnation = incarnation;
    ++l.registrations;
    l.progress.assign(s_->global.size(), {});
    for (size_t p = 0; p < s_->global.size(); ++p) l.progress[p].version = s_->global[p].version;
    l.dropped = false;
    if (l.leaving == LearnerRecord::Leaving::kMerging) --s_->merging;  // a new incarnation replaces a leaver
    l.leaving = LearnerRecord::Leaving::kNo;
    l.qualified = false;
    if (joins) {
      l.member = true;
      l.member_since = s_->elapsed(now);
      l.down_at.reset();
      fx.events.push_back(event::Joined{learner, incarnation, l.speed, l.batch_size});
    } else if (l.down_at || replaced) {
      // Seconds since the failure, when this syncer saw it; unknown (NaN) otherwise.
      double recovery = std::numeric_limits<double>::quiet_NaN();
      if (l.down_at) {
        recovery = seconds_between(*l.down_at, now);
        s_->stats.recovery_seconds.push_back(recovery);
      }
      fx.events.push_back(event::Registered{learner, incarnation, recovery});
      l.awaiting_first_merge = now;
      l.down_at.reset();
      // A learner process started again: in one process its supervisor says
      // so; across processes only the syncer sees it.
      if (replaced && l.sender.remote) {
        fx.events.push_back(event::Restarted{Child::of_learner(learner), l.registrations});
        fx.events.push_back(event::Reintegrated{learner, incarnation, seconds_between(l.registered_at, now)});
      }
    }
  }
  Welcome w;
  w.learner = learner;
  w.incarnation = incarnation;
  w.topology = s_->topology;
  for (uint32_t p = 0; p < s_->global.size(); ++p) {
    if (!s_->owns(p)) continue;  // another shard welcomes with it
    if (s_->global[p].initial && s_->global[p].version == 0 && l.initial_crc == initial_crc_)
      w.fragments.push_back({p, 0, Payload{}});  // the learner makes the same values from the seed
    else
      w.fragments.push_back(s_->held_values(p));
    // What it merged of this incarnation, where it knows (a restarted syncer
    // does not know what its predecessor merged).
    w.fragments.back().merged_through = s_->merged_through(learner, p);
  }
  if (moments) ++s_->stats.moments_handed;
  w.moments = std::move(moments);
  const bool with_moments = w.moments.has_value();
  fx.sends.push_back({learner, std::move(w)});
  if (!resync)
    fx.notes.push_back("learner " + std::to_string(learner) + " registered (incarnation " +
                       std::to_string(incarnation) + (with_moments ? ", with a peer's moments)" : ")"));
  rounds_->on_welcome(learner, now, fx);
}

void SyncerCore::on_moments(uint32_t learner, const Moments& m, SteadyTime now, SyncerEffects& fx) {
  if (m.request != 0 && m.request == checkpoint_request_) {
    CheckpointState::OptimizerRecord o{m.state.step, std::vector<float>(owned_parameters()),
                                       std::vector<float>(owned_parameters())};
    if (decode_payload(m.state.m, o.m).ok() && decode_payload(m.state.v, o.v).ok() && o.step >= 0)
      checkpoint_moments_ = std::move(o);
    else
      fx.notes.push_back("moments from learner " + std::to_string(learner) + " do not fit the model; not kept");
    checkpoint_request_ = 0;
    return;
  }
  const auto waiting = std::find_if(s_->learners.begin(), s_->learners.end(), [&](const LearnerRecord& l) {
    return m.request != 0 && l.moments_request == m.request;
  });
  if (waiting == s_->learners.end()) return;  // answered after the timeout: the learner was welcomed already
  const auto welcomed = static_cast<uint32_t>(waiting - s_->learners.begin());
  std::vector<float> check(owned_parameters());
  std::optional<OptimizerState> moments = m.state;
  if (!decode_payload(m.state.m, check).ok() || !decode_payload(m.state.v, check).ok()) {
    fx.notes.push_back("moments from learner " + std::to_string(learner) + " do not fit the model; not used");
    moments.reset();
  }
  welcome(welcomed, waiting->moments_incarnation, std::move(moments), now, fx);
}

void SyncerCore::on_learner_down(uint32_t learner, SteadyTime now, SyncerEffects& fx) {
  if (learner >= s_->learners.size()) return;
  LearnerRecord& l = s_->learners[learner];
  // A learner that dies while its welcome waits for a peer's moments is not welcomed.
  l.moments_request = l.moments_incarnation = 0;
  l.sender.actor = 0;  // unbound; the process it came from is remembered
  // Welcomes that wait for this learner's moments wait no more: it will not answer.
  for (uint32_t w = 0; w < s_->learners.size(); ++w)
    if (w != learner && s_->learners[w].moments_request != 0 && s_->learners[w].moments_from == learner) {
      fx.notes.push_back("no peer moments for learner " + std::to_string(w) + ": learner " +
                         std::to_string(learner) + " went");
      welcome(w, s_->learners[w].moments_incarnation, std::nullopt, now, fx);
    }
  if (!l.connected) return;
  l.connected = false;
  if (flushed()) {  // the run is over (Done went out): learners leave; not a failure
    fx.notes.push_back("learner " + std::to_string(learner) + " left: the run is over");
    return;
  }
  if (l.leaving != LearnerRecord::Leaving::kNo) {  // it departed in order: gone, not failed
    if (l.leaving == LearnerRecord::Leaving::kMerging) --s_->merging;
    l.leaving = LearnerRecord::Leaving::kNo;
    fx.notes.push_back("learner " + std::to_string(learner) + " has gone");
    rounds_->on_learner_down(learner, now, fx);
    return settle_departures(fx);
  }
  l.down_at = now;
  ++l.failures;
  fx.notes.push_back("learner " + std::to_string(learner) + " is down");
  if (s_->open_slot(learner)) {  // its slot waits for it a while, then is released
    l.reserved_for = l.sender.process;
    l.reserved_until = now + std::chrono::duration_cast<SteadyTime::duration>(std::chrono::duration<double>(kHoldSeconds));
    fx.timers.push_back({SyncerEffects::TimerKind::kRelease, learner, l.failures, kHoldSeconds});
  }
  rounds_->on_learner_down(learner, now, fx);
  settle_departures(fx);
}

void SyncerCore::on_malformed(std::optional<uint32_t> learner, const Status& why, SyncerEffects& fx) {
  const RejectReason reason =
      why.code() == Status::Code::kOutOfRange ? RejectReason::kTooLarge : RejectReason::kMalformed;
  if (learner) return s_->refuse(*learner, reason, kNoFragment, std::string(why.message()), fx);
  ++s_->stats.rejected;
  fx.notes.push_back("refused a message from an unknown sender: " + std::string(why.message()));
}

void SyncerCore::on_progress(const Progress& m, SteadyTime now, SyncerEffects& fx) {
  if (!current(m.learner, m.incarnation)) return;  // an old incarnation's last words
  if (m.fragments.size() != s_->global.size())
    return s_->refuse(m.learner, RejectReason::kBadShape, kNoFragment,
                      "progress for " + std::to_string(m.fragments.size()) + " fragments, expected " +
                          std::to_string(s_->global.size()),
                      fx);
  LearnerRecord& l = s_->learners[m.learner];
  l.steps = m.step;
  l.tokens = m.tokens;
  // Step times feed the grace window: an absurd one must not become an absurd wait.
  if (std::isfinite(m.step_seconds)) l.step_seconds = std::clamp(m.step_seconds, 0.0, 3600.0);
  if (std::isfinite(m.loss)) l.loss = m.loss;
  l.progress = m.fragments;
  // Every learner connected at a broadcast has reported it adopted: how long that took.
  for (uint32_t p = 0; p < s_->global.size(); ++p) {
    GlobalFragment& g = s_->global[p];
    if (g.adopting_left == 0 || !g.adopting[m.learner] || m.fragments[p].version < g.version) continue;
    g.adopting[m.learner] = false;
    if (--g.adopting_left > 0) continue;
    const double seconds = seconds_between(g.broadcast_at, now);
    s_->stats.adopted_seconds_sum += seconds;
    s_->stats.adopted_seconds_max = std::max(s_->stats.adopted_seconds_max, seconds);
    ++s_->stats.adopted_broadcasts;
  }
  qualify(m.learner);
  rounds_->on_progress(m.learner, now, fx);
  settle_departures(fx);
}

void SyncerCore::on_evaluation(const Evaluation& e, SteadyTime now, SyncerEffects& fx) {
  if (!current(e.learner, e.incarnation)) return;  // an old incarnation's last words
  const auto refuse = [&](RejectReason reason, const std::string& why) {
    s_->refuse(e.learner, reason, kNoFragment, "evaluation: " + why, fx);
  };
  if (e.versions.size() != s_->global.size())
    return refuse(RejectReason::kBadShape, "it names " + std::to_string(e.versions.size()) + " fragments, expected " +
                                               std::to_string(s_->global.size()));
  EvaluationPoint p;
  p.versions_min = UINT64_MAX;
  for (uint32_t f = 0; f < e.versions.size(); ++f) {
    if (s_->owns(f) && e.versions[f] > s_->global[f].version)
      return refuse(RejectReason::kMalformed, "version " + std::to_string(e.versions[f]) + " of fragment " +
                                                  std::to_string(f) + " is ahead of the syncer's " +
                                                  std::to_string(s_->global[f].version));
    p.versions_min = std::min(p.versions_min, e.versions[f]);
    p.versions_sum += e.versions[f];
  }
  // Losses are nats >= 0; bits per byte and accuracy may be NaN (not measured), never infinite or negative.
  const auto valid = [](double x, bool optional) { return (optional && std::isnan(x)) || (std::isfinite(x) && x >= 0); };
  if (!valid(e.loss, false) || !valid(e.bits_per_byte, true) || !valid(e.accuracy, true) || e.accuracy > 1.0 ||
      e.count == 0)
    return refuse(RejectReason::kNonFinite, "loss " + std::to_string(e.loss) + ", bits per byte " +
                                                std::to_string(e.bits_per_byte) + ", accuracy " +
                                                std::to_string(e.accuracy) + " over " + std::to_string(e.count) +
                                                " tokens: expected a finite loss >= 0 over at least one token");
  p.seconds = s_->elapsed(now);
  p.tokens = total_tokens();
  p.learner = e.learner;
  p.loss = e.loss;
  p.bits_per_byte = e.bits_per_byte;
  p.accuracy = e.accuracy;
  p.count = e.count;
  p.final = flushed();
  for (uint32_t f = 0; f < e.versions.size() && p.final; ++f)
    p.final = !s_->owns(f) || e.versions[f] == s_->global[f].version;
  evaluators_.insert(e.learner);
  if (p.final) evaluated_final_.insert(e.learner);
  auto& all = s_->stats.evaluations;
  if (all.size() >= SyncerStats::kMaxEvaluations) all.erase(all.begin());
  all.push_back(p);
  fx.notes.push_back("learner " + std::to_string(e.learner) + " evaluated " +
                     (p.final ? std::string("the final model") : "versions from " + std::to_string(p.versions_min)) +
                     ": loss " + std::to_string(p.loss));
}

std::vector<uint32_t> SyncerCore::final_evaluations_awaited() const {
  std::vector<uint32_t> out;
  if (!flushed()) return out;
  for (uint32_t l : evaluators_)
    if (s_->learners[l].connected && !evaluated_final_.count(l)) out.push_back(l);
  return out;
}

// ---- pushes: the checks every mode shares

void SyncerCore::on_push(const Push& m, SteadyTime now, SyncerEffects& fx) {
  check_push(m, now, fx);
  settle_departures(fx);
}

void SyncerCore::check_push(const Push& m, SteadyTime now, SyncerEffects& fx) {
  if (!current(m.learner, m.incarnation))
    return s_->refuse(m.learner, RejectReason::kUnknownLearner, m.fragment,
                      "learner " + std::to_string(m.learner) + " incarnation " + std::to_string(m.incarnation) +
                          " is not registered",
                      fx);
  if (m.fragment >= s_->global.size())
    return s_->refuse(m.learner, RejectReason::kUnknownFragment, m.fragment,
                      "fragment " + std::to_string(m.fragment) + " of " + std::to_string(s_->global.size()), fx);
  if (!s_->owns(m.fragment))
    return s_->refuse(m.learner, RejectReason::kUnknownFragment, m.fragment,
                      "fragment " + std::to_string(m.fragment) + " belongs to syncer shard " +
                          std::to_string(shard_of(m.fragment, s_->topology.syncer.shards)) +
                          ", not to shard " + std::to_string(s_->shard),
                      fx);
  const uint64_t version = s_->global[m.fragment].version;
  // A refused answer still takes its learner out of the round it answers, or
  // the round would wait for it forever.
  const auto refuse_answer = [&](RejectReason reason, std::string detail) {
    s_->refuse(m.learner, reason, m.fragment, std::move(detail), fx);
    rounds_->on_no_answer(m.learner, m.fragment, now, fx);
  };
  if (m.base_version > version)
    return refuse_answer(RejectReason::kMalformed, "base version " + std::to_string(m.base_version) +
                                                       " is ahead of the global version " + std::to_string(version));
  if (rounds_->answers_closed_round(m)) {
    ++s_->stats.late;  // answers a round that already closed: late, whatever its base (not an offence)
    return rounds_->on_late_answer(m, now);
  }
  const auto staleness = static_cast<uint64_t>(s_->topology.outer.max_staleness);
  if (m.base_version + staleness < version)
    return refuse_answer(RejectReason::kStale, "base version " + std::to_string(m.base_version) + " is older than " +
                                                   std::to_string(version) + " - " + std::to_string(staleness));
  if ((m.steps == 0) != (m.tokens == 0))
    return refuse_answer(RejectReason::kMalformed, std::to_string(m.steps) + " steps with " +
                                                       std::to_string(m.tokens) + " tokens");
  const size_t size = s_->fragments[m.fragment].size;
  if (m.delta.count != size)
    return refuse_answer(RejectReason::kBadShape, "payload of " + std::to_string(m.delta.count) +
                                                      " values for a fragment of " + std::to_string(size));
  const std::span<float> delta = SyncerState::scratch(s_->decoded, size);
  Answer a{m.base_version, m.steps, m.tokens, std::isfinite(m.seconds) ? std::max(0.0, m.seconds) : 0.0, delta};
  DecodeFault fault = DecodeFault::kNone;
  if (Status st = decode_payload(m.delta, delta, fault); !st.ok())
    return refuse_answer(reject_reason(fault), std::string(st.message()));
  const auto& merged = s_->learners[m.learner].merged_through;
  if (m.fragment < merged.size() && m.since < merged[m.fragment]) {
    ++s_->stats.late;  // some of this progress is in the global model already
    return rounds_->on_no_answer(m.learner, m.fragment, now, fx);
  }
  rounds_->on_answer(m, std::move(a), now, fx);
}

// ---- timers and the end of a run

void SyncerCore::on_timer(const SyncerEffects::Timer& t, SteadyTime now, SyncerEffects& fx) {
  if (t.kind == SyncerEffects::TimerKind::kRelease) {
    if (t.id < s_->learners.size() && !s_->learners[t.id].connected && s_->learners[t.id].failures == t.round)
      expire_reservations(now, fx);
    return;
  }
  if (t.kind != SyncerEffects::TimerKind::kMoments) {
    rounds_->on_timer(t, now, fx);
    return settle_departures(fx);
  }
  if (t.id >= s_->learners.size()) return;
  LearnerRecord& l = s_->learners[t.id];
  if (l.moments_request == 0 || l.moments_request != t.round) return;
  fx.notes.push_back("no peer moments for learner " + std::to_string(t.id) + " in time");
  welcome(t.id, l.moments_incarnation, std::nullopt, now, fx);
}

void SyncerCore::begin_flush(SteadyTime now, SyncerEffects& fx) {
  if (flushing()) return;
  rounds_->begin_flush(now, fx);
  settle_departures(fx);
}

}  // namespace atl
