#include "atoll/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numbers>
#include <sstream>

#include "atoll/job.h"
#include "atoll/printf_string.h"
#include "atoll/json_writer.h"
#include "learner_json.h"

namespace atl {
namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return buf;
}

// Round ends closer than this to the last one counted are the same advance.
constexpr double kSameAdvanceSeconds = 1e-3;

}  // namespace

double uptime_of(const std::vector<RoundEnd>& round_ends, double end, double begin) {
  const double wall = end - begin;
  if (wall <= 0) return 0.0;
  if (round_ends.empty()) return 0.0;
  // Per fragment: its rounds follow one another, one per sync interval or so,
  // whatever the fragment count, so its median gap is the healthy one.
  // A fragment with no round in the window counts as down all along.
  std::map<uint32_t, std::vector<double>> by_fragment;
  for (const RoundEnd& e : round_ends) {
    auto& ends = by_fragment[e.fragment];
    if (e.seconds >= begin && e.seconds <= end) ends.push_back(e.seconds);
  }
  double sum = 0.0;
  for (auto& [fragment, ends] : by_fragment) {
    if (ends.empty()) continue;
    std::sort(ends.begin(), ends.end());
    std::vector<double> gaps;
    double prev = begin;
    for (double t : ends) {
      // Rounds within a millisecond of the last are one advance (a round
      // cancelled and closed again, the final flush): as gaps of zero, they
      // would make the median gap, hence the allowance, zero.
      if (t - prev < kSameAdvanceSeconds) continue;
      gaps.push_back(t - prev);
      prev = t;
    }
    gaps.push_back(std::max(0.0, end - prev));
    std::vector<double> sorted = gaps;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<ptrdiff_t>(sorted.size() / 2), sorted.end());
    const double allowance = 3.0 * sorted[sorted.size() / 2];
    double up = 0.0;
    for (double g : gaps) up += std::min(g, allowance);
    sum += std::min(1.0, up / wall);
  }
  return sum / static_cast<double>(by_fragment.size());
}

void write_counts(JsonWriter& j, const SyncerCountValues& counts) {
  for (size_t i = 0; i < kSyncerCountNumber; ++i) j.field(kSyncerCounts[i].name, counts.values[i]);
}

void write_shard_json(JsonWriter& j, const ShardReport& s) {
  j.field("shard", s.shard);
  j.field("parameters", s.parameters);
  j.field("fragments", s.fragments);
  j.field("rounds", s.rounds);
  write_counts(j, s.counts);
  j.field("rejected", s.rejected);
  j.field("round_mean_ms", s.round_mean_ms);
  j.field("cpu_seconds", s.cpu_seconds);
  j.field("versions_min", s.versions_min);
  j.field("versions_max", s.versions_max);
  j.field("recovering", s.recovering);
}

void write_learner_json(JsonWriter& j, const LearnerReport& l) {
  j.field("id", l.id);
  j.field("speed", l.speed);
  j.field("batch_size", l.batch_size);
  j.field("steps", l.steps);
  j.field("tokens", l.tokens);
  j.field("merged", l.merged);
  j.field("restarts", l.restarts);
  j.field("incarnation", l.incarnation);
  j.field("last_incarnation_tokens", l.last_incarnation_tokens);
  j.field("step_seconds", l.step_seconds);
  j.field("gave_up", l.gave_up);
  j.field("member", l.record.member);
  j.field("departures", l.record.departures);
  j.field("member_seconds", l.record.member_seconds);
}

Report::CurvePoint Report::CurvePoint::of(double seconds, uint64_t tokens, const EvalSums& e, bool text) {
  return {seconds, tokens, e.loss(), text ? e.bits_per_byte() : 0.0, e.accuracy()};
}

void Report::set_final_eval(const EvalSums& sums, const Job& job) {
  const bool text = job.topology().data.kind == DataKind::kText;
  int64_t windows = 0;
  for (const auto& b : job.eval_batches()) windows += b.rows;
  eval.by.clear();
  eval.final = true;
  eval.loss = sums.loss();
  eval.accuracy = sums.accuracy();
  eval.count = sums.count;
  eval.batches = sums.batches;
  eval.loss_stderr = sums.loss_stderr();
  eval.bits_per_byte = text ? sums.bits_per_byte() : 0.0;
  eval.bits_per_byte_stderr = text ? sums.loss_stderr() / std::numbers::ln2 : 0.0;
  eval.windows = text ? windows : 0;
}

std::string Report::to_json() const {
  JsonWriter j;
  j.open(nullptr, '{');
  j.field("mode", mode);
  j.field("model", model);
  j.field("data", data);
  j.field("learners", learners);
  j.field("wall_seconds", wall_seconds);
  j.field("tokens", tokens);
  j.field("tokens_per_second", tokens_per_second);
  j.field("goodput", goodput);
  j.field("allocated_learner_seconds", allocated_learner_seconds);
  j.field("joins", joins);
  j.field("departures", departures);
  j.field("uptime", uptime);
  j.open("hardware", '{');
  j.field("name", hardware.name);
  j.field("compute_seconds", hardware.compute_seconds);
  j.field("step_seconds", hardware.step_seconds);
  j.field("paced_steps", hardware.paced_steps);
  j.field("late_steps", hardware.late_steps);
  j.field("others_cpu", hardware.others_cpu);
  j.field("steal", hardware.steal);
  j.field("learner_processes", hardware.learner_processes);
  j.field("learner_processes_cpu_seconds", hardware.learner_processes_cpu_seconds);
  j.close('}');
  j.open("eval", '{');
  j.field("loss", eval.loss);
  j.field("accuracy", eval.accuracy);
  j.field("bits_per_byte", eval.bits_per_byte);
  j.field("loss_stderr", eval.loss_stderr);
  j.field("bits_per_byte_stderr", eval.bits_per_byte_stderr);
  j.field("count", eval.count);
  j.field("windows", eval.windows);
  j.field("batches", eval.batches);
  if (!eval.by.empty()) j.field("by", eval.by);
  j.field("final", eval.final);
  j.close('}');
  j.open("bytes", '{');
  j.field("learner_to_syncer", bytes.learner_to_syncer);
  j.field("syncer_to_learners", bytes.syncer_to_learners);
  j.close('}');
  j.field("bytes_per_token", bytes_per_token);
  j.field("rounds", rounds);
  j.field("syncer_cpu_seconds", syncer_cpu_seconds);
  j.field("quorum_mean", quorum_mean);
  j.field("grace_wait_mean_ms", grace_wait_mean_ms);
  j.field("round_mean_ms", round_mean_ms);
  j.field("broadcast_adopted_mean_ms", broadcast_adopted_mean_ms);
  j.field("broadcast_adopted_max_ms", broadcast_adopted_max_ms);
  write_counts(j, counts);
  j.field("rejected", rejected);
  j.field("restarts", restarts);
  j.field("checkpoints", checkpoints);
  j.field("versions_min", versions_min);
  j.field("versions_max", versions_max);
  j.open("reintegration_seconds", '[');
  for (double s : reintegration_seconds) j.item(s);
  j.close(']');
  j.open("recovery_seconds", '[');
  for (double x : recovery_seconds) j.item(x);
  j.close(']');
  j.field("regressions_refused", regressions_refused);
  j.field("version_decreases", version_decreases);
  j.open("final_versions", '[');
  for (uint64_t v : final_versions) j.item(v);
  j.close(']');
  j.open("max_adopted_versions", '[');
  for (uint64_t v : max_adopted_versions) j.item(v);
  j.close(']');
  j.field("sample", sample);
  j.open("curve", '[');
  for (const auto& c : curve) {
    j.open(nullptr, '{');
    j.field("seconds", c.seconds);
    j.field("tokens", c.tokens);
    j.field("loss", c.loss);
    j.field("bits_per_byte", c.bits_per_byte);
    j.field("accuracy", c.accuracy);
    j.close('}');
  }
  j.close(']');
  j.open("per_learner", '[');
  for (const auto& l : per_learner) {
    j.open(nullptr, '{');
    write_learner_json(j, l);
    j.close('}');
  }
  j.close(']');
  j.open("shards", '[');
  for (const auto& sh : shards) {
    j.open(nullptr, '{');
    write_shard_json(j, sh);
    j.close('}');
  }
  j.close(']');
  j.open("gave_up", '[');
  for (const auto& g : gave_up) j.item(g);
  j.close(']');
  j.close('}');
  return j.text() + "\n";
}

std::string Report::to_table() const {
  std::ostringstream o;
  char buf[256];
  const auto row = [&](const char* name, const std::string& value) {
    std::snprintf(buf, sizeof buf, "  %-22s %s\n", name, value.c_str());
    o << buf;
  };
  o << "run summary\n";
  row("mode", mode + ", " + std::to_string(learners) + " learners" +
                  (joins + departures ? " (" + std::to_string(joins) + " joined, " + std::to_string(departures) + " departed)"
                                      : std::string()));
  row("model", model);
  row("data", data);
  row("wall time", printf_string("%.1f s", wall_seconds));
  if (hardware.name == "dedicated")
    row("hardware", printf_string("dedicated: a speed-1 step takes %.1f ms", 1e3 * hardware.step_seconds) +
                        printf_string(" (%.1f ms of compute, measured before the run); ", 1e3 * hardware.compute_seconds) +
                        std::to_string(hardware.late_steps) + " of " + std::to_string(hardware.paced_steps) +
                        " paced steps late");
  if (!std::isnan(hardware.others_cpu))
    row("machine", printf_string("other processes took %.0f%% of its CPU, the hypervisor %.0f%%",
                                 100 * hardware.others_cpu, 100 * hardware.steal) +
                       (hardware.learner_processes
                            ? printf_string(" (not counting the run's %llu learner process%s here: %.1f CPU s)",
                                            static_cast<unsigned long long>(hardware.learner_processes),
                                            hardware.learner_processes == 1 ? "" : "es",
                                            hardware.learner_processes_cpu_seconds)
                            : ""));
  row("tokens", std::to_string(tokens) + printf_string(" (%.0f per second)", tokens_per_second));
  row("goodput", printf_string("%.3f", goodput));
  row("uptime", printf_string("%.3f", uptime));
  if (std::isnan(eval.loss)) {  // no figure: say why (no evaluator, a sharded syncer)
    row("held-out loss", eval.by.empty() ? std::string("not measured") : eval.by);
  } else {
    row("held-out loss", printf_string("%.4f", eval.loss) + (eval.final ? "" : " (not of the final model)"));
    if (eval.bits_per_byte > 0)
      row("bits per byte", printf_string("%.4f", eval.bits_per_byte) +
                               (eval.bits_per_byte_stderr > 0 ? printf_string(" +- %.4f", eval.bits_per_byte_stderr) : "") +
                               (std::isnan(eval.accuracy) ? std::string(" (")
                                                          : printf_string(" (next byte right %.1f%%, ", 100 * eval.accuracy)) +
                               (eval.windows > 0 ? std::to_string(eval.windows) + " windows)"
                                                 : std::to_string(eval.count) + " tokens)"));
    else if (!std::isnan(eval.accuracy))
      row("held-out accuracy", printf_string("%.2f%%", 100 * eval.accuracy));
    if (!eval.by.empty()) row("evaluated by", eval.by);
  }
  row("bytes up / down", human_bytes(double(bytes.learner_to_syncer)) + " / " + human_bytes(double(bytes.syncer_to_learners)));
  row("bytes per token", printf_string("%.1f", bytes_per_token));
  row("rounds", std::to_string(rounds) +
                    printf_string(" (quorum %.2f, grace wait %.1f ms, pull to broadcast %.1f ms)", quorum_mean,
                                  grace_wait_mean_ms, round_mean_ms));
  if (broadcast_adopted_mean_ms > 0)
    row("broadcast adopted by all",
        printf_string("%.1f ms mean, %.1f ms at most", broadcast_adopted_mean_ms, broadcast_adopted_max_ms));
  row("syncer CPU", printf_string("%.2f s", syncer_cpu_seconds) +
                        (rounds ? printf_string(" (%.2f ms per round, %.1f%% of the wall time)",
                                                1e3 * syncer_cpu_seconds / double(rounds),
                                                wall_seconds > 0 ? 100.0 * syncer_cpu_seconds / wall_seconds : 0.0)
                                : std::string()));
  row("versions", std::to_string(versions_min) + " .. " + std::to_string(versions_max));
  row("late / stale / rejected",
      std::to_string(counts["late"]) + " / " + std::to_string(counts["stale_refused"]) + " / " + std::to_string(rejected));
  row("restarts", std::to_string(restarts));
  if (!reintegration_seconds.empty()) {
    double worst = *std::max_element(reintegration_seconds.begin(), reintegration_seconds.end());
    row("re-integration", std::to_string(reintegration_seconds.size()) + printf_string(" times, worst %.3f s", worst) +
                              " (start to welcome)");
  }
  if (!recovery_seconds.empty()) {
    double worst = *std::max_element(recovery_seconds.begin(), recovery_seconds.end());
    row("recovery", std::to_string(recovery_seconds.size()) + printf_string(" times, worst %.3f s", worst) +
                        " (failure to welcome)");
  }
  if (counts["recovered_fragments"])
    row("recovered fragments", std::to_string(counts["recovered_fragments"]) + " (from learners' bases)");
  for (const auto& g : gave_up) row("gave up on", g);
  if (!sample.empty()) {
    std::string shown;
    for (char c : sample) shown += (c == '\n' || c == '\r') ? ' ' : (static_cast<unsigned char>(c) < 0x20 ? '?' : c);
    row("sample", "\"" + shown + "\"");
  }
  if (!shards.empty()) {
    o << "  shard  parameters  fragments  rounds  merged  round ms  CPU s  versions\n";
    for (const auto& sh : shards) {
      std::snprintf(buf, sizeof buf, "  %5u  %10llu  %9u  %6llu  %6llu  %8.1f  %5.1f  %llu .. %llu%s\n", sh.shard,
                    static_cast<unsigned long long>(sh.parameters), sh.fragments,
                    static_cast<unsigned long long>(sh.rounds), static_cast<unsigned long long>(sh.counts["merged_pushes"]),
                    sh.round_mean_ms, sh.cpu_seconds, static_cast<unsigned long long>(sh.versions_min),
                    static_cast<unsigned long long>(sh.versions_max), sh.recovering ? "  (recovering)" : "");
      o << buf;
    }
  }
  o << "  learner  speed  batch    steps     tokens  merged  restarts  step ms\n";
  for (const auto& l : per_learner) {
    std::snprintf(buf, sizeof buf, "  %7u  %5.2f  %5d  %7llu  %9llu  %6llu  %8llu  %7.2f%s\n", l.id, l.speed, l.batch_size,
                  static_cast<unsigned long long>(l.steps), static_cast<unsigned long long>(l.tokens),
                  static_cast<unsigned long long>(l.merged), static_cast<unsigned long long>(l.restarts),
                  1000 * l.step_seconds, l.gave_up ? "  (gave up)" : "");
    o << buf;
  }
  return o.str();
}

}  // namespace atl
