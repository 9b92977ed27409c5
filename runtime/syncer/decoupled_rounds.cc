// Decoupled rounds (docs/design.md section 5; the steps are listed in atoll/syncer_core.h).
//
// Streaming merge. An answer is folded into its fragment's MergeAccumulator
// (atoll/merge.h) as it arrives and its decoded vector is dropped; a round
// keeps per learner only what the protocol counts (base version, steps,
// tokens, seconds, weight). The syncer's memory is then the global copy plus
// one accumulator per fragment, whatever the number of learners. A
// contribution folded in cannot be taken out again, so a learner is folded
// into a round at most once, and what used to replace an earlier answer is
// decided as follows:
//   - a second answer of a learner already folded into the round (a
//     duplicated message, or the same learner pulled twice) is counted late;
//     a round reopened after a cancel pulls only the learners not folded in;
//   - the run's end (begin_flush): a fragment whose accumulator holds
//     progress (an open round, or early unasked pushes) is first closed with
//     an ordinary merge (no quorum needed) and broadcast; its last round opens
//     only once that broadcast is out (a timer of 0 s: the core's effects carry
//     out sends before to_all, and the last Pull must reach each learner after
//     the Broadcast). A learner named in the broadcast carries its progress
//     since the push that was merged onto the new version (learner_core.cc,
//     adopt()); one that was not carries all of it; its last answer then holds
//     exactly what the merge did not. Fragments without progress get their
//     last round at once, as before;
//   - an unasked push during a last round from a learner the round still
//     waits for is not folded in (late): its last answer, cumulative since
//     the same base, follows. While the run is ending, an unasked push to a
//     fragment without an open round is late too: the last round pulls it.
// The merged gradient equals merge_fragment() over the same answers to float
// rounding (tests/runtime/merge_accumulator_test.cc).
//
// Cost per message. Whether a fragment is due is kept per (fragment,
// learner) and updated only for the learner a message concerns; each
// fragment counts its due learners, and is recounted in full (O(M)) when its
// version changes. The number of learners that count toward the quorum is
// cached the same way and recounted in full when a round opens or a learner
// is welcomed. A Progress costs O(P), a round O(M).
#include <algorithm>
#include <cmath>
#include <map>

#include "atoll/huge_pages.h"
#include "atoll/job.h"
#include "atoll/merge.h"
#include "atoll/nesterov.h"
#include "round_protocol.h"

namespace atl {
namespace {

// The flush timer's `round` that opens the last rounds deferred behind a broadcast.
constexpr uint64_t kOpenLastRounds = ~uint64_t{0};

// The outer step of a round on fragment g: Nesterov, or delayed Nesterov
// whose step index is the version (a restored syncer keeps the phase; the
// gradients summed since the last velocity step are not checkpointed).
bool outer_step_if_finite(const NesterovConfig& outer, GlobalFragment& g, std::span<const float> grad) {
  if (outer.every > 1 && g.pending.size() != g.values.size()) {
    reserve_huge(g.pending, g.values.size());
    g.pending.assign(g.values.size(), 0.0f);
  }
  return delayed_nesterov_step_if_finite(outer, g.version, g.values, g.momentum, g.pending, grad);
}

class DecoupledRounds final : public RoundProtocol {
 public:
  explicit DecoupledRounds(SyncerState& s)
      : s_(s), counts_(s.learners.size(), 0), answer_seconds_(s.learners.size(), 0.0),
        delivery_seconds_(s.learners.size(), 0.0) {
    rounds_.reserve(s.fragments.size());
    for (const Fragment& f : s.fragments) rounds_.emplace_back(f, s.learners.size());
    recount_quorum();
  }

  void on_welcome(uint32_t learner, SteadyTime now, SyncerEffects& fx) override {
    recount_quorum();  // also catches records the core changed without telling (continue_from)
    refresh_learner(learner);
    check_all_due(now, fx);
  }
  void on_progress(uint32_t learner, SteadyTime now, SyncerEffects& fx) override {
    repair_lost_versions(learner, now, fx);
    refresh_learner(learner);
    check_all_due(now, fx);
  }

  bool answers_closed_round(const Push& m) const override {
    const Round& r = rounds_[m.fragment];
    return m.round != 0 && (!r.open || m.round != r.id);
  }

  void on_late_answer(const Push& m, SteadyTime now) override {
    const Round& r = rounds_[m.fragment];
    if (m.round == r.id) note_answer_time(m.learner, seconds_between(r.opened, now));
  }

  void on_answer(const Push& m, Answer a, SteadyTime now, SyncerEffects& fx) override {
    const uint32_t p = m.fragment;
    Round& r = rounds_[p];
    sync_version(p);
    if (r.open && m.round == r.id && m.learner < r.waiting.size() && r.waiting[m.learner])
      note_answer_time(m.learner, seconds_between(r.opened, now));
    if (r.open) {
      if (r.last && m.round == 0 && r.waiting[m.learner]) {
        ++s_.stats.late;  // an unasked push does not answer a last pull: the answer to come holds more progress
        return;
      }
      unwait(r, m.learner);
      if (!fold(p, m, a)) ++s_.stats.late;  // folded in already (a duplicate)
      refresh_due(p, m.learner);  // counts if the round is cancelled and due again
      return check_round(p, now, fx);
    }
    if (flushing()) {
      ++s_.stats.late;  // the last round pulls it
      return;
    }
    // Early, and within max_staleness (SyncerCore checked): counts when the round opens.
    if (a.steps > 0 && !fold(p, m, a)) ++s_.stats.late;
    refresh_due(p, m.learner);
    check_due(p, now, fx);
  }

  void on_no_answer(uint32_t learner, uint32_t p, SteadyTime now, SyncerEffects& fx) override {
    Round& r = rounds_[p];
    if (r.open && unwait(r, learner)) check_round(p, now, fx);
  }

  void on_learner_down(uint32_t learner, SteadyTime now, SyncerEffects& fx) override { stop_waiting(learner, now, fx); }
  void on_departure(uint32_t learner, SteadyTime now, SyncerEffects& fx) override { stop_waiting(learner, now, fx); }

  bool holds_answers_of(uint32_t learner) const override {
    for (uint32_t p = 0; p < rounds_.size(); ++p) {
      const Round& r = rounds_[p];
      if (r.open && r.waiting[learner]) return true;
      const auto it = r.answers.find(learner);
      if (it != r.answers.end() && mergeable(p, it->second)) return true;
    }
    return false;
  }

  void on_timer(const SyncerEffects::Timer& t, SteadyTime now, SyncerEffects& fx) override {
    if (t.kind == SyncerEffects::TimerKind::kFlush) {
      if (t.round == kOpenLastRounds) {  // the broadcasts of begin_flush are out
        for (uint32_t p = 0; p < rounds_.size(); ++p)
          if (rounds_[p].last_pending) open_last_round(p, now, fx);
        return;
      }
      for (uint32_t p = 0; p < rounds_.size(); ++p) {
        rounds_[p].last_pending = false;
        if (rounds_[p].open && rounds_[p].last) close_last_round(p, now, fx);
      }
      return check_flushed(fx);
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
    r.open = r.last = r.last_pending = false;
    clear_waiting(r);
    forget_answers(r);
    r.due_version = kUnknownVersion;  // the core sets the new version after this: recount then
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
    bool deferred = false;
    for (uint32_t p = 0; p < rounds_.size(); ++p) {
      if (!s_.owns(p)) continue;  // another syncer shard's
      Round& r = rounds_[p];
      sync_version(p);
      if (!r.answers.empty()) {
        // Progress folded in already cannot be replaced by a last answer:
        // merge it now; the last round pulls what came after.
        const uint64_t version = s_.global[p].version;
        r.quorum_at = now;  // no grace wait
        if (!r.open) r.opened = now;
        close_round(p, now, fx);
        r.open = false;
        clear_waiting(r);
        forget_answers(r);
        if (s_.global[p].version != version) {  // broadcast: the last Pull must follow it
          r.last_pending = deferred = true;
          continue;
        }
      }
      open_last_round(p, now, fx);
    }
    if (deferred) fx.timers.push_back({SyncerEffects::TimerKind::kFlush, 0, kOpenLastRounds, 0.0});
    check_flushed(fx);
  }
  bool flushing() const override { return flush_ != Flush::kNone; }
  bool flushed() const override { return flush_ == Flush::kDone; }

 private:
  static constexpr uint64_t kUnknownVersion = ~uint64_t{0};

  // What a round keeps of an answer folded into its accumulator.
  struct Folded {
    uint64_t base_version = 0;
    uint64_t steps = 0, tokens = 0;
    double seconds = 0.0;
    double weight = 0.0;
    uint64_t through = 0;  // Push::through: the learner's progress merged goes up to this step
  };

  // A learner's reports of an older version than the fragment's: which, and since when.
  struct Behind {
    uint64_t version = 0;
    std::optional<SteadyTime> since;  // empty: it reported the current version
    std::optional<SteadyTime> first;  // when it was first seen behind, since it last held the current version
    int repairs = 0;                  // sent since then: each doubles the wait for the next
  };

  // One fragment's round: collecting while open.
  struct Round {
    Round(Fragment rule_of, size_t learners)
        : waiting(learners, 0), acc(std::move(rule_of)), due(learners, 0), behind(learners) {}
    bool open = false;
    uint64_t id = 0;            // of the open (or last) round
    SteadyTime opened{}, quorum_at{};
    bool quorum = false;
    int quorum_needed = 1;      // K as the round opened: a newcomer never raises it
    bool last = false;          // the final round of the fragment (begin_flush)
    bool last_pending = false;  // begin_flush merged it; its last round opens once the broadcast is out
    std::vector<uint8_t> waiting;  // by learner: pulled, not yet answered
    size_t waiting_count = 0;
    // Answers with progress, folded into `acc`: this round's, or early
    // (unasked) ones, all on a base the current version accepts.
    MergeAccumulator acc;
    std::map<uint32_t, Folded> answers;
    uint64_t answers_version = 0;  // the global version they were folded on
    // By learner: present, and did H steps on the current version (its
    // Progress says so, or it pushed unasked); `due_count` of them.
    std::vector<uint8_t> due;
    int due_count = 0;
    uint64_t due_version = kUnknownVersion;  // the version `due` describes
    std::vector<Behind> behind;  // by learner (repair_lost_versions())
  };

  double flush_seconds() const { return std::clamp(3.0 * s_.slowest_step_seconds(), 1.0, 30.0); }

  // ---- the quorum cap K, cached (SyncerState::effective_quorum() is O(M))

  void recount_quorum() {
    counted_ = 0;
    for (uint32_t m = 0; m < counts_.size(); ++m) {
      counts_[m] = s_.counts_toward_quorum(m) ? 1 : 0;
      counted_ += counts_[m];
    }
  }
  void refresh_quorum(uint32_t m) {
    const uint8_t c = s_.counts_toward_quorum(m) ? 1 : 0;
    counted_ += static_cast<int>(c) - static_cast<int>(counts_[m]);
    counts_[m] = c;
  }
  int effective_quorum() const { return std::max(1, std::min(s_.topology.outer.quorum, counted_)); }

  // ---- who is due, per fragment and learner

  bool is_due(uint32_t p, uint32_t m) const {
    if (!s_.present(m)) return false;
    const Round& r = rounds_[p];
    const auto& l = s_.learners[m];
    const uint64_t version = s_.global[p].version;
    const uint64_t threshold = steps_until_due(static_cast<int>(p), static_cast<int>(rounds_.size()),
                                               s_.topology.outer.stream, sync_interval(s_.topology, l.speed, version), version);
    const auto it = r.answers.find(m);
    const bool pushed = it != r.answers.end() && it->second.base_version == version && it->second.steps >= threshold;
    const bool reported = p < l.progress.size() && l.progress[p].version == version && l.progress[p].steps >= threshold;
    return pushed || reported;
  }
  // Recounts fragment p's due learners when its version changed since they were counted.
  void sync_due(uint32_t p) {
    Round& r = rounds_[p];
    if (r.due_version == s_.global[p].version) return;
    r.due_version = s_.global[p].version;
    r.due_count = 0;
    for (uint32_t m = 0; m < r.due.size(); ++m) {
      r.due[m] = is_due(p, m) ? 1 : 0;
      r.due_count += r.due[m];
    }
  }
  void refresh_due(uint32_t p, uint32_t m) {
    Round& r = rounds_[p];
    if (r.due_version != s_.global[p].version) return sync_due(p);  // counts m as well
    const uint8_t d = is_due(p, m) ? 1 : 0;
    r.due_count += static_cast<int>(d) - static_cast<int>(r.due[m]);
    r.due[m] = d;
  }
  // Something about learner m changed: its progress, presence or membership.
  void refresh_learner(uint32_t m) {
    refresh_quorum(m);
    for (uint32_t p = 0; p < rounds_.size(); ++p) refresh_due(p, m);
  }

  // ---- answers

  // Drops answers folded on a version that is no longer current (cannot
  // happen while every version change goes through close_round() or
  // fragment_replaced(); kept as a guard, since nothing can be taken out).
  void sync_version(uint32_t p) {
    Round& r = rounds_[p];
    if (r.answers_version == s_.global[p].version) return;
    if (!r.answers.empty()) {
      const auto staleness = static_cast<uint64_t>(s_.topology.outer.max_staleness);
      const bool all_fresh = std::all_of(r.answers.begin(), r.answers.end(), [&](const auto& kv) {
        return kv.second.base_version + staleness >= s_.global[p].version;
      });
      if (!all_fresh) forget_answers(r);
    }
    r.answers_version = s_.global[p].version;
  }

  // Folds `a`, from push `push`, into fragment p's round. False when its learner is folded in already.
  bool fold(uint32_t p, const Push& push, const Answer& a) {
    Round& r = rounds_[p];
    if (a.steps == 0) return true;  // nothing to merge; it answered all the same
    if (r.answers.count(push.learner)) return false;
    const double w = s_.topology.outer.weighting == Weighting::kUniform ? 1.0 : token_weight(a.tokens, a.steps);
    r.acc.add(a.delta, w);
    r.answers[push.learner] = Folded{a.base_version, a.steps, a.tokens, a.seconds, w, push.through};
    return true;
  }

  void forget_answers(Round& r) {
    r.answers.clear();
    r.acc.clear();
  }

  // An answer that a round of fragment p could still merge.
  bool mergeable(uint32_t p, const Folded& a) const {
    const auto staleness = static_cast<uint64_t>(s_.topology.outer.max_staleness);
    return a.steps > 0 && a.base_version + staleness >= s_.global[p].version;
  }

  bool unwait(Round& r, uint32_t m) {
    if (!r.waiting[m]) return false;
    r.waiting[m] = 0;
    --r.waiting_count;
    return true;
  }
  void clear_waiting(Round& r) {
    if (r.waiting_count > 0) std::fill(r.waiting.begin(), r.waiting.end(), 0);
    r.waiting_count = 0;
  }

  // `learner` is gone or no member: open rounds stop waiting for it, and the
  // others may fall due (the quorum is within reach of fewer learners now,
  // or a leaver's last answer makes its fragment due).
  void stop_waiting(uint32_t learner, SteadyTime now, SyncerEffects& fx) {
    refresh_learner(learner);
    for (uint32_t p = 0; p < rounds_.size(); ++p) {
      if (rounds_[p].open) {
        unwait(rounds_[p], learner);
        check_round(p, now, fx);
      } else {
        check_due(p, now, fx);
      }
    }
  }

  void check_all_due(SteadyTime now, SyncerEffects& fx) {
    for (uint32_t p = 0; p < rounds_.size(); ++p) check_due(p, now, fx);
  }

  void check_due(uint32_t p, SteadyTime now, SyncerEffects& fx) {
    if (!s_.owns(p)) return;  // another syncer shard's
    Round& r = rounds_[p];
    if (r.open || flushing()) return;
    // A leaver's last answer does not wait for the others to fall due.
    if (s_.merging > 0)
      for (const auto& [m, a] : r.answers)
        if (s_.learners[m].leaving == LearnerRecord::Leaving::kMerging && mergeable(p, a))
          return open_round(p, now, fx);
    sync_due(p);
    if (r.due_count >= effective_quorum()) open_round(p, now, fx);
  }

  void open_round(uint32_t p, SteadyTime now, SyncerEffects& fx) {
    Round& r = rounds_[p];
    sync_version(p);
    recount_quorum();  // once a round: whatever changed membership without an event
    r.open = true;
    r.id = next_round_++;
    r.opened = now;
    r.quorum = false;
    r.quorum_needed = effective_quorum();
    clear_waiting(r);
    for (uint32_t m = 0; m < s_.learners.size(); ++m) {
      // Folded in already (pushed unasked, or answered before a cancel): a
      // second answer could not replace it.
      if (!s_.present(m) || r.answers.count(m)) continue;
      r.waiting[m] = 1;
      ++r.waiting_count;
      fx.sends.push_back({m, Pull{p, r.id, false, s_.global[p].version}});
    }
    fx.timers.push_back({SyncerEffects::TimerKind::kQuorum, p, r.id, quorum_deadline_seconds()});
    check_round(p, now, fx);
  }

  // Generous: a due learner answers within about one of its steps, plus what
  // answers lately took over their links. At least kMinQuorumSeconds: on a
  // lossy link a pull or an answer may be lost, and pulling again beats a
  // fragment that stands still.
  double quorum_deadline_seconds() const {
    double answer = 0.0;
    for (double a : answer_seconds_) answer = std::max(answer, a);
    return std::max({kMinQuorumSeconds, 20.0 * s_.slowest_step_seconds(), 4.0 * answer});
  }
  static constexpr double kMinQuorumSeconds = 0.1;

  // The paper's grace window, gamma * (tau * step - to_quorum), with the sync
  // time it leaves out measured: a round also waits as long as the learners
  // it still waits for took lately to answer a pull (a slow or jittery link),
  // up to the quorum deadline. Rounds then merge the learners whose answers
  // are on their way, where rounds that each merged one learner's long carried
  // progress would apply it at full length, one learner after another.
  double grace_seconds(const Round& r) const {
    const auto& o = s_.topology.outer;
    const double step = s_.slowest_step_seconds();
    const double to_quorum = seconds_between(r.opened, r.quorum_at);
    const double by_steps = std::clamp(o.grace_gamma * (o.overlap * step - to_quorum), 0.0, o.grace_cap_steps * step);
    double answer = 0.0;
    for (uint32_t m = 0; m < r.waiting.size(); ++m)
      if (r.waiting[m]) answer = std::max(answer, answer_seconds_[m]);
    return std::max(by_steps, std::min(answer - to_quorum, quorum_deadline_seconds()));
  }

  // A learner that reports the same older version of a fragment for longer
  // than a broadcast takes to reach it lost one (a corrupted or dropped
  // message; with int broadcast codecs each is a difference to the one
  // before, so it could adopt none of the later ones). It gets the current
  // version whole, and again after as long if that is lost too. Without it
  // the learner trains on a version no round takes pushes from until it gives
  // up waiting and registers again.
  void repair_lost_versions(uint32_t m, SteadyTime now, SyncerEffects& fx) {
    if (!s_.present(m) || flush_ != Flush::kNone) return;
    const auto& progress = s_.learners[m].progress;
    const double wait = repair_wait_seconds(m);
    for (uint32_t p = 0; p < rounds_.size() && p < progress.size(); ++p) {
      if (!s_.owns(p)) continue;
      Behind& b = rounds_[p].behind[m];
      if (progress[p].version >= s_.global[p].version) {
        if (b.first) note_delivery_time(m, seconds_between(*b.first, now));
        b = {};
        continue;
      }
      if (!b.first) b.first = now;
      if (!b.since || b.version != progress[p].version) {
        b.version = progress[p].version;
        b.since = now;
        continue;
      }
      // A learner still behind after a repair is more likely behind a queue
      // (a link slower than its traffic) than short of a lost message: a repair,
      // the fragment whole in fp32, would lengthen that queue. Back off.
      if (seconds_between(*b.since, now) < wait * static_cast<double>(1 << std::min(b.repairs, kMaxRepairBackoff)))
        continue;
      fx.sends.push_back({m, s_.repair(p, m)});
      ++s_.stats.repairs;
      ++b.repairs;
      b.since = now;
    }
  }
  // A few of its steps (a broadcast waits for its step to end), twice its
  // answer time (its link up), or twice the time its broadcasts take to be
  // adopted (its link down, queue included), whichever is longer. On a link
  // just fast enough, broadcasts wait behind one another: a repair then, the
  // fragment whole in fp32, would only lengthen the queue it was sent for.
  double repair_wait_seconds(uint32_t m) const {
    return std::max({kMinRepairSeconds, 4.0 * s_.learners[m].step_seconds, 2.0 * answer_seconds_[m],
                     2.0 * delivery_seconds_[m]});
  }
  static constexpr double kMinRepairSeconds = 0.002;
  static constexpr int kMaxRepairBackoff = 6;  // at most 64 times the wait between repairs

  // Moving average of how long learner m stayed behind a fragment's current version.
  void note_delivery_time(uint32_t m, double seconds) {
    if (m >= delivery_seconds_.size()) return;
    double& avg = delivery_seconds_[m];
    avg = avg == 0.0 ? seconds : avg + 0.2 * (seconds - avg);
  }

  // Moving average of how long learner m took to answer a pull.
  void note_answer_time(uint32_t m, double seconds) {
    if (m >= answer_seconds_.size()) return;
    double& avg = answer_seconds_[m];
    avg = avg == 0.0 ? seconds : avg + 0.2 * (seconds - avg);
  }

  void check_round(uint32_t p, SteadyTime now, SyncerEffects& fx) {
    Round& r = rounds_[p];
    if (!r.open) return;
    if (r.last) {
      if (r.waiting_count == 0) close_last_round(p, now, fx);
      return;
    }
    const auto with_progress = static_cast<int>(r.answers.size());
    // Fewer may count toward K than when the round opened (failures, departures), never more.
    if (!r.quorum && with_progress >= std::min(r.quorum_needed, effective_quorum())) {
      r.quorum = true;
      r.quorum_at = now;
      const double grace = grace_seconds(r);
      if (r.waiting_count > 0 && grace > 0.0) {
        fx.timers.push_back({SyncerEffects::TimerKind::kGrace, p, r.id, grace});
        return;
      }
      return close_round(p, now, fx);
    }
    if (r.waiting_count == 0) {
      if (r.quorum) return close_round(p, now, fx);
      cancel_round(p, "everyone pulled answered or failed, and the quorum is still short", fx);
    }
  }

  // Answers with progress stay folded in for the next round.
  void cancel_round(uint32_t p, const std::string& why, SyncerEffects& fx) {
    Round& r = rounds_[p];
    r.open = false;
    clear_waiting(r);
    ++s_.stats.cancelled_rounds;
    fx.notes.push_back("round " + std::to_string(r.id) + " of fragment " + std::to_string(p) + " cancelled: " + why);
  }

  void close_round(uint32_t p, SteadyTime now, SyncerEffects& fx) {
    Round& r = rounds_[p];
    GlobalFragment& g = s_.global[p];
    const auto& o = s_.topology.outer;
    // In s_.work until the step is taken; the broadcast below reuses it.
    const std::span<float> outer_grad = SyncerState::scratch(s_.work, s_.fragments[p].size);
    if (!r.acc.merge(outer_grad)) return cancel_round(p, "no answer carried weight", fx);
    for (float& x : outer_grad) x = -x;  // outer gradient: base - theta
    NesterovConfig outer = o.nesterov;
    if (o.lr_warmup_rounds > 0)  // round k of this fragment (k = its version) steps with (k+1)/W of lr
      outer.lr *= std::min(1.0f, static_cast<float>(g.version + 1) / static_cast<float>(o.lr_warmup_rounds));
    // A finite but huge update can still overflow: then nothing changes.
    if (!outer_step_if_finite(outer, g, outer_grad)) {
      ++s_.stats.discarded_rounds;
      cancel_round(p, "the merged update is not finite; the round is discarded", fx);
      forget_answers(r);
      r.due_version = kUnknownVersion;  // pushes counted as due are gone: recount
      sync_due(p);
      return;
    }
    g.initial = false;
    ++g.version;
    r.open = false;
    clear_waiting(r);

    SyncerStats& st = s_.stats;
    double good = 0.0;
    for (const auto& [m, a] : r.answers) good += a.seconds;
    ++st.rounds;
    st.merged_pushes += r.answers.size();
    st.quorum_sum += static_cast<double>(r.answers.size());
    st.grace_wait_sum += seconds_between(r.quorum_at, now);
    st.round_seconds_sum += seconds_between(r.opened, now);
    // A step's time is spread over fragments by their share of the parameters.
    st.good_seconds +=
        good * static_cast<double>(s_.fragments[p].size) / static_cast<double>(s_.layout().size());
    st.round_ends.push_back({s_.elapsed(now), p});
    std::vector<uint32_t> merged;
    std::vector<uint64_t> merged_through;
    merged.reserve(r.answers.size());
    merged_through.reserve(r.answers.size());
    for (const auto& [m, a] : r.answers) {
      merged.push_back(m);
      merged_through.push_back(a.through);
      LearnerRecord& l = s_.learners[m];
      if (p < l.merged_through.size()) l.merged_through[p] = std::max(l.merged_through[p], a.through);
      s_.note_merged(m, now, fx);
      refresh_quorum(m);  // merged progress qualifies a newcomer
    }
    forget_answers(r);
    r.answers_version = g.version;
    sync_due(p);  // a new version: nobody is due on it yet, unless its Progress says so
    Broadcast b = s_.broadcast(p, std::move(merged), now);
    b.merged_through = std::move(merged_through);
    fx.to_all.push_back(std::move(b));
  }

  void open_last_round(uint32_t p, SteadyTime now, SyncerEffects& fx) {
    Round& r = rounds_[p];
    // A round still open without progress becomes the last one (begin_flush
    // merged any with progress): its pulls are answered late, and the last
    // answers hold their progress.
    r.last_pending = false;
    r.open = true;
    r.last = true;
    r.id = next_round_++;
    r.opened = now;
    clear_waiting(r);
    for (uint32_t m = 0; m < s_.learners.size(); ++m) {
      if (!s_.present(m)) continue;  // a leaver's last answers are in already
      r.waiting[m] = 1;
      ++r.waiting_count;
      fx.sends.push_back({m, Pull{p, r.id, true}});
    }
    check_round(p, now, fx);
  }

  void close_last_round(uint32_t p, SteadyTime now, SyncerEffects& fx) {
    Round& r = rounds_[p];
    if (!r.answers.empty()) {
      r.quorum_at = now;  // no grace wait in a last round
      close_round(p, now, fx);
    }
    r.open = r.last = false;
    clear_waiting(r);
    forget_answers(r);
    check_flushed(fx);
  }

  void check_flushed(SyncerEffects& fx) {
    if (flush_ != Flush::kFlushing) return;
    if (std::any_of(rounds_.begin(), rounds_.end(), [](const Round& x) { return x.open || x.last_pending; })) return;
    flush_ = Flush::kDone;
    fx.notes.push_back("every fragment had its last round: the model is final");
  }

  SyncerState& s_;
  std::vector<Round> rounds_;  // by fragment
  std::vector<uint8_t> counts_;  // by learner: counts toward the quorum cap
  std::vector<double> answer_seconds_;  // by learner: how long it took to answer a pull, moving average
  std::vector<double> delivery_seconds_;  // by learner: how long it stayed behind a new version, moving average
  int counted_ = 0;
  uint64_t next_round_ = 1;
  enum class Flush { kNone, kFlushing, kDone };
  Flush flush_ = Flush::kNone;
};

}  // namespace

std::unique_ptr<RoundProtocol> make_decoupled_rounds(SyncerState& state) {
  return std::make_unique<DecoupledRounds>(state);
}

}  // namespace atl
