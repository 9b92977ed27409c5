#include "atoll/replica_exchange.h"

#include <algorithm>

namespace atl {

ReplicaExchange::ReplicaExchange(ParamLayout layout, std::vector<Fragment> fragments, double speed_label,
                                 uint32_t batch_label)
    : layout_(std::move(layout)), fragments_(std::move(fragments)), speed_label_(speed_label),
      batch_label_(batch_label), last_posted_(fragments_.size(), 0) {
  state_.versions.assign(fragments_.size(), 0);
}

ReplicaRequest ReplicaExchange::request() {
  std::lock_guard lock(mu_);
  ReplicaRequest r;
  for (uint32_t f : update_order_) r.updates.push_back(std::move(updates_.at(f)));
  updates_.clear();
  update_order_.clear();
  r.moments = std::move(moments_in_);
  moments_in_.reset();
  r.freeze = state_.stopping;
  if (r.freeze)
    for (uint32_t f = 0; f < fragments_.size(); ++f) r.reads.push_back(f);
  else
    r.reads.assign(wanted_.begin(), wanted_.end());
  r.read_moments = want_moments_;
  taken_before_ = taken_;
  taken_ = posted_;
  r.sequence = taken_;
  moments_asked_ = r.read_moments;
  return r;
}

uint64_t ReplicaExchange::hand(ReplicaStep step) {
  std::function<void()> notify;
  uint64_t number = 0;
  {
    std::lock_guard lock(mu_);
    const auto now = Clock::now();
    step.seconds = std::chrono::duration<double>(now - last_boundary_).count();
    step.trained_after = taken_before_;
    // A request's number is what had been posted when it was taken: never later than the newest request.
    step.read_after = std::min(step.read_at.value_or(taken_), taken_);
    step.moments_asked = moments_asked_;
    last_boundary_ = now;
    number = ++handed_;
    steps_.push_back(std::move(step));
    notify = notify_;
  }
  if (notify) notify();
  return number;
}

bool ReplicaExchange::released(uint64_t number, double seconds) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                      [&] { return released_ >= number && !copying_; });
}

ReplicaState ReplicaExchange::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

bool ReplicaExchange::wait_welcome(double seconds) const {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return state_.welcomed || state_.over; });
  return state_.welcomed;
}

std::vector<float> ReplicaExchange::global(std::vector<uint64_t>* versions) const {
  std::lock_guard lock(mu_);
  if (versions) *versions = state_.versions;
  return global_;
}

void ReplicaExchange::set_notify(std::function<void()> notify, uint64_t owner) {
  std::function<void()> old;  // dropped outside the lock: it may hold a handle of its own
  std::lock_guard lock(mu_);
  old = std::exchange(notify_, std::move(notify));
  notify_owner_ = owner;
}

void ReplicaExchange::clear_notify(uint64_t owner) {
  std::function<void()> old;
  std::lock_guard lock(mu_);
  if (notify_owner_ != owner) return;  // a later actor's already
  old = std::exchange(notify_, nullptr);
}

std::deque<ReplicaStep> ReplicaExchange::steps() {
  std::deque<ReplicaStep> taken;
  uint64_t handed = 0;
  {
    std::lock_guard lock(mu_);
    taken = std::exchange(steps_, {});
    handed = handed_;
    copying_ = true;  // what they lent is read below: released() waits
  }
  // Lent values are copied here, on the actor's thread (the training thread
  // is a step further by now), outside the lock: moments are the model's size
  // twice, and request() and hand() must not wait behind them.
  for (auto& step : taken) {
    if (!step.lent.empty()) {
      const float* at = step.lent.data();
      step.values.clear();
      for (uint32_t f : step.fragments) {
        const size_t n = f < fragments_.size() ? fragments_[f].size : 0;
        step.values.emplace_back(at, at + n);
        at += n;
      }
      step.lent = {};
    }
    if (!step.moments_lent.empty()) {
      const size_t n = step.moments_lent.size() / 2;
      const float* m = step.moments_lent.data();
      step.moments = OptimizerMoments{step.moments_step, std::vector<float>(m, m + n),
                                      std::vector<float>(m + n, m + 2 * n)};
      step.moments_lent = {};
    }
  }
  std::lock_guard lock(mu_);
  for (auto& step : taken) {
    step.counts = welcome_posted_ != UINT64_MAX && step.trained_after >= welcome_posted_;
    // Values read before the newest update of their fragment was applied are
    // older than what the core adopted: not handed, so read again later.
    for (size_t i = step.fragments.size(); i-- > 0;)
      if (step.fragments[i] >= last_posted_.size() || last_posted_[step.fragments[i]] > step.read_after) {
        step.fragments.erase(step.fragments.begin() + static_cast<ptrdiff_t>(i));
        step.values.erase(step.values.begin() + static_cast<ptrdiff_t>(i));
      }
  }
  // Every step handed before the copy began was taken (or dropped by a new incarnation).
  copying_ = false;
  released_ = std::max(released_, handed);
  cv_.notify_all();
  return taken;
}

void ReplicaExchange::post(std::vector<FragmentUpdate> updates, std::optional<OptimizerMoments> moments) {
  std::lock_guard lock(mu_);
  for (auto& u : updates) {
    if (u.fragment < last_posted_.size()) last_posted_[u.fragment] = ++posted_;
    auto it = updates_.find(u.fragment);
    if (it == updates_.end()) {
      update_order_.push_back(u.fragment);
      updates_.emplace(u.fragment, std::move(u));
      continue;
    }
    // new(old(x)) = s2 (s1 x + b1) + b2 = (s2 s1) x + (s2 b1 + b2); an assignment (s2 = 0) replaces.
    FragmentUpdate& old = it->second;
    if (u.scale != 0.0f)
      for (size_t i = 0; i < u.offset.size(); ++i) u.offset[i] += u.scale * old.offset[i];
    u.scale *= old.scale;
    old = std::move(u);
  }
  if (moments) moments_in_ = std::move(moments);
}

void ReplicaExchange::want(std::set<uint32_t> fragments, bool moments) {
  std::lock_guard lock(mu_);
  wanted_ = std::move(fragments);
  want_moments_ = moments;
}

void ReplicaExchange::set_stopping() {
  std::lock_guard lock(mu_);
  state_.stopping = true;
}

void ReplicaExchange::begin_incarnation(uint64_t incarnation) {
  std::lock_guard lock(mu_);
  updates_.clear();
  update_order_.clear();
  moments_in_.reset();
  wanted_.clear();
  want_moments_ = false;
  steps_.clear();  // the previous actor's steps were never booked: its progress is lost, as a failure's is
  released_ = handed_;  // and what they lent is not read
  cv_.notify_all();
  state_.incarnation = incarnation;
  state_.welcomed = false;
  welcome_posted_ = UINT64_MAX;
  state_.steps = state_.tokens = 0;
}

void ReplicaExchange::set_adopted(uint32_t fragment, uint64_t version, std::span<const float> values) {
  std::lock_guard lock(mu_);
  if (fragment >= fragments_.size()) return;
  state_.versions[fragment] = version;
  if (global_.size() != layout_.size()) global_.assign(layout_.size(), 0.0f);
  scatter(fragments_[fragment], values, global_);
}

void ReplicaExchange::set_welcomed() {
  {
    std::lock_guard lock(mu_);
    state_.welcomed = true;
    welcome_posted_ = posted_;
  }
  cv_.notify_all();
}

void ReplicaExchange::set_booked(uint64_t steps, uint64_t tokens) {
  std::lock_guard lock(mu_);
  state_.steps = steps;
  state_.tokens = tokens;
}

void ReplicaExchange::set_final_evaluation_wanted(bool wanted) {
  {
    std::lock_guard lock(mu_);
    state_.final_evaluation_wanted = wanted;
  }
  cv_.notify_all();
}

void ReplicaExchange::set_over(const std::string& why, bool failed, bool refused) {
  {
    std::lock_guard lock(mu_);
    if (state_.over) return;
    state_.over = true;
    state_.why = why;
    state_.failed = failed;
    state_.refused = refused;
    for (auto& step : steps_) {  // no actor takes them any more: their lent memory is free
      if (!step.lent.empty()) {
        step.lent = {};
        step.fragments.clear();
      }
      step.moments_lent = {};
    }
    released_ = handed_;
  }
  cv_.notify_all();
}

}  // namespace atl
