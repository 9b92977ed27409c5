#include "atoll/replica_exchange.h"

#include <algorithm>

namespace atl {

ReplicaExchange::ReplicaExchange(ParamLayout layout, std::vector<Fragment> fragments, double speed_label,
                                 uint32_t batch_label)
    : layout_(std::move(layout)), fragments_(std::move(fragments)), speed_label_(speed_label),
      batch_label_(batch_label) {
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
  return r;
}

void ReplicaExchange::hand(ReplicaStep step) {
  std::function<void()> notify;
  {
    std::lock_guard lock(mu_);
    const auto now = Clock::now();
    step.seconds = std::chrono::duration<double>(now - last_boundary_).count();
    last_boundary_ = now;
    steps_.push_back(std::move(step));
    notify = notify_;
  }
  if (notify) notify();
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

void ReplicaExchange::set_notify(std::function<void()> notify) {
  std::lock_guard lock(mu_);
  notify_ = std::move(notify);
}

std::deque<ReplicaStep> ReplicaExchange::steps() {
  std::lock_guard lock(mu_);
  return std::exchange(steps_, {});
}

void ReplicaExchange::post(std::vector<FragmentUpdate> updates, std::optional<OptimizerMoments> moments) {
  std::lock_guard lock(mu_);
  for (auto& u : updates) {
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
  state_.incarnation = incarnation;
  state_.welcomed = false;
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
  }
  cv_.notify_all();
}

void ReplicaExchange::set_booked(uint64_t steps, uint64_t tokens) {
  std::lock_guard lock(mu_);
  state_.steps = steps;
  state_.tokens = tokens;
}

void ReplicaExchange::set_over(const std::string& why, bool failed, bool refused) {
  {
    std::lock_guard lock(mu_);
    if (state_.over) return;
    state_.over = true;
    state_.why = why;
    state_.failed = failed;
    state_.refused = refused;
  }
  cv_.notify_all();
}

}  // namespace atl
