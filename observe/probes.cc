#include "atoll/probes.h"

namespace atl {
namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

ProbeAnswer probe_health(RunPhase phase, const RunView& v) {
  if (phase == RunPhase::kStarting) return {true, "alive: starting"};
  if (!v.failure.empty()) return {false, "the run cannot go on: " + v.failure};
  if (!v.gave_up.empty()) return {false, "gave up on " + joined(v.gave_up)};
  if (phase == RunPhase::kOver) return {true, "alive: the run is over"};
  return {true, "alive"};
}

ProbeAnswer probe_ready(RunPhase phase, const RunView& v) {
  if (phase == RunPhase::kStarting) return {false, "starting: not running yet (data, ports, or the syncer's topology)"};
  if (!v.failure.empty()) return {false, "the run cannot go on: " + v.failure};
  if (phase == RunPhase::kOver || v.finished) return {false, "the run is over"};
  if (v.holds_syncer && !v.syncer_serving) return {false, "the syncer is restoring its checkpoint"};
  if (v.local_welcomed < v.local_learners)
    return {false, std::to_string(v.local_learners - v.local_welcomed) + " of " + std::to_string(v.local_learners) +
                       " learners here not yet welcomed by the syncer"};
  if (v.syncer_links_down > 0)
    return {false, "the syncer is away: " + std::to_string(v.syncer_links_down) +
                       " connection(s) of learners here lost, reconnecting"};
  if (v.holds_syncer) return {true, "ready: the syncer takes learners (" + std::to_string(v.present) + " up)"};
  return {true, "ready: welcomed by the syncer"};
}

}  // namespace atl
