// [utilization]: the smallest grid bandwidth at which each method keeps a
// share of compute busy (atoll/simulation.h, UtilizationView). dp, DiLoCo
// and Streaming DiLoCo by Streaming DiLoCo's method (atoll/utilization_model.h);
// atoll's decoupled by the simulator, over links of that bandwidth.
#include <algorithm>
#include <cmath>
#include <map>

#include "atoll/simulation.h"

namespace atl {
namespace {

using Row = SimulationReport::UtilizationRow;

// The grid index nearest `gbps` on a log scale (published figures are rounded).
int nearest_index(const std::vector<double>& grid, double gbps) {
  int best = 0;
  for (int k = 1; k < static_cast<int>(grid.size()); ++k)
    if (std::abs(std::log(grid[k] / (gbps * 1e9))) < std::abs(std::log(grid[best] / (gbps * 1e9)))) best = k;
  return best;
}

// The decoupled learners' utilization at one bandwidth when they wait for
// late broadcasts: a plan of its own, no failures, every learner on a link of that rate.
Result<double> decoupled_on_time(const SimulationPlan& plan, const UtilizationView& v, const std::string& method,
                                 const Workload& w, double bits_per_second) {
  SimulationPlan p;
  p.name = plan.name;
  p.seed = plan.seed;
  p.failures.mtbi_chip_years = 1e9;
  p.training = plan.training;
  for (const auto& variant : v.variants)
    if (variant.name == method) p.training.outer = variant.outer;
  p.training.compute.reset();
  p.training.step_seconds = w.step_seconds;
  p.training.step_jitter = 0;
  p.training.parameters = 0;
  // A fragment of fragment_layers layers each H / P steps, as Streaming
  // DiLoCo's; streamed (outer.stream = k), it goes as k fragments back to back.
  p.training.outer.fragments = w.layers / v.fragment_layers * std::max(1, p.training.outer.stream);
  p.network.given = true;
  p.network.link = v.link;
  p.network.link.rate_mbit = bits_per_second / 1e6;
  p.network.wire_parameters = w.parameters;
  p.network.wait_late = true;  // as Streaming DiLoCo's workers do
  p.max_hours = v.periods * p.training.outer.sync_every * w.step_seconds / 3600.0;
  p.precision = 0.5;  // the goodput's interval does not decide: the simulated time does
  auto r = simulate_cell(p, SimulationCell{Mode::kDecoupled, v.learners, v.learners,
                                           std::min(v.learners, plan.training.outer.quorum), 0});
  if (!r.ok()) return r.status().with_context(method + " " + w.name);
  return r->utilization;
}

}  // namespace

Result<std::vector<SimulationReport::UtilizationRow>> utilization_rows(const SimulationPlan& plan,
                                                                       std::vector<SimulationReport::UtilizationAt>* at_out) {
  std::vector<Row> rows;
  if (!plan.utilization) return rows;
  const UtilizationView& v = *plan.utilization;
  const auto& grid = v.grid;
  for (const Workload& w : v.models) {
    for (const std::string& method : v.methods) {
      std::vector<std::optional<double>> found;
      const bool simulated = method != "dp" && method != "diloco" && method != "streaming";  // decoupled or a variant
      if (simulated) {
        // Bisection over the grid for each target, each bandwidth simulated once.
        std::map<int, double> on_time;
        const auto at = [&](int k) -> Result<double> {
          if (auto it = on_time.find(k); it != on_time.end()) return it->second;
          auto u = decoupled_on_time(plan, v, method, w, grid[static_cast<size_t>(k)]);
          if (u.ok()) on_time[k] = *u;
          return u;
        };
        for (double b : v.at) {
          auto u = decoupled_on_time(plan, v, method, w, b);
          if (!u.ok()) return u.status();
          if (at_out) at_out->push_back({w.name, method, b, *u});
        }
        for (double target : v.targets) {
          const int last = static_cast<int>(grid.size()) - 1;
          auto top = at(last);
          if (!top.ok()) return top.status();
          if (*top < target) {
            found.push_back(std::nullopt);
            continue;
          }
          int lo = -1, hi = last;  // at(lo) < target (or none), at(hi) >= target
          while (hi - lo > 1) {
            const int mid = (lo + hi) / 2;
            auto u = at(mid);
            if (!u.ok()) return u.status();
            (*u >= target ? hi : lo) = mid;
          }
          found.push_back(grid[static_cast<size_t>(hi)]);
        }
      } else {
        SyncSchedule s = method == "dp" ? v.dp : method == "diloco" ? v.diloco : v.streaming;
        if (method == "streaming") s.fragments = w.layers / v.fragment_layers;
        if (Status ok = validate(w, s); !ok.ok()) return ok.with_context(method + " " + w.name);
        for (double b : v.at)
          if (at_out) at_out->push_back({w.name, method, b, compute_utilization(w, s, b)});
        for (double target : v.targets) {
          auto b = smallest_bandwidth(w, s, target, grid);
          if (!b.ok()) return b.status().with_context(method + " " + w.name);
          found.push_back(*b);
        }
      }
      for (size_t i = 0; i < v.targets.size(); ++i) {
        Row r{w.name, method, v.targets[i], found[i], std::nullopt, 0};
        for (const auto& ref : v.references)
          if (ref.model == w.name && ref.method == method && ref.gbps[i] >= 0) r.paper_gbps = ref.gbps[i];
        if (r.paper_gbps && r.bits_per_second)
          r.grid_steps_off = nearest_index(grid, *r.bits_per_second / 1e9) - nearest_index(grid, *r.paper_gbps);
        rows.push_back(std::move(r));
      }
    }
  }
  return rows;
}

}  // namespace atl
