#include "atoll/run_view.h"

#include <algorithm>
#include <cmath>
#include <variant>

#include "atoll/fragments.h"
#include "atoll/overload.h"
#include "atoll/json_writer.h"
#include "learner_json.h"

namespace atl {
namespace {

EventLine line_of(const TimedEvent& e) { return {e.t, kind_of(e.event), learner_of(e.event), event_text(e.event)}; }

}  // namespace

const EvaluationPoint* newest_evaluation(const SyncerStats& stats) {
  const EvaluationPoint* newest = nullptr;
  for (const auto& e : stats.evaluations)
    if (!newest || e.versions_sum >= newest->versions_sum) newest = &e;
  return newest;
}

uint64_t RunView::versions_min() const {
  return versions.empty() ? 0 : *std::min_element(versions.begin(), versions.end());
}
uint64_t RunView::versions_max() const {
  return versions.empty() ? 0 : *std::max_element(versions.begin(), versions.end());
}

SeriesPoint RunView::point() const {
  SeriesPoint p;
  p.seconds = seconds;
  p.tokens = tokens;
  p.loss = train_loss;
  p.goodput = goodput;
  p.alive = alive;
  p.present = present;
  p.versions_min = versions_min();
  p.versions_max = versions_max();
  p.bytes_up = bytes_up;
  p.bytes_down = bytes_down;
  p.eval_loss = eval_loss;
  for (const auto& l : per_learner) {
    p.learner_steps.push_back(l.steps);
    p.learner_member.push_back(l.record.member);
  }
  return p;
}

const char* learner_state_name(LearnerState s) {
  switch (s) {
    case LearnerState::kWaiting: return "waiting";
    case LearnerState::kUp: return "up";
    case LearnerState::kDown: return "down";
    case LearnerState::kGaveUp: return "gave up";
    case LearnerState::kLeft: return "left";
  }
  return "waiting";
}

RunView observe_run(const RunRecords& records, const Topology& topology, size_t max_events) {
  const auto sample = records.syncer();
  RunView v = fold_view(topology, sample ? *sample : SyncerSample{}, records.counters, records.adopted.max(),
                        records.log->events(), records.latch.finished(), records.latch.sealed(), max_events);
  v.syncer_serving = records.readiness.syncer_serving();
  v.local_welcomed = static_cast<int>(records.readiness.learners_welcomed());
  v.syncer_links_down = static_cast<int>(records.readiness.syncer_links_down());
  v.failure = std::string(records.latch.failure().message());
  if (records.syncer_shards() > 1)
    for (uint32_t shard = 0; shard < static_cast<uint32_t>(records.syncer_shards()); ++shard)
      if (const auto own = records.shard(shard)) v.shards.push_back(shard_report(*own, records.syncer_shards()));
  return v;
}

ShardReport shard_report(const SyncerSample& sample, int syncer_shards) {
  ShardReport r;
  r.shard = sample.shard;
  r.parameters = sample.parameters;
  r.fragments = sample.fragments;
  r.rounds = sample.stats.rounds;
  r.counts = SyncerCountValues::of(sample.stats);
  r.rejected = sample.stats.rejected;
  r.round_mean_ms = 1e3 * sample.stats.round_seconds_mean();
  r.cpu_seconds = sample.cpu_seconds;
  r.recovering = sample.recovering;
  bool first = true;
  for (uint32_t p = 0; p < sample.versions.size(); ++p) {
    if (shard_of(p, syncer_shards) != sample.shard) continue;
    r.versions_min = first ? sample.versions[p] : std::min(r.versions_min, sample.versions[p]);
    r.versions_max = std::max(r.versions_max, sample.versions[p]);
    first = false;
  }
  return r;
}

RunView fold_view(const Topology& topology, const SyncerSample& syncer, const RunCounters& counters,
                  std::vector<uint64_t> max_adopted, const std::vector<TimedEvent>& events, bool finished,
                  bool sealed, size_t max_events) {
  RunView v;
  const int m = static_cast<int>(topology.learners.size());
  v.mode = mode_name(topology.mode);
  v.token_budget = topology.tokens;
  v.seconds_limit = topology.seconds;
  v.seconds = syncer.seconds;
  v.finished = finished;
  v.sealed = sealed;
  v.tokens = syncer.tokens;
  v.versions = syncer.versions;
  v.bytes_up = syncer.stats.bytes_received;
  v.bytes_down = syncer.stats.bytes_sent;
  v.gateway_refusals = counters.gateway_refusals.load();
  v.checkpoints = counters.checkpoints.load();
  v.regressions_refused = counters.regressions_refused.load();
  v.syncer_cpu_seconds = syncer.cpu_seconds;
  v.stats = syncer.stats;
  v.max_adopted_versions = std::move(max_adopted);
  v.allocated_seconds = syncer.allocated_seconds;
  v.goodput = v.allocated_seconds > 0 ? syncer.stats.good_seconds / v.allocated_seconds : 0.0;
  if (const EvaluationPoint* e = newest_evaluation(syncer.stats)) {  // a learner's evaluator (atoll.Evaluator)
    v.eval_loss = e->loss;
    v.eval_bits_per_byte = e->bits_per_byte;
  }

  // Shown: the fixed learners, and open slots up to the highest ever used
  // (slots are claimed lowest first), so that per_learner[id] is learner id.
  size_t shown = static_cast<size_t>(m);
  for (size_t id = 0; id < syncer.learners.size(); ++id)
    if (syncer.learners[id].registrations > 0) shown = std::max(shown, id + 1);
  for (const TimedEvent& te : events)
    if (const int64_t id = learner_of(te.event); id >= 0 && id < kMaxLearnerSlots)
      shown = std::max(shown, static_cast<size_t>(id) + 1);
  v.learners = static_cast<int>(shown);
  v.per_learner.resize(shown);
  int connected = 0;
  double loss = 0.0;
  for (uint32_t id = 0; id < shown; ++id) {
    LearnerView& l = v.per_learner[id];
    l.id = id;
    const LearnerSpec spec = default_spec(topology, id);
    l.speed = spec.speed;
    l.batch_size = spec.batch_size;
    if (id >= syncer.learners.size()) continue;
    const LearnerRecord& rec = syncer.learners[id];
    l.state = rec.registrations == 0 ? LearnerState::kWaiting
              : rec.connected && rec.member ? LearnerState::kUp
              : !rec.member                 ? LearnerState::kLeft
                                            : LearnerState::kDown;
    v.members += rec.member ? 1 : 0;
    v.present += rec.member && rec.connected ? 1 : 0;
    l.record = rec;
    l.incarnation = rec.incarnation;
    l.steps = rec.past_steps + rec.steps;
    l.tokens = rec.past_tokens + rec.tokens;
    l.last_incarnation_tokens = rec.tokens;
    l.merged = rec.merged;
    l.step_seconds = rec.step_seconds;
    l.loss = rec.loss;
    if (rec.speed > 0) l.speed = rec.speed;  // a Python learner's own labels
    if (rec.batch_size > 0) l.batch_size = static_cast<int>(rec.batch_size);
    for (size_t p = 0; p < rec.progress.size() && p < v.versions.size(); ++p)
      if (v.versions[p] > rec.progress[p].version)
        l.staleness = std::max(l.staleness, v.versions[p] - rec.progress[p].version);
    if (rec.connected && rec.member) ++connected, loss += rec.loss;
  }
  v.train_loss = connected ? loss / connected : 0.0;
  v.alive = v.members ? double(v.present) / v.members : 0.0;

  const auto learner = [&](int64_t id) -> LearnerView* {
    return id >= 0 && static_cast<size_t>(id) < v.per_learner.size() ? &v.per_learner[static_cast<size_t>(id)] : nullptr;
  };
  for (const TimedEvent& te : events) {
    std::visit(Overload{
                   [&](const event::Injected& x) { v.faults_injected += x.hit ? 1 : 0; },
                   [&](const event::Restarted& x) {
                     ++v.restarts;
                     if (x.child.role == Child::Role::kLearner)
                       if (LearnerView* l = learner(x.child.learner)) ++l->restarts;
                   },
                   [&](const event::GaveUp& x) {
                     v.gave_up.push_back(x.child.name());
                     if (x.child.role == Child::Role::kLearner)
                       if (LearnerView* l = learner(x.child.learner)) l->state = LearnerState::kGaveUp, l->gave_up = true;
                   },
                   [&](const event::Registered& x) {
                     ++v.faults_recovered;
                     if (LearnerView* l = learner(x.learner); l && std::isfinite(x.seconds))
                       l->last_reintegration_seconds = x.seconds;
                   },
                   [&](const event::FirstMerge&) {},
                   [&](const event::Reintegrated& x) { v.reintegration_seconds.push_back(x.seconds); },
                   [&](const event::VersionDecreased&) { ++v.version_decreases; },
                   [&](const event::Failed&) {},
                   [&](const event::Joined&) { ++v.joins; },
                   [&](const event::Departed& x) { v.departures += x.orderly ? 1 : 0; },
               },
               te.event);
  }
  const size_t first = events.size() > max_events ? events.size() - max_events : 0;
  for (size_t i = first; i < events.size(); ++i) v.events.push_back(line_of(events[i]));
  return v;
}

Report report_from_view(const RunView& v, double wall) {
  Report r;
  const int m = v.learners;
  r.mode = v.mode;
  r.learners = m;
  r.wall_seconds = wall;
  for (const auto& l : v.per_learner) r.tokens += l.tokens;
  r.tokens_per_second = wall > 0 ? double(r.tokens) / wall : 0.0;
  // Allocated learner time to the end of the run: the members now stay until `wall`.
  r.allocated_learner_seconds = v.allocated_seconds + v.members * std::max(0.0, wall - v.seconds);
  r.goodput = r.allocated_learner_seconds > 0 ? v.stats.good_seconds / r.allocated_learner_seconds : 0.0;
  r.joins = v.joins;
  r.departures = v.departures;
  // The syncer's own clock: its last word may come a little before `wall`.
  // Training spans the first welcome to the model's end (uptime_of).
  const double end = v.stats.final_seconds >= 0 ? v.stats.final_seconds : (v.seconds > 0 ? v.seconds : wall);
  r.uptime = uptime_of(v.stats.round_ends, end, std::max(0.0, v.stats.first_welcome));
  r.bytes.learner_to_syncer = v.bytes_up;
  r.bytes.syncer_to_learners = v.bytes_down;
  r.bytes_per_token = r.tokens ? double(v.bytes_up + v.bytes_down) / double(r.tokens) : 0.0;
  r.rounds = v.stats.rounds;
  r.syncer_cpu_seconds = v.syncer_cpu_seconds;
  r.quorum_mean = v.stats.quorum_mean();
  r.grace_wait_mean_ms = 1000.0 * v.stats.grace_wait_mean();
  r.round_mean_ms = 1000.0 * v.stats.round_seconds_mean();
  r.broadcast_adopted_mean_ms = 1000.0 * v.stats.adopted_seconds_mean();
  r.broadcast_adopted_max_ms = 1000.0 * v.stats.adopted_seconds_max;
  r.counts = SyncerCountValues::of(v.stats);
  r.rejected = v.stats.rejected + v.gateway_refusals;
  r.restarts = v.restarts;
  r.checkpoints = v.checkpoints;
  r.reintegration_seconds = v.reintegration_seconds;
  r.recovery_seconds = v.stats.recovery_seconds;
  r.regressions_refused = v.regressions_refused;
  r.version_decreases = v.version_decreases;
  r.max_adopted_versions = v.max_adopted_versions;
  r.final_versions = v.versions;
  r.versions_min = v.versions_min();
  r.versions_max = v.versions_max();
  r.gave_up = v.gave_up;
  // A learner's evaluator (models atoll does not run): the newest figure is
  // the run's, the others its curve. Models atoll runs are evaluated after the run.
  for (const auto& e : v.stats.evaluations) r.curve.push_back({e.seconds, e.tokens, e.loss, e.bits_per_byte, e.accuracy});
  if (const EvaluationPoint* newest = newest_evaluation(v.stats)) {
    const auto& e = *newest;
    r.eval.loss = e.loss;
    r.eval.bits_per_byte = e.bits_per_byte;
    r.eval.accuracy = e.accuracy;
    r.eval.count = static_cast<int64_t>(e.count);
    r.eval.final = e.final;
    r.eval.by = "learner " + std::to_string(e.learner) + "'s evaluator, " +
                (e.final ? std::string("of the final model") : "global versions from " + std::to_string(e.versions_min)) +
                ", at " + std::to_string(static_cast<int>(e.seconds)) + " s";
  }
  for (const auto& lv : v.per_learner) {
    r.per_learner.push_back(lv);  // the report's part of the view
  }
  r.shards = v.shards;
  return r;
}

std::string view_json(const RunView& v, size_t max_points) {
  JsonWriter j;
  j.open(nullptr, '{');
  j.field("mode", v.mode);
  j.field("learners", v.learners);
  j.field("token_budget", v.token_budget);
  j.field("seconds_limit", v.seconds_limit);
  j.field("seconds", v.seconds);
  j.field("finished", v.finished);
  j.field("sealed", v.sealed);
  j.field("tokens", v.tokens);
  j.field("train_loss", v.train_loss);
  j.field("goodput", v.goodput);
  j.field("alive", v.alive);
  j.field("members", v.members);
  j.field("present", v.present);
  j.field("joins", v.joins);
  j.field("departures", v.departures);
  j.field("rounds", v.stats.rounds);
  j.field("merged", v.stats.merged_pushes);  // the page's short names; every count under its own below
  j.field("stale", v.stats.stale_refused);
  write_counts(j, SyncerCountValues::of(v.stats));
  j.field("refused", v.stats.rejected + v.gateway_refusals);
  j.field("quorum_mean", v.stats.quorum_mean());
  j.field("bytes_up", v.bytes_up);
  j.field("bytes_down", v.bytes_down);
  j.field("restarts", v.restarts);
  j.field("faults_injected", v.faults_injected);
  j.field("faults_recovered", v.faults_recovered);
  j.field("eval_loss", v.eval_loss);
  j.field("eval_bits_per_byte", v.eval_bits_per_byte);
  j.open("versions", '[');
  for (uint64_t x : v.versions) j.item(x);
  j.close(']');
  j.open("shards", '[');
  for (const auto& sh : v.shards) {
    j.open(nullptr, '{');
    write_shard_json(j, sh);
    j.close('}');
  }
  j.close(']');
  j.open("per_learner", '[');
  for (const auto& l : v.per_learner) {
    j.open(nullptr, '{');
    write_learner_json(j, l);
    j.field("state", learner_state_name(l.state));
    j.field("loss", l.loss);
    j.field("staleness", l.staleness);
    j.field("last_reintegration_seconds", l.last_reintegration_seconds);
    j.close('}');
  }
  j.close(']');
  // Columns, not objects: the page draws them as they are.
  const size_t n = v.series.size();
  const size_t stride = max_points > 0 && n > max_points ? (n + max_points - 1) / max_points : 1;
  j.open("series", '{');
  const auto column = [&](const char* name, auto get) {
    j.open(name, '[');
    for (size_t i = 0; i < n; i += stride) j.item(get(v.series[i]));
    j.close(']');
  };
  column("seconds", [](const SeriesPoint& p) { return p.seconds; });
  column("tokens", [](const SeriesPoint& p) { return p.tokens; });
  column("loss", [](const SeriesPoint& p) { return p.loss; });
  column("goodput", [](const SeriesPoint& p) { return p.goodput; });
  column("alive", [](const SeriesPoint& p) { return p.alive; });
  column("present", [](const SeriesPoint& p) { return p.present; });
  j.close('}');
  j.open("events", '[');
  for (const auto& e : v.events) {
    j.open(nullptr, '{');
    j.field("seconds", e.seconds);
    j.field("kind", e.kind);
    j.field("learner", e.learner);
    j.field("text", e.text);
    j.close('}');
  }
  j.close(']');
  j.close('}');
  return j.text();
}

RunWatch::RunWatch(double interval_seconds, size_t max_points)
    : interval_(interval_seconds), max_points_(std::max<size_t>(max_points, 4)) {}

void RunWatch::update(RunView view) {
  std::lock_guard lock(mu_);
  // The syncer's clock restarts with nothing published: no point until it has.
  const bool has_data = view.seconds > 0 || view.tokens > 0;
  // The sealed run's last word is always a point: the series ends where the run did.
  const bool due = series_.empty() || view.seconds >= series_.back().seconds + interval_ ||
                   (view.sealed && view.seconds > series_.back().seconds);
  if (has_data && due) {
    series_.push_back(view.point());
    if (series_.size() >= max_points_) {
      std::vector<SeriesPoint> kept;
      // Every other point, and always the newest: the series ends where the run is.
      for (size_t i = 0; i < series_.size(); i += 2) kept.push_back(std::move(series_[i]));
      if (series_.size() % 2 == 0) kept.push_back(std::move(series_.back()));
      series_ = std::move(kept);
      interval_ *= 2;
    }
  }
  const double loss = view_.eval_loss, bpb = view_.eval_bits_per_byte;
  view_ = std::move(view);
  if (std::isfinite(loss)) view_.eval_loss = loss, view_.eval_bits_per_byte = bpb;
}

void RunWatch::set_eval(double loss, double bits_per_byte) {
  std::lock_guard lock(mu_);
  view_.eval_loss = loss;
  view_.eval_bits_per_byte = bits_per_byte;
}

RunView RunWatch::view() const {
  std::lock_guard lock(mu_);
  RunView v = view_;
  v.series = series_;
  return v;
}

std::vector<SeriesPoint> RunWatch::series() const {
  std::lock_guard lock(mu_);
  return series_;
}

}  // namespace atl
