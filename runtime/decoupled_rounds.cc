// Decoupled rounds (docs/design.md section 5; the steps are listed in atoll/syncer_core.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "atoll/job.h"
#include "atoll/merge.h"
#include "atoll/nesterov.h"
#include "round_protocol.h"

namespace atl {
namespace {

class DecoupledRounds final : public RoundProtocol {
 public:
  explicit DecoupledRounds(SyncerState& s) : s_(s), rounds_(s.fragments.size()) {}

  void on_welcome(uint32_t, SteadyTime now, SyncerEffects& fx) override { check_all_due(now, fx); }
  void on_progress(uint32_t, SteadyTime now, SyncerEffects& fx) override { check_all_due(now, fx); }

  bool answers_closed_round(const Push& m) const override {
    const Round& r = rounds_[m.fragment];
    return m.round != 0 && (!r.open || m.round != r.id);
  }

  void on_answer(const Push& m, Answer a, SteadyTime now, SyncerEffects& fx) override {
    Round& r = rounds_[m.fragment];
    if (r.open) {
      // An unasked push does not answer a last pull: the answer to come holds more progress.
      if (!r.last || m.round != 0) r.waiting.erase(m.learner);
      r.answers[m.learner] = std::move(a);
      return check_round(m.fragment, now, fx);
    }
    if (m.base_version != s_.global[m.fragment].version) {
      ++s_.stats.late;  // pushed unasked on a version already replaced
      return;
    }
    if (a.steps > 0) r.answers[m.learner] = std::move(a);  // early: counts when the round opens
    check_due(m.fragment, now, fx);
  }

  void on_no_answer(uint32_t learner, uint32_t p, SteadyTime now, SyncerEffects& fx) override {
    Round& r = rounds_[p];
    if (r.open && r.waiting.erase(learner) > 0) check_round(p, now, fx);
  }

  void on_learner_down(uint32_t learner, SteadyTime now, SyncerEffects& fx) override { stop_waiting(learner, now, fx); }
  void on_departure(uint32_t learner, SteadyTime now, SyncerEffects& fx) override { stop_waiting(learner, now, fx); }

  bool holds_answers_of(uint32_t learner) const override {
    for (uint32_t p = 0; p < rounds_.size(); ++p) {
      const Round& r = rounds_[p];
      if (r.open && r.waiting.count(learner)) return true;
      const auto it = r.answers.find(learner);
      if (it != r.answers.end() && mergeable(p, it->second)) return true;
    }
    return false;
  }

  void on_timer(const SyncerEffects::Timer& t, SteadyTime now, SyncerEffects& fx) override {
    if (t.kind == SyncerEffects::TimerKind::kFlush) {
      for (uint32_t p = 0; p < rounds_.size(); ++p)
        if (rounds_[p].open && rounds_[p].last) close_last_round(p, now, fx);
      return;
    }
    if (t.id >= rounds_.size()) return;
    Round& r = rounds_[t.id];
    if (!r.open || r.id != t.round) return;
    if (t.kind == SyncerEffects::TimerKind::kGrace) return close_round(t.id, now, fx);
    if (t.kind == SyncerEffects::TimerKind::kQuorum && !r.quorum) {
      cancel_round(t.id, "no quorum within " + std::to_string(quorum_deadline_seconds()) + " s; pulling again", fx);
      check_due(t.id, now, fx);
    }
  }

  void fragment_replaced(uint32_t p, SyncerEffects* fx) override {
    Round& r = rounds_[p];
    if (fx && r.open) cancel_round(p, "the fragment was recovered at a newer version", *fx);
    r.open = r.last = false;
    r.waiting.clear();
    r.answers.clear();
  }

  void begin_flush(SteadyTime now, SyncerEffects& fx) override {
    if (flush_ != Flush::kNone) return;
    if (!s_.topology.outer.final_flush) {
      flush_ = Flush::kDone;
      return;
    }
    flush_ = Flush::kFlushing;
    fx.notes.push_back("the run is ending: a last round for every fragment");
    fx.timers.push_back({SyncerEffects::TimerKind::kFlush, 0, 0, flush_seconds()});
    for (uint32_t p = 0; p < rounds_.size(); ++p) open_last_round(p, now, fx);
  }
  bool flushing() const override { return flush_ != Flush::kNone; }
  bool flushed() const override { return flush_ == Flush::kDone; }

 private:
  // One fragment's round: collecting while open.
  struct Round {
    bool open = false;
    uint64_t id = 0;            // of the open (or last) round
    SteadyTime opened{}, quorum_at{};
    bool quorum = false;
    int quorum_needed = 1;      // K as the round opened: a newcomer never raises it
    bool last = false;          // the final round of the fragment (begin_flush)
    std::set<uint32_t> waiting;            // pulled, not yet answered
    std::map<uint32_t, Answer> answers;    // by learner: this round's, or early (unasked) ones
  };

  double flush_seconds() const { return std::clamp(3.0 * s_.slowest_step_seconds(), 1.0, 30.0); }

  // `learner` is gone or no member: open rounds stop waiting for it, and the
  // others may fall due (the quorum is within reach of fewer learners now,
  // or a leaver's last answer makes its fragment due).
  void stop_waiting(uint32_t learner, SteadyTime now, SyncerEffects& fx) {
    for (uint32_t p = 0; p < rounds_.size(); ++p) {
      if (rounds_[p].open) {
        rounds_[p].waiting.erase(learner);
        check_round(p, now, fx);
      } else {
        check_due(p, now, fx);
      }
    }
  }

  void check_all_due(SteadyTime now, SyncerEffects& fx) {
    for (uint32_t p = 0; p < rounds_.size(); ++p) check_due(p, now, fx);
  }

  // An answer that a round of fragment p could still merge.
  bool mergeable(uint32_t p, const Answer& a) const {
    const auto staleness = static_cast<uint64_t>(s_.topology.outer.max_staleness);
    return a.steps > 0 && a.base_version + staleness >= s_.global[p].version;
  }

  void check_due(uint32_t p, SteadyTime now, SyncerEffects& fx) {
    Round& r = rounds_[p];
    if (r.open || flushing()) return;
    // A leaver's last answer does not wait for the others to fall due.
    for (const auto& [m, a] : r.answers)
      if (s_.learners[m].leaving == LearnerRecord::Leaving::kMerging && mergeable(p, a))
        return open_round(p, now, fx);
    const uint64_t version = s_.global[p].version;
    int due = 0;
    for (uint32_t m = 0; m < s_.learners.size(); ++m) {
      const auto& l = s_.learners[m];
      if (!s_.present(m)) continue;
      const uint64_t threshold = steps_until_due(static_cast<int>(p), static_cast<int>(rounds_.size()),
                                                 sync_interval(s_.topology, l.speed, version), version);
      const auto it = r.answers.find(m);
      const bool pushed = it != r.answers.end() && it->second.base_version == version && it->second.steps >= threshold;
      const bool reported = p < l.progress.size() && l.progress[p].version == version && l.progress[p].steps >= threshold;
      due += (pushed || reported) ? 1 : 0;
    }
    if (due >= s_.effective_quorum()) open_round(p, now, fx);
  }

  void open_round(uint32_t p, SteadyTime now, SyncerEffects& fx) {
    Round& r = rounds_[p];
    const uint64_t version = s_.global[p].version;
    r.open = true;
    r.id = next_round_++;
    r.opened = now;
    r.quorum = false;
    r.quorum_needed = s_.effective_quorum();
    r.waiting.clear();
    const auto staleness = static_cast<uint64_t>(s_.topology.outer.max_staleness);
    std::erase_if(r.answers, [&](const auto& kv) { return kv.second.base_version + staleness < version; });
    for (uint32_t m = 0; m < s_.learners.size(); ++m) {
      if (!s_.present(m)) continue;
      const auto it = r.answers.find(m);
      if (it != r.answers.end() && it->second.base_version == version && it->second.steps > 0)
        continue;  // pushed its progress unasked: already answered
      r.waiting.insert(m);
      fx.sends.push_back({m, Pull{p, r.id}});
    }
    fx.timers.push_back({SyncerEffects::TimerKind::kQuorum, p, r.id, quorum_deadline_seconds()});
    check_round(p, now, fx);
  }

  // Generous: a due learner answers within about one of its steps.
  double quorum_deadline_seconds() const { return std::max(1.0, 20.0 * s_.slowest_step_seconds()); }

  double grace_seconds(const Round& r) const {
    const auto& o = s_.topology.outer;
    const double step = s_.slowest_step_seconds();
    const double to_quorum = seconds_between(r.opened, r.quorum_at);
    const double grace = o.grace_gamma * (o.overlap * step - to_quorum);
    return std::clamp(grace, 0.0, o.grace_cap_steps * step);
  }

  void check_round(uint32_t p, SteadyTime now, SyncerEffects& fx) {
    Round& r = rounds_[p];
    if (!r.open) return;
    if (r.last) {
      if (r.waiting.empty()) close_last_round(p, now, fx);
      return;
    }
    int with_progress = 0;
    for (const auto& [m, a] : r.answers) with_progress += a.steps > 0 ? 1 : 0;
    // Fewer may count toward K than when the round opened (failures, departures), never more.
    if (!r.quorum && with_progress >= std::min(r.quorum_needed, s_.effective_quorum())) {
      r.quorum = true;
      r.quorum_at = now;
      const double grace = grace_seconds(r);
      if (!r.waiting.empty() && grace > 0.0) {
        fx.timers.push_back({SyncerEffects::TimerKind::kGrace, p, r.id, grace});
        return;
      }
      return close_round(p, now, fx);
    }
    if (r.waiting.empty()) {
      if (r.quorum) return close_round(p, now, fx);
      cancel_round(p, "everyone pulled answered or failed, and the quorum is still short", fx);
    }
  }

  void cancel_round(uint32_t p, const std::string& why, SyncerEffects& fx) {
    Round& r = rounds_[p];
    r.open = false;
    r.waiting.clear();
    // Answers with progress wait for the next round; empty ones would only make
    // it open again without anyone to pull.
    std::erase_if(r.answers, [](const auto& kv) { return kv.second.steps == 0; });
    ++s_.stats.cancelled_rounds;
    fx.notes.push_back("round " + std::to_string(r.id) + " of fragment " + std::to_string(p) + " cancelled: " + why);
  }

  void close_round(uint32_t p, SteadyTime now, SyncerEffects& fx) {
    Round& r = rounds_[p];
    GlobalFragment& g = s_.global[p];
    const auto& o = s_.topology.outer;
    const auto staleness = static_cast<uint64_t>(o.max_staleness);
    std::vector<Contribution> cs;
    std::vector<std::pair<uint32_t, uint64_t>> who;  // learner, base version
    double good = 0.0;
    for (const auto& [m, a] : r.answers) {
      if (a.steps == 0 || a.base_version + staleness < g.version) continue;
      cs.push_back({a.delta, o.weighting == Weighting::kUniform ? 1.0 : token_weight(a.tokens, a.steps)});
      who.emplace_back(m, a.base_version);
      good += a.seconds;
    }
    Fragment rule_of = s_.fragments[p];
    if (o.force_avg) rule_of.rule = MergeRule::kAvg;
    std::vector<float> outer_grad(s_.fragments[p].size);
    if (!merge_fragment(rule_of, cs, outer_grad)) return cancel_round(p, "no answer carried weight", fx);
    for (float& x : outer_grad) x = -x;  // outer gradient: base - theta
    NesterovConfig outer = o.nesterov;
    if (o.lr_warmup_rounds > 0)  // round k of this fragment (k = its version) steps with (k+1)/W of lr
      outer.lr *= std::min(1.0f, static_cast<float>(g.version + 1) / static_cast<float>(o.lr_warmup_rounds));
    // The outer step on copies: a finite but huge update can still overflow.
    std::vector<float> values = g.values, momentum = g.momentum;
    nesterov_step(outer, values, momentum, outer_grad);
    if (!std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); }) ||
        !std::all_of(momentum.begin(), momentum.end(), [](float v) { return std::isfinite(v); })) {
      ++s_.stats.discarded_rounds;
      cancel_round(p, "the merged update is not finite; the round is discarded", fx);
      r.answers.clear();
      return;
    }
    g.values = std::move(values);
    g.momentum = std::move(momentum);
    g.initial = false;
    ++g.version;
    r.open = false;
    r.answers.clear();
    r.waiting.clear();

    SyncerStats& st = s_.stats;
    ++st.rounds;
    st.merged_pushes += cs.size();
    st.quorum_sum += static_cast<double>(cs.size());
    st.grace_wait_sum += seconds_between(r.quorum_at, now);
    // A step's time is spread over fragments by their share of the parameters.
    st.good_seconds +=
        good * static_cast<double>(s_.fragments[p].size) / static_cast<double>(s_.layout().size());
    st.round_ends.push_back(s_.elapsed(now));
    std::vector<uint32_t> merged;
    for (const auto& [m, base] : who) {
      merged.push_back(m);
      LearnerRecord& l = s_.learners[m];
      if (p < l.merged_base.size()) l.merged_base[p] = base;
      s_.note_merged(m, now, fx);
    }
    fx.to_all.push_back(s_.broadcast(p, std::move(merged)));
  }

  void open_last_round(uint32_t p, SteadyTime now, SyncerEffects& fx) {
    Round& r = rounds_[p];
    // A round still open becomes the last one: the answers it has stay, and a
    // learner's last answer replaces its earlier one.
    r.open = true;
    r.last = true;
    r.id = next_round_++;
    r.opened = now;
    r.waiting.clear();
    const auto staleness = static_cast<uint64_t>(s_.topology.outer.max_staleness);
    std::erase_if(r.answers, [&](const auto& kv) { return kv.second.base_version + staleness < s_.global[p].version; });
    for (uint32_t m = 0; m < s_.learners.size(); ++m) {
      if (!s_.present(m)) continue;  // a leaver's last answers are in already
      r.waiting.insert(m);
      fx.sends.push_back({m, Pull{p, r.id, true}});
    }
    check_round(p, now, fx);
  }

  void close_last_round(uint32_t p, SteadyTime now, SyncerEffects& fx) {
    Round& r = rounds_[p];
    const bool progress =
        std::any_of(r.answers.begin(), r.answers.end(), [](const auto& kv) { return kv.second.steps > 0; });
    if (progress) {
      r.quorum_at = now;  // no grace wait in a last round
      close_round(p, now, fx);
    }
    r.open = r.last = false;
    r.waiting.clear();
    r.answers.clear();
    if (std::none_of(rounds_.begin(), rounds_.end(), [](const Round& x) { return x.open; })) {
      flush_ = Flush::kDone;
      fx.notes.push_back("every fragment had its last round: the model is final");
    }
  }

  SyncerState& s_;
  std::vector<Round> rounds_;  // by fragment
  uint64_t next_round_ = 1;
  enum class Flush { kNone, kFlushing, kDone };
  Flush flush_ = Flush::kNone;
};

}  // namespace

std::unique_ptr<RoundProtocol> make_decoupled_rounds(SyncerState& state) {
  return std::make_unique<DecoupledRounds>(state);
}

}  // namespace atl
