#include "atoll/link_advice.h"

#include <algorithm>
#include <cmath>

#include "atoll/simulation.h"

namespace atl {
namespace {

// Pieces a push is cut into when streamed: Table 4's choice (a 3-layer
// fragment as 12, whole tensors for a transformer's layers).
constexpr int kStreamPieces = 12;
constexpr int kMaxFragments = 4096;  // topology.cc's outer.fragments range

// Measured on the CPU headline (docs/benchmarks.md): bits per byte at equal tokens against the default.
constexpr const char* kStreamedCost = "streamed: +0.3% +/- 0.2 (within the spread), 3 seeds (\"Streaming rounds\")";
constexpr const char* kEagerCost = "eager updates: +1.0% +/- 0.8, 3 seeds (\"Eager updates\")";
constexpr const char* kDoubleHCost = "H x 2: +6.0% at 4M bytes, none at 17.5M, 1 seed each (\"Sweeps\")";

}  // namespace

Result<LinkAdvice> advise_link(const LinkQuestion& q) {
  if (!(q.parameters >= 1)) return Status::invalid_argument("the model size must be at least 1 parameter");
  if (!(q.step_seconds > 0)) return Status::invalid_argument("the step time must be above 0 s");
  if (q.learners < 1) return Status::invalid_argument("at least 1 learner");
  if (!(q.link.rate_mbit > 0)) return Status::invalid_argument("the link needs a rate (e.g. rate=1gbit)");
  if (!(q.target > 0 && q.target < 1)) return Status::invalid_argument("the target must be in (0, 1)");

  const OuterSpec& o = q.outer;
  // Push times per H steps: the topology's groups of outer.stream fragments.
  const int stream = std::clamp(o.stream, 1, std::max(1, o.fragments));
  const int pushes = (o.fragments + stream - 1) / stream;
  int pieces = kStreamPieces;
  if (q.tensors > 0) pieces = std::min(pieces, q.tensors / std::max(1, pushes));
  pieces = std::min(pieces, kMaxFragments / std::max(1, pushes));

  // Each option: its settings as keys (for the user) and as an OuterSpec
  // whose `fragments` counts push times (the search multiplies by stream).
  LinkAdvice advice;
  std::vector<OuterSpec> outers;
  const auto with = [&](std::string name, int k, bool eager, bool twice_h, std::string quality) {
    LinkOption option{std::move(name), {}, 0.0, std::nullopt, std::move(quality)};
    OuterSpec x = o;
    x.fragments = pushes;
    x.stream = k;
    x.eager_updates = o.eager_updates || eager;
    if (twice_h) x.sync_every = 2 * o.sync_every;
    if (k != stream) {
      option.sets.push_back("outer.fragments=" + std::to_string(pushes * k));
      option.sets.push_back("outer.stream=" + std::to_string(k));
    }
    if (x.eager_updates != o.eager_updates) option.sets.push_back("outer.eager_updates=true");
    if (twice_h) option.sets.push_back("outer.sync_every=" + std::to_string(x.sync_every));
    advice.options.push_back(std::move(option));
    outers.push_back(x);
  };
  with("as set", stream, false, false, "none: the topology's settings");
  if (pieces >= 2 && stream < pieces) {
    const std::string streamed = kStreamedCost;
    const bool eager = o.carry_progress && !o.eager_updates;  // eager updates need carry_progress
    with("streamed", pieces, false, false, streamed);
    if (eager) with("streamed, eager", pieces, true, false, streamed + "; " + kEagerCost);
    with("streamed, H x 2", pieces, false, true, streamed + "; " + kDoubleHCost);
    if (eager) with("streamed, eager, H x 2", pieces, true, true, streamed + "; " + kEagerCost + "; " + kDoubleHCost);
  } else if (stream >= pieces && pieces >= 2) {
    advice.note = "the topology streams already (outer.stream = " + std::to_string(stream) + ")";
  } else {
    advice.note = "no streamed options: the model's " + std::to_string(q.tensors) + " tensors make no more than " +
                  std::to_string(q.tensors) + " fragments, fewer than 2 per push";
  }

  // The options as rows of one [utilization] search: a workload whose
  // "layers" are the push times, a fragment of one "layer" each.
  SimulationPlan plan;
  plan.name = "link";
  plan.training.outer = o;
  UtilizationView v;
  v.targets = {q.target};
  v.at = {q.link.rate_mbit * 1e6};
  v.link = q.link;
  v.fragment_layers = 1;
  v.learners = q.learners;
  v.methods.clear();
  v.models = {Workload{"model", q.parameters, pushes, q.step_seconds}};
  for (size_t i = 0; i < advice.options.size(); ++i) {
    v.variants.push_back({advice.options[i].name, advice.options[i].sets, outers[i]});
    v.methods.push_back(advice.options[i].name);
  }
  // The rate the link needs, on a grid around it: a tenth of it to a hundred times.
  const double gbit = q.link.rate_mbit / 1e3;
  v.grid = bandwidth_grid(gbit / 10, gbit * 100, 40);
  plan.utilization = v;
  std::vector<SimulationReport::UtilizationAt> at;
  auto rows = utilization_rows(plan, &at);
  if (!rows.ok()) return rows.status();
  for (size_t i = 0; i < advice.options.size(); ++i) {
    LinkOption& option = advice.options[i];
    for (const auto& a : at)
      if (a.method == option.name) option.utilization = a.utilization;
    for (const auto& r : *rows)
      if (r.method == option.name) option.needs_bits_per_second = r.bits_per_second;
    if (advice.chosen < 0 && option.utilization >= q.target) advice.chosen = static_cast<int>(i);
  }
  return advice;
}

}  // namespace atl
