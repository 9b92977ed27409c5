// dp and elastic_dp: synchronous steps (docs/design.md section 7).
//
// The whole model is one fragment. Each step, every learner of the group
// sends the gradient of its step on the current version; when all did, their
// token-weighted mean drives AdamW on Theta and the new version goes to
// everyone. dp's group is every learner, dead or alive: a dead one stalls
// the step until it is back. elastic_dp drops a failed learner from the group
// after outer.reconfigure_seconds and takes it back when it registers.
#include <algorithm>
#include <cmath>
#include <map>

#include "atoll/adamw.h"
#include "atoll/merge.h"
#include "round_protocol.h"

namespace atl {
namespace {

class SynchronousRounds final : public RoundProtocol {
 public:
  explicit SynchronousRounds(SyncerState& s) : s_(s) {
    AdamWConfig c = s.topology.inner;
    if (c.total_steps == 0 && s.topology.tokens > 0) {
      uint64_t per_step = 0;  // tokens of one synchronous step, all learners
      for (uint32_t m = 0; m < s.topology.learners.size(); ++m)
        per_step += static_cast<uint64_t>(tokens_per_step(s.topology, m));
      c.total_steps = std::max<int64_t>(c.warmup_steps + 1, static_cast<int64_t>(s.topology.tokens / per_step));
    }
    optimizer_ = std::make_unique<AdamW>(s.layout(), c);
  }

  void on_welcome(uint32_t, SteadyTime now, SyncerEffects& fx) override { check_step(now, fx); }
  void on_progress(uint32_t, SteadyTime, SyncerEffects&) override {}
  bool answers_closed_round(const Push&) const override { return false; }

  void on_answer(const Push& m, Answer a, SteadyTime now, SyncerEffects& fx) override {
    if (m.base_version != s_.global[0].version || m.steps == 0) {  // a gradient for a step already applied
      ++s_.stats.late;
      return;
    }
    gradients_[m.learner] = Gradient{a.tokens, a.seconds, {a.delta.begin(), a.delta.end()}};  // a.delta is scratch
    check_step(now, fx);
  }

  void on_no_answer(uint32_t, uint32_t, SteadyTime, SyncerEffects&) override {}

  void on_learner_down(uint32_t learner, SteadyTime, SyncerEffects& fx) override {
    if (s_.topology.mode == Mode::kElasticDp)
      fx.timers.push_back({SyncerEffects::TimerKind::kReconfigure, learner, s_.learners[learner].failures,
                           s_.topology.outer.reconfigure_seconds});
  }

  void on_timer(const SyncerEffects::Timer& t, SteadyTime now, SyncerEffects& fx) override {
    if (t.kind != SyncerEffects::TimerKind::kReconfigure || t.id >= s_.learners.size()) return;
    // Only for the failure that set it: a learner that came back and failed
    // again has its own timer.
    LearnerRecord& l = s_.learners[t.id];
    if (l.connected || l.failures != t.round) return;
    l.dropped = true;
    fx.notes.push_back("elastic group shrinks without learner " + std::to_string(t.id));
    check_step(now, fx);
  }

  void on_departure(uint32_t learner, SteadyTime now, SyncerEffects& fx) override {
    gradients_.erase(learner);  // the group shrinks: one step of its work is not merged
    check_step(now, fx);
  }
  bool holds_answers_of(uint32_t) const override { return false; }

  void fragment_replaced(uint32_t, SyncerEffects*) override { gradients_.clear(); }

  void begin_flush(SteadyTime, SyncerEffects&) override { flushed_ = true; }
  bool flushing() const override { return flushed_; }
  bool flushed() const override { return flushed_; }

  std::optional<CheckpointView::OptimizerRecord> optimizer() const override {
    return CheckpointView::OptimizerRecord{optimizer_->step(), optimizer_->first_moment(), optimizer_->second_moment()};
  }
  Status restore_optimizer(const CheckpointState::OptimizerRecord& o) override {
    return optimizer_->load_state(o.step, o.m, o.v);
  }

 private:
  bool in_group(uint32_t m) const {
    const LearnerRecord& l = s_.learners[m];
    if (!l.member) return false;                      // departed, or an open slot nobody holds
    if (s_.topology.mode == Mode::kDp) return true;  // waits for every member, dead or alive
    return l.connected || !l.dropped;
  }

  // The barrier: a step is applied once every learner of the group sent its gradient.
  void check_step(SteadyTime now, SyncerEffects& fx) {
    GlobalFragment& g = s_.global[0];
    std::vector<Contribution> cs;
    double good = 0.0;
    for (uint32_t m = 0; m < s_.learners.size(); ++m) {
      if (!in_group(m)) continue;
      const auto it = gradients_.find(m);
      if (it == gradients_.end()) return;  // someone has not sent this step's gradient
      cs.push_back({it->second.values, static_cast<double>(it->second.tokens)});
      good += it->second.seconds;
    }
    double weight = 0.0;
    for (const auto& c : cs) weight += c.weight;
    if (cs.empty() || weight <= 0.0) return;
    std::vector<float> mean(g.values.size());
    weighted_mean(cs, mean);
    // AdamW keeps g^2: a gradient whose square overflows would poison it for good.
    if (!std::all_of(mean.begin(), mean.end(), [](float v) { return std::isfinite(v * v); })) {
      ++s_.stats.discarded_rounds;
      fx.notes.push_back("step of version " + std::to_string(g.version) + " discarded: the mean gradient overflows");
      for (const auto& [m, a] : gradients_)  // not the learners' fault: ask them for a fresh gradient
        fx.sends.push_back({m, Reject{RejectReason::kNonFinite, 0, "the mean gradient overflowed; compute again"}});
      gradients_.clear();
      return;
    }
    optimizer_->update(g.values, mean);
    g.initial = false;
    ++g.version;
    SyncerStats& st = s_.stats;
    ++st.rounds;
    st.merged_pushes += cs.size();
    st.quorum_sum += static_cast<double>(cs.size());
    st.good_seconds += good;
    st.round_ends.push_back({s_.elapsed(now), 0});
    for (const auto& [m, a] : gradients_) s_.note_merged(m, now, fx);
    gradients_.clear();
    fx.to_all.push_back(s_.broadcast(0, {}, now));
  }

  SyncerState& s_;
  std::unique_ptr<AdamW> optimizer_;
  struct Gradient {
    uint64_t tokens = 0;
    double seconds = 0.0;
    std::vector<float> values;
  };
  std::map<uint32_t, Gradient> gradients_;  // this step's, by learner
  bool flushed_ = false;
};

}  // namespace

std::unique_ptr<RoundProtocol> make_synchronous_rounds(SyncerState& state) {
  return std::make_unique<SynchronousRounds>(state);
}

}  // namespace atl
