#include "atoll/run_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <cctype>
#include <cmath>
#include <functional>
#include <mutex>
#include <sstream>
#include <vector>

namespace atl {
namespace {

// One metric: its values by the value of its one label ("" when it has none).
using Values = std::vector<std::pair<std::string, double>>;

struct Spec {
  std::string name;
  std::string help;
  const char* label;  // nullptr: none
  bool counter;
  std::function<Values(const RunView&)> values;
};

Values one(double x) { return {{"", x}}; }

template <class F>
Values per_learner(const RunView& v, F get) {
  Values out;
  for (const auto& l : v.per_learner) out.emplace_back(std::to_string(l.id), static_cast<double>(get(l)));
  return out;
}

template <class F>
Values per_shard(const RunView& v, F get) {
  Values out;
  for (const auto& s : v.shards) out.emplace_back(std::to_string(s.shard), static_cast<double>(get(s)));
  return out;
}

// `written`, and the syncer's plain counts (kSyncerCounts), each for the run
// as atoll_<name>_total and for each shard as atoll_shard_<name>_total: a
// count declared there is exported with no line here.
std::vector<Spec> with_counts(std::vector<Spec> written) {
  std::vector<Spec> out = std::move(written);
  for (size_t i = 0; i < kSyncerCountNumber; ++i) {
    const SyncerCount& c = kSyncerCounts[i];
    std::string help = c.meaning;
    help[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(help[0])));
    out.push_back({std::string("atoll_") + c.name + "_total", help, nullptr, true,
                   [field = c.field](const RunView& v) { return one(double(v.stats.*field)); }});
    out.push_back({std::string("atoll_shard_") + c.name + "_total", help + ", by the shard", "shard", true,
                   [i](const RunView& v) { return per_shard(v, [i](const ShardReport& s) { return s.counts.values[i]; }); }});
  }
  return out;
}

const std::vector<Spec>& specs() {
  static const std::vector<Spec> all = with_counts({
      // The run as a whole.
      {"atoll_run_seconds", "Seconds since the run started", nullptr, false, [](auto& v) { return one(v.seconds); }},
      {"atoll_run_finished", "1 once the token budget, the time limit or a stop ended the run", nullptr, false,
       [](auto& v) { return one(v.finished); }},
      {"atoll_learners", "Learner slots shown: the topology's, and open slots used so far", nullptr, false,
       [](auto& v) { return one(v.learners); }},
      {"atoll_token_budget", "Tokens the run trains for (0: none)", nullptr, false,
       [](auto& v) { return one(double(v.token_budget)); }},
      {"atoll_tokens_total", "Tokens trained by every learner, lost work included", nullptr, true,
       [](auto& v) { return one(double(v.tokens)); }},
      {"atoll_train_loss", "Training loss (nats per token), mean of the connected learners' moving averages", nullptr,
       false, [](auto& v) { return one(v.train_loss); }},
      {"atoll_eval_loss", "Held-out loss of the global model (nats per token), once evaluated", nullptr, false,
       [](auto& v) { return std::isfinite(v.eval_loss) ? one(v.eval_loss) : Values{}; }},
      {"atoll_eval_bits_per_byte", "Held-out bits per byte of the global model (language models), once evaluated",
       nullptr, false,
       [](auto& v) { return std::isfinite(v.eval_bits_per_byte) ? one(v.eval_bits_per_byte) : Values{}; }},
      {"atoll_goodput_ratio", "Merged learner step time over the learner time allocated to the run, so far", nullptr, false,
       [](auto& v) { return one(v.goodput); }},
      {"atoll_alive_ratio", "Share of members up now", nullptr, false, [](auto& v) { return one(v.alive); }},
      // Membership (learners that join and leave).
      {"atoll_learners_members", "Learners that are members of the run now (up or down)", nullptr, false,
       [](auto& v) { return one(v.members); }},
      {"atoll_learners_present", "Members up now", nullptr, false, [](auto& v) { return one(v.present); }},
      {"atoll_joins_total", "Learners that joined (an open slot, or back after departing)", nullptr, true,
       [](auto& v) { return one(double(v.joins)); }},
      {"atoll_departures_total", "Members that left in order (not failures)", nullptr, true,
       [](auto& v) { return one(double(v.departures)); }},
      // The syncer.
      {"atoll_rounds_total", "Global versions made (merges over all fragments; dp: steps applied)", nullptr, true,
       [](auto& v) { return one(double(v.stats.rounds)); }},
      {"atoll_pushes_total", "Learner pushes by result: merged, late (after their round closed), stale, refused",
       "result", true,
       [](auto& v) {
         return Values{{"merged", double(v.stats.merged_pushes)},
                       {"late", double(v.stats.late)},
                       {"stale", double(v.stats.stale_refused)},
                       // Every Reject, the stale ones included, and refusals at a syncer process's door.
                       {"refused", double(v.stats.rejected + v.gateway_refusals)}};
       }},
      {"atoll_quorum_size_mean", "Pushes merged per round, mean over the run", nullptr, false,
       [](auto& v) { return one(v.stats.quorum_mean()); }},
      {"atoll_grace_wait_seconds_total", "Seconds rounds waited from quorum to close, summed", nullptr, true,
       [](auto& v) { return one(v.stats.grace_wait_sum); }},
      {"atoll_grace_wait_seconds_mean", "Seconds a round waited from quorum to close, mean over the run", nullptr,
       false, [](auto& v) { return one(v.stats.grace_wait_mean()); }},
      {"atoll_round_seconds_mean", "Seconds from a round's pulls to its broadcast, mean over the run", nullptr, false,
       [](auto& v) { return one(v.stats.round_seconds_mean()); }},
      {"atoll_broadcast_adopted_seconds_mean",
       "Seconds from a broadcast until every learner connected then reported it adopted, mean over the run", nullptr,
       false, [](auto& v) { return one(v.stats.adopted_seconds_mean()); }},
      {"atoll_broadcast_adopted_seconds_max", "The longest a broadcast took to be adopted by every learner", nullptr,
       false, [](auto& v) { return one(v.stats.adopted_seconds_max); }},
      {"atoll_fragment_version", "Global version of each fragment", "fragment", false,
       [](auto& v) {
         Values out;
         for (size_t p = 0; p < v.versions.size(); ++p) out.emplace_back(std::to_string(p), double(v.versions[p]));
         return out;
       }},
      {"atoll_transfer_bytes_total", "Message bytes between learners and the syncer, by direction (up: to the syncer)",
       "direction", true,
       [](auto& v) { return Values{{"up", double(v.bytes_up)}, {"down", double(v.bytes_down)}}; }},
      {"atoll_syncer_cpu_seconds_total", "CPU seconds of the syncer's thread (its current incarnation)", nullptr,
       true, [](auto& v) { return one(v.syncer_cpu_seconds); }},
      {"atoll_checkpoints_total", "Checkpoints written", nullptr, true,
       [](auto& v) { return one(double(v.checkpoints)); }},
      // Failures.
      {"atoll_restarts_total", "Supervised actors restarted (learners, syncer, checkpointer)", nullptr, true,
       [](auto& v) { return one(double(v.restarts)); }},
      {"atoll_faults_injected_total", "Chaos faults injected into a running target", nullptr, true,
       [](auto& v) { return one(double(v.faults_injected)); }},
      {"atoll_faults_recovered_total", "Learners registered again after a failure", nullptr, true,
       [](auto& v) { return one(double(v.faults_recovered)); }},
      // Per learner.
      // Each syncer shard (syncer.shards > 1; the run's figures above are theirs merged).
      {"atoll_shard_parameters", "Model parameters in the fragments the shard owns", "shard", false,
       [](auto& v) { return per_shard(v, [](const ShardReport& s) { return s.parameters; }); }},
      {"atoll_shard_rounds_total", "Rounds the shard merged", "shard", true,
       [](auto& v) { return per_shard(v, [](const ShardReport& s) { return s.rounds; }); }},
      {"atoll_shard_cpu_seconds_total", "CPU seconds of the shard's thread (its current incarnation)", "shard", true,
       [](auto& v) { return per_shard(v, [](const ShardReport& s) { return s.cpu_seconds; }); }},
      {"atoll_shard_version_min", "The oldest global version among the shard's fragments", "shard", false,
       [](auto& v) { return per_shard(v, [](const ShardReport& s) { return s.versions_min; }); }},
      {"atoll_shard_recovering", "1 while the shard, restarted, still takes newer versions from learners' bases",
       "shard", false, [](auto& v) { return per_shard(v, [](const ShardReport& s) { return s.recovering; }); }},
      {"atoll_learner_up", "1 while the learner is registered and not known to be down", "learner", false,
       [](auto& v) { return per_learner(v, [](const LearnerView& l) { return l.state == LearnerState::kUp; }); }},
      {"atoll_learner_member", "1 while the learner is a member of the run (not departed)", "learner", false,
       [](auto& v) { return per_learner(v, [](const LearnerView& l) { return l.record.member; }); }},
      {"atoll_learner_steps_total", "Inner steps, all incarnations", "learner", true,
       [](auto& v) { return per_learner(v, [](const LearnerView& l) { return l.steps; }); }},
      {"atoll_learner_tokens_total", "Tokens trained, all incarnations", "learner", true,
       [](auto& v) { return per_learner(v, [](const LearnerView& l) { return l.tokens; }); }},
      {"atoll_learner_merged_pushes_total", "Pushes merged into the global model", "learner", true,
       [](auto& v) { return per_learner(v, [](const LearnerView& l) { return l.merged; }); }},
      {"atoll_learner_step_seconds", "Seconds per inner step, moving average", "learner", false,
       [](auto& v) { return per_learner(v, [](const LearnerView& l) { return l.step_seconds; }); }},
      {"atoll_learner_staleness_versions", "Global versions the learner's newest base is behind, worst fragment",
       "learner", false, [](auto& v) { return per_learner(v, [](const LearnerView& l) { return l.staleness; }); }},
      {"atoll_learner_restarts_total", "Times the learner was restarted", "learner", true,
       [](auto& v) { return per_learner(v, [](const LearnerView& l) { return l.restarts; }); }},
      {"atoll_learner_reintegration_seconds", "Seconds from the learner's last failure (as seen) to its welcome back",
       "learner", false,
       [](auto& v) {
         Values out;
         for (const auto& l : v.per_learner)
           if (l.last_reintegration_seconds >= 0)
             out.emplace_back(std::to_string(l.id), l.last_reintegration_seconds);
         return out;
       }},
  });
  return all;
}

}  // namespace

struct RunMetrics::Families {
  std::mutex mu;
  std::vector<prometheus::Family<prometheus::Counter>*> counters;  // by spec; null for gauges
  std::vector<prometheus::Family<prometheus::Gauge>*> gauges;      // by spec; null for counters
};

RunMetrics::RunMetrics(prometheus::Registry& registry) : f_(std::make_unique<Families>()) {
  for (const Spec& s : specs()) {
    if (s.counter) {
      f_->counters.push_back(&prometheus::BuildCounter().Name(s.name).Help(s.help).Register(registry));
      f_->gauges.push_back(nullptr);
    } else {
      f_->gauges.push_back(&prometheus::BuildGauge().Name(s.name).Help(s.help).Register(registry));
      f_->counters.push_back(nullptr);
    }
  }
}

RunMetrics::~RunMetrics() = default;

void RunMetrics::update(const RunView& view) {
  std::lock_guard lock(f_->mu);
  const auto& all = specs();
  for (size_t i = 0; i < all.size(); ++i) {
    for (const auto& [label, x] : all[i].values(view)) {
      prometheus::Labels labels;
      if (all[i].label) labels[all[i].label] = label;
      if (auto* family = f_->counters[i]) {
        auto& c = family->Add(labels);
        if (x > c.Value()) c.Increment(x - c.Value());
      } else {
        f_->gauges[i]->Add(labels).Set(x);
      }
    }
  }
}

std::string prometheus_text(const prometheus::Registry& registry) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  return out.str();
}

}  // namespace atl
