#include "atoll/assembled_report.h"

#include <algorithm>
#include <memory>

#include "atoll/run_records.h"
#include "atoll/run_view.h"

namespace atl {
namespace {

// `f`'s times moved `seconds` later: onto a clock that started that much earlier.
void shift_times(SyncerFigures& f, double seconds) {
  SyncerStats& s = f.stats;
  f.seconds += seconds;
  for (RoundEnd& e : s.round_ends) e.seconds += seconds;
  for (EvaluationPoint& e : s.evaluations) e.seconds += seconds;
  if (s.first_welcome >= 0) s.first_welcome += seconds;
  if (s.final_seconds >= 0) s.final_seconds += seconds;
  for (LearnerRecord& l : f.learners) l.member_since += seconds;
}

int64_t run_start_unix_ms(const std::vector<ShardFigures>& shards) {
  int64_t earliest = shards.empty() ? 0 : shards.front().figures.started_unix_ms;
  for (const ShardFigures& s : shards) earliest = std::min(earliest, s.figures.started_unix_ms);
  return earliest;
}

}  // namespace

double run_seconds(const SyncerFigures& f, const std::vector<ShardFigures>& shards) {
  return f.seconds + 1e-3 * double(f.started_unix_ms - run_start_unix_ms(shards));
}

Report assembled_report(const Topology& topology, const std::vector<ShardFigures>& shards) {
  if (shards.empty()) return {};
  const int64_t earliest = run_start_unix_ms(shards);
  std::vector<std::shared_ptr<const SyncerSample>> samples;
  for (const ShardFigures& s : shards) {
    SyncerFigures f = s.figures;
    shift_times(f, 1e-3 * double(f.started_unix_ms - earliest));
    SyncerSample sample;
    sample.shard = s.shard;
    sample.parameters = s.parameters;
    sample.fragments = s.fragments;
    sample.seconds = f.seconds;
    sample.cpu_seconds = f.cpu_seconds;
    sample.tokens = f.tokens;
    sample.allocated_seconds = f.allocated_seconds;
    sample.stats = std::move(f.stats);
    sample.learners = std::move(f.learners);
    sample.versions = s.versions;
    samples.push_back(std::make_shared<const SyncerSample>(std::move(sample)));
  }
  const int syncer_shards = static_cast<int>(shards.size());
  const SyncerSample run = merge_shard_samples(samples, syncer_shards);
  const RunCounters none;  // counted in each process (checkpoints, refusals at its door), not in the figures
  const RunView view = fold_view(topology, run, none, {}, {}, /*finished=*/true, /*sealed=*/true, 0);
  Report r = report_from_view(view, run.seconds);  // the latest any shard counted
  for (const auto& s : samples) r.shards.push_back(shard_report(*s, syncer_shards));
  return r;
}

}  // namespace atl
