#include "atoll/run_records.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

namespace atl {

void AdoptedVersions::note(uint32_t fragment, uint64_t version) {
  if (fragment >= max_.size()) return;
  any_.store(true, std::memory_order_relaxed);
  auto& m = max_[fragment];
  uint64_t seen = m.load(std::memory_order_relaxed);
  while (seen < version && !m.compare_exchange_weak(seen, version, std::memory_order_relaxed)) {
  }
}

std::vector<uint64_t> AdoptedVersions::max() const {
  std::vector<uint64_t> out;
  if (!any_.load(std::memory_order_relaxed)) return out;
  for (const auto& m : max_) out.push_back(m.load(std::memory_order_relaxed));
  return out;
}

Result<std::shared_ptr<RunLog>> RunLog::open(const std::string& path, Clock::time_point start) {
  std::shared_ptr<RunLog> log(new RunLog());
  log->start_ = start;
  if (!path.empty()) {
    log->file_ = std::fopen(path.c_str(), "w");
    if (!log->file_) return Status::io_error(path + ": cannot write the event tape: " + std::strerror(errno));
  }
  return log;
}

RunLog::~RunLog() {
  if (file_) std::fclose(file_);
}

void RunLog::append(RunEvent e) {
  TimedEvent te{std::chrono::duration<double>(Clock::now() - start_).count(), std::move(e)};
  std::lock_guard lock(mu_);
  if (file_) {
    const std::string line = encode_event_line(te);
    std::fputs(line.c_str(), file_);
    std::fputc('\n', file_);
    std::fflush(file_);
  }
  events_.push_back(std::move(te));
}

std::vector<TimedEvent> RunLog::events() const {
  std::lock_guard lock(mu_);
  return events_;
}

size_t RunLog::size() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

void Readiness::welcomed(uint32_t learner) {
  std::lock_guard lock(mu_);
  if (std::find(welcomed_.begin(), welcomed_.end(), learner) == welcomed_.end()) welcomed_.push_back(learner);
}

size_t Readiness::learners_welcomed() const {
  std::lock_guard lock(mu_);
  return welcomed_.size();
}

void Readiness::set_syncer_link(uint32_t learner, uint32_t shard, bool up) {
  std::lock_guard lock(mu_);
  if (up) links_down_.erase({learner, shard});
  else links_down_.insert({learner, shard});
}

size_t Readiness::syncer_links_down() const {
  std::lock_guard lock(mu_);
  return links_down_.size();
}

void RunLatch::finish() {
  {
    std::lock_guard lock(mu_);
    finished_ = true;
  }
  cv_.notify_all();
}

bool RunLatch::fail(Status why) {
  bool first = false;
  {
    std::lock_guard lock(mu_);
    first = failure_.ok();
    if (first) failure_ = std::move(why);
    finished_ = true;
  }
  cv_.notify_all();
  return first;
}

void RunLatch::seal() {
  {
    std::lock_guard lock(mu_);
    sealed_ = finished_ = true;
  }
  cv_.notify_all();
}

bool RunLatch::finished() const {
  std::lock_guard lock(mu_);
  return finished_;
}

bool RunLatch::sealed() const {
  std::lock_guard lock(mu_);
  return sealed_;
}

Status RunLatch::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

bool RunLatch::wait_finished_until(Clock::time_point deadline) const {
  std::unique_lock lock(mu_);
  return cv_.wait_until(lock, deadline, [this] { return finished_; });
}

bool RunLatch::wait_sealed_until(Clock::time_point deadline) const {
  std::unique_lock lock(mu_);
  return cv_.wait_until(lock, deadline, [this] { return sealed_; });
}

void ModelSnapshots::plan(int points, uint64_t tokens, double seconds) {
  std::lock_guard lock(mu_);
  points_ = points;
  tokens_ = tokens;
  seconds_ = seconds;
}

bool ModelSnapshots::due(uint64_t tokens, double seconds) const {
  std::lock_guard lock(mu_);
  if (points_ <= 1 || static_cast<int>(taken_.size()) >= points_ - 1) return false;
  const double next = static_cast<double>(taken_.size() + 1) / points_;
  if (tokens_ > 0) return static_cast<double>(tokens) >= next * static_cast<double>(tokens_);
  return seconds_ > 0 && seconds >= next * seconds_;
}

void ModelSnapshots::add(Snapshot s) {
  std::lock_guard lock(mu_);
  taken_.push_back(std::move(s));
}

std::vector<ModelSnapshots::Snapshot> ModelSnapshots::taken() const {
  std::lock_guard lock(mu_);
  return taken_;
}

void RunRecords::publish(SyncerSample sample) {
  std::vector<RunEvent> decreases;
  auto next = std::make_shared<const SyncerSample>(std::move(sample));
  {
    std::lock_guard lock(sample_mu_);
    if (!next->recovering) {
      // Logged once per drop below the version published before, not on every tick after it.
      if (last_published_.size() < next->versions.size()) last_published_.resize(next->versions.size(), 0);
      for (uint32_t p = 0; p < next->versions.size(); ++p) {
        if (next->versions[p] < last_published_[p])
          decreases.push_back(event::VersionDecreased{p, last_published_[p], next->versions[p]});
        last_published_[p] = next->versions[p];
      }
    }
    sample_ = std::move(next);
  }
  for (auto& d : decreases) log->append(std::move(d));
}

std::shared_ptr<const SyncerSample> RunRecords::syncer() const {
  std::lock_guard lock(sample_mu_);
  return sample_;
}

void RunRecords::fail(Status why) {
  const std::string text(why.message());
  if (latch.fail(std::move(why))) log->append(event::Failed{text});
}

std::shared_ptr<RunRecords> make_records(size_t fragments, RunLog::Clock::time_point start) {
  auto log = RunLog::open("", start);
  return std::make_shared<RunRecords>(std::move(*log), fragments);
}

}  // namespace atl
