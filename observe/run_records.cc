#include "atoll/run_records.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "atoll/fragments.h"

namespace atl {

void LearnerProcessesCpu::note(uint64_t process, double cpu_seconds) {
  std::lock_guard lock(mu_);
  double& last = by_process_[process];
  last = std::max(last, cpu_seconds);  // reordered reports never take time back
}

double LearnerProcessesCpu::seconds() const {
  std::lock_guard lock(mu_);
  double sum = 0.0;
  for (const auto& [process, cpu] : by_process_) sum += cpu;
  return sum;
}

size_t LearnerProcessesCpu::processes() const {
  std::lock_guard lock(mu_);
  return by_process_.size();
}

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

bool ModelSnapshots::due(uint64_t tokens, double seconds, uint32_t shard) const {
  std::lock_guard lock(mu_);
  const size_t taken = shard < taken_.size() ? taken_[shard].size() : 0;
  if (points_ <= 1 || static_cast<int>(taken) >= points_ - 1) return false;
  const double next = static_cast<double>(taken + 1) / points_;
  if (tokens_ > 0) return static_cast<double>(tokens) >= next * static_cast<double>(tokens_);
  return seconds_ > 0 && seconds >= next * seconds_;
}

void ModelSnapshots::add(Snapshot s, uint32_t shard) {
  std::lock_guard lock(mu_);
  if (taken_.size() <= shard) taken_.resize(shard + 1);
  taken_[shard].push_back(std::move(s));
}

size_t ModelSnapshots::count(uint32_t shard) const {
  std::lock_guard lock(mu_);
  return shard < taken_.size() ? taken_[shard].size() : 0;
}

std::vector<ModelSnapshots::Snapshot> ModelSnapshots::taken(uint32_t shard) const {
  std::lock_guard lock(mu_);
  return shard < taken_.size() ? taken_[shard] : std::vector<Snapshot>{};
}

SyncerStats merge_shard_stats(const std::vector<const SyncerStats*>& shards) {
  SyncerStats o;
  if (shards.empty()) return o;
  const SyncerStats& first = *shards.front();
  o.evaluations = first.evaluations;
  o.recovery_seconds = first.recovery_seconds;
  o.first_welcome = first.first_welcome;
  o.final_seconds = first.final_seconds;
  for (const SyncerStats* shard : shards) {
    const SyncerStats& t = *shard;
    o.rounds += t.rounds;
    for (const SyncerCount& c : kSyncerCounts) o.*c.field += t.*c.field;
    o.rejected += t.rejected;
    o.quorum_sum += t.quorum_sum;
    o.grace_wait_sum += t.grace_wait_sum;
    o.round_seconds_sum += t.round_seconds_sum;
    o.adopted_broadcasts += t.adopted_broadcasts;
    o.adopted_seconds_sum += t.adopted_seconds_sum;
    o.adopted_seconds_max = std::max(o.adopted_seconds_max, t.adopted_seconds_max);
    o.good_seconds += t.good_seconds;  // each shard counts its fragments' share of a step
    o.bytes_received += t.bytes_received;
    o.bytes_sent += t.bytes_sent;
    o.round_ends.insert(o.round_ends.end(), t.round_ends.begin(), t.round_ends.end());
    if (t.first_welcome >= 0 && (o.first_welcome < 0 || t.first_welcome < o.first_welcome))
      o.first_welcome = t.first_welcome;
    // Final once every shard's model is.
    o.final_seconds = o.final_seconds < 0 || t.final_seconds < 0 ? -1.0 : std::max(o.final_seconds, t.final_seconds);
    // A learner's recovery ends when the last shard welcomed it back.
    for (size_t i = 0; i < t.recovery_seconds.size() && i < o.recovery_seconds.size(); ++i)
      o.recovery_seconds[i] = std::max(o.recovery_seconds[i], t.recovery_seconds[i]);
    if (shard != &first) o.evaluations.insert(o.evaluations.end(), t.evaluations.begin(), t.evaluations.end());
  }
  std::sort(o.round_ends.begin(), o.round_ends.end());
  return o;
}

SyncerSample merge_shard_samples(const std::vector<std::shared_ptr<const SyncerSample>>& by_shard,
                                 int syncer_shards) {
  const SyncerSample* base = nullptr;  // the lowest shard that published: whole-run figures alike at every shard
  for (const auto& s : by_shard)
    if (s && !base) base = s.get();
  if (!base) return {};
  SyncerSample out = *base;
  out.shard = 0;
  out.parameters = 0;
  out.fragments = 0;
  out.cpu_seconds = 0.0;
  out.recovering = false;
  const auto owner = [&](size_t p) -> const SyncerSample* {
    const auto& s = by_shard[shard_of(static_cast<uint32_t>(p), syncer_shards)];
    return s ? s.get() : nullptr;
  };
  std::vector<const SyncerStats*> stats;
  for (const auto& sp : by_shard) {
    if (!sp) continue;
    const SyncerSample& s = *sp;
    out.seconds = std::max(out.seconds, s.seconds);
    out.cpu_seconds += s.cpu_seconds;
    out.parameters += s.parameters;
    out.fragments += s.fragments;
    out.recovering = out.recovering || s.recovering;
    out.tokens = std::max(out.tokens, s.tokens);
    out.allocated_seconds = std::max(out.allocated_seconds, s.allocated_seconds);
    stats.push_back(&s.stats);
    if (s.learners.size() > out.learners.size()) out.learners.resize(s.learners.size());
  }
  out.stats = merge_shard_stats(stats);
  for (size_t p = 0; p < out.versions.size(); ++p) {
    const SyncerSample* o = owner(p);
    out.versions[p] = o && p < o->versions.size() ? o->versions[p] : 0;
  }
  for (size_t id = 0; id < out.learners.size(); ++id) {
    LearnerRecord& l = out.learners[id];
    bool seen = false;
    for (const auto& sp : by_shard) {
      if (!sp || id >= sp->learners.size()) continue;
      const LearnerRecord& r = sp->learners[id];
      if (!seen) {
        l = r;
        l.merged = 0;
      }
      l.connected = seen ? l.connected && r.connected : r.connected;  // up where every shard has it
      l.steps = std::max(l.steps, r.steps);
      l.tokens = std::max(l.tokens, r.tokens);
      l.past_steps = std::max(l.past_steps, r.past_steps);
      l.past_tokens = std::max(l.past_tokens, r.past_tokens);
      l.registrations = std::max(l.registrations, r.registrations);
      l.failures = std::max(l.failures, r.failures);
      l.merged += r.merged;
      seen = true;
    }
    for (size_t p = 0; p < l.progress.size() || p < l.merged_through.size(); ++p) {
      const SyncerSample* o = owner(p);
      if (!o || id >= o->learners.size()) continue;
      const LearnerRecord& r = o->learners[id];
      if (p < l.progress.size() && p < r.progress.size()) l.progress[p] = r.progress[p];
      if (p < l.merged_through.size() && p < r.merged_through.size()) l.merged_through[p] = r.merged_through[p];
    }
  }
  return out;
}

void RunRecords::publish(SyncerSample sample, uint32_t shard) {
  std::vector<RunEvent> decreases;
  auto next = std::make_shared<const SyncerSample>(std::move(sample));
  {
    std::lock_guard lock(sample_mu_);
    if (!next->recovering) {
      // Logged once per drop below the version published before, not on every tick after it.
      if (last_published_.size() < next->versions.size()) last_published_.resize(next->versions.size(), 0);
      for (uint32_t p = 0; p < next->versions.size(); ++p) {
        if (shard_of(p, shards_) != shard) continue;  // another shard's: not held here
        if (next->versions[p] < last_published_[p])
          decreases.push_back(event::VersionDecreased{p, last_published_[p], next->versions[p]});
        last_published_[p] = next->versions[p];
      }
    }
    if (shard < by_shard_.size()) by_shard_[shard] = next;
    merged_ = shards_ == 1 ? std::move(next) : std::make_shared<const SyncerSample>(merge_shard_samples(by_shard_, shards_));
  }
  for (auto& d : decreases) log->append(std::move(d));
}

std::shared_ptr<const SyncerSample> RunRecords::syncer() const {
  std::lock_guard lock(sample_mu_);
  return merged_;
}

std::shared_ptr<const SyncerSample> RunRecords::shard(uint32_t shard) const {
  std::lock_guard lock(sample_mu_);
  return shard < by_shard_.size() ? by_shard_[shard] : nullptr;
}

void RunRecords::seal_shard(uint32_t shard, size_t held) {
  bool all = false;
  {
    std::lock_guard lock(sample_mu_);
    sealed_shards_.insert(shard);
    all = sealed_shards_.size() >= held;
  }
  if (all) latch.seal();
}

void RunRecords::fail(Status why) {
  const std::string text(why.message());
  if (latch.fail(std::move(why))) log->append(event::Failed{text});
}

std::shared_ptr<RunRecords> make_records(size_t fragments, RunLog::Clock::time_point start, int syncer_shards) {
  auto log = RunLog::open("", start);
  return std::make_shared<RunRecords>(std::move(*log), fragments, syncer_shards);
}

}  // namespace atl
