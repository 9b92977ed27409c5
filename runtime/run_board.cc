#include "atoll/run_board.h"

#include <algorithm>

namespace atl {

void RunBoard::publish(const LiveMetrics& m) {
  std::lock_guard lock(mu_);
  live_ = m;
}

LiveMetrics RunBoard::live() const {
  std::lock_guard lock(mu_);
  LiveMetrics m = live_;
  m.restarts = 0;
  for (const auto& [child, n] : restarts_) m.restarts += n;
  m.reintegrations = reintegrations_.size();
  m.bytes_up = bytes_up.load();
  m.bytes_down = bytes_down.load();
  return m;
}

void RunBoard::publish_final(Final f) {
  std::lock_guard lock(mu_);
  final_ = std::move(f);
  final_.valid = true;
}

void RunBoard::note_reintegration(double seconds) {
  std::lock_guard lock(mu_);
  reintegrations_.push_back(seconds);
}

std::vector<double> RunBoard::reintegrations() const {
  std::lock_guard lock(mu_);
  return reintegrations_;
}

void RunBoard::note_adopted(uint32_t fragment, uint64_t version) {
  std::lock_guard lock(mu_);
  if (max_adopted_.size() <= fragment) max_adopted_.resize(fragment + 1, 0);
  max_adopted_[fragment] = std::max(max_adopted_[fragment], version);
}

void RunBoard::note_versions(const std::vector<uint64_t>& versions) {
  std::lock_guard lock(mu_);
  if (max_published_.size() < versions.size()) max_published_.resize(versions.size(), 0);
  for (size_t p = 0; p < versions.size(); ++p) {
    if (versions[p] < max_published_[p]) ++version_decreases_;
    max_published_[p] = std::max(max_published_[p], versions[p]);
  }
}

uint64_t RunBoard::version_decreases() const {
  std::lock_guard lock(mu_);
  return version_decreases_;
}

std::vector<uint64_t> RunBoard::max_adopted() const {
  std::lock_guard lock(mu_);
  return max_adopted_;
}

RunBoard::Final RunBoard::final_state() const {
  std::lock_guard lock(mu_);
  return final_;
}

void RunBoard::note_restart(const std::string& child) {
  std::lock_guard lock(mu_);
  ++restarts_[child];
}

void RunBoard::note_gave_up(const std::string& child) {
  std::lock_guard lock(mu_);
  gave_up_.push_back(child);
}

uint64_t RunBoard::restarts() const {
  std::lock_guard lock(mu_);
  uint64_t n = 0;
  for (const auto& [child, k] : restarts_) n += k;
  return n;
}

uint64_t RunBoard::restarts_of(const std::string& child) const {
  std::lock_guard lock(mu_);
  const auto it = restarts_.find(child);
  return it == restarts_.end() ? 0 : it->second;
}

std::vector<std::string> RunBoard::gave_up() const {
  std::lock_guard lock(mu_);
  return gave_up_;
}

void RunBoard::fail(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (failure_.empty()) failure_ = why;
  }
  finish();
}

std::string RunBoard::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void RunBoard::finish() {
  std::lock_guard lock(mu_);
  finished_ = true;
  cv_.notify_all();
}

bool RunBoard::finished() const {
  std::lock_guard lock(mu_);
  return finished_;
}

bool RunBoard::wait_finished_until(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return finished_; });
  return finished_;
}

void RunBoard::seal() {
  std::lock_guard lock(mu_);
  finished_ = sealed_ = true;
  cv_.notify_all();
}

bool RunBoard::sealed() const {
  std::lock_guard lock(mu_);
  return sealed_;
}

bool RunBoard::wait_sealed_until(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return sealed_; });
  return sealed_;
}

void RunBoard::plan_snapshots(int points, uint64_t tokens, double seconds) {
  std::lock_guard lock(mu_);
  snapshot_points_ = points;
  snapshot_tokens_ = tokens;
  snapshot_seconds_ = seconds;
}

bool RunBoard::snapshot_due(uint64_t tokens, double seconds) const {
  std::lock_guard lock(mu_);
  const auto next = static_cast<double>(snapshots_.size() + 1);
  if (snapshot_points_ <= 1 || next >= snapshot_points_) return false;
  if (snapshot_tokens_ > 0) return static_cast<double>(tokens) >= static_cast<double>(snapshot_tokens_) * next / snapshot_points_;
  return snapshot_seconds_ > 0 && seconds >= snapshot_seconds_ * next / snapshot_points_;
}

void RunBoard::add_snapshot(Snapshot snapshot) {
  std::lock_guard lock(mu_);
  snapshots_.push_back(std::move(snapshot));
}

std::vector<RunBoard::Snapshot> RunBoard::snapshots() const {
  std::lock_guard lock(mu_);
  return snapshots_;
}

}  // namespace atl
