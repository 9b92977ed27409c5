// What `atoll simulate` prints and writes (atoll/simulation.h): a table beside
// the paper's, the planning view, the scavenging table, their JSON, and the
// planning view as an SVG chart.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "atoll/printf_string.h"
#include "atoll/simulation.h"
#include "atoll/json_writer.h"

namespace atl {
namespace {

// 150000 -> "150k", 1200000 -> "1.2M".
std::string chips_label(int64_t chips) {
  if (chips >= 1000000 && chips % 100000 == 0) return printf_string("%gM", double(chips) / 1e6);
  if (chips >= 1000 && chips % 1000 == 0) return printf_string("%gk", double(chips) / 1e3);
  return std::to_string(chips);
}

std::string row_label(const SimulationCell& c) {
  if (c.mode != Mode::kDecoupled) return std::string(mode_name(c.mode)) + " (M = " + std::to_string(c.learners) + ")";
  std::string s = "decoupled M = " + std::to_string(c.learners);
  if (c.quorum > 1) s += ", K = " + std::to_string(c.quorum);
  if (c.sync_every > 0) s += ", H = " + std::to_string(c.sync_every);
  return s;
}

std::vector<int64_t> columns_of(const std::vector<CellResult>& cells) {
  std::vector<int64_t> chips;
  for (const auto& c : cells)
    if (std::find(chips.begin(), chips.end(), c.cell.chips) == chips.end()) chips.push_back(c.cell.chips);
  return chips;
}

std::string describe_failures(const SimulationPlan& plan) {
  const FailureModel& f = plan.failures;
  const TrainingModel& t = plan.training;
  std::ostringstream out;
  out << "failures: MTBI " << f.mtbi_chip_years << " chip-years, slices of " << f.slice_chips
      << " chips, recovery " << f.recovery.describe() << ", restart " << f.restart_seconds << " s, elastic downscale "
      << f.downscale_seconds << " s / upscale " << f.upscale_seconds << " s"
      << (f.while_down ? "" : ", no interruptions counted while a job is down") << "\n";
  out << "training: step " << t.step_seconds << " s (jitter " << t.step_jitter << "), H = " << t.outer.sync_every
      << ", P = " << t.outer.fragments << ", tau = " << t.outer.overlap << ", grace gamma " << t.outer.grace_gamma;
  if (!plan.network.given) out << ", latency " << t.latency_seconds << " s";
  out << ", learners that lose a slice "
      << (t.learner_failure == LearnerFailure::kElastic ? "train on (elastic)" : "restart") << "\n";
  if (t.compute)
    out << printf_string("compute: %.3g parameters, %.3g tokens per step on %g chips of %.3g FLOP/s at %.0f%% MFU\n",
                         t.compute->parameters, t.compute->tokens_per_step, t.compute->chips, t.compute->peak_flops,
                         100.0 * t.compute->mfu);
  if (const NetworkModel& n = plan.network; n.given) {
    out << "network: each learner's link " << n.link.to_string();
    for (const auto& r : n.regions) {
      out << "; learners";
      for (int l : r.learners) out << " " << l;
      out << ": " << r.link.to_string();
    }
    out << "; each shard's hub " << (n.hub.active() ? n.hub.to_string() : "unlimited");
    if (n.wire_parameters > 0) out << printf_string("; messages sized for %.3g parameters", n.wire_parameters);
    for (const auto& p : n.partitions) {
      out << printf_string("; partition at %g s for %g s of learners", p.at_seconds, p.seconds);
      for (int l : p.learners) out << " " << l;
    }
    out << "\n";
  }
  return out.str();
}

std::string describe_scavenging(const SimulationPlan& plan) {
  const ScavengingPlan& s = *plan.scavenging;
  std::ostringstream out;
  out << "scavenging: a core of " << s.core << " learner" << (s.core == 1 ? "" : "s") << " (" << s.learner_chips
      << " chip" << (s.learner_chips == 1 ? "" : "s") << " each, under [failures]), K = " << s.quorum << "; ";
  if (!s.trace.empty()) out << "scavenged learners up and down as " << s.trace_path << " says";
  else if (s.availability >= 1.0) out << "scavenged learners always up";
  else
    out << printf_string("scavenged learners up %.0f%% of the time, in up periods of mean %g s", 100.0 * s.availability,
                         s.mean_up_seconds);
  if (s.notice_seconds > 0) out << printf_string(", %g s notice before each departure\n", s.notice_seconds);
  else out << ", no notice: each departure is a failure\n";
  return out.str();
}

void write_scavenging_cell(JsonWriter& w, const char* key, const CellResult& r) {
  w.open(key, '{');
  w.field("scavenged", r.cell.scavenged);
  w.field("goodput", r.goodput);
  w.field("goodput_halfwidth", r.goodput_halfwidth);
  w.field("allocated_learners", r.allocated_learners);
  w.field("merged_learners", r.merged_learners);
  w.field("merged_learners_halfwidth", r.merged_halfwidth);
  w.field("trained_learners", r.trained_learners);
  w.field("allocated_learner_hours", r.allocated_learners * r.measured_hours);
  w.field("merged_learner_hours", r.merged_learners * r.measured_hours);
  w.field("tokens", r.tokens);
  w.field("speedup", r.speedup);
  w.field("speedup_halfwidth", r.speedup_halfwidth);
  w.field("tokens_speedup", r.tokens_speedup);
  w.field("joins", r.joins);
  w.field("departures", r.departures);
  w.field("vanished", r.vanished);
  w.field("released", r.released);
  w.field("cut_short", r.cut_short);
  w.field("claims_refused", r.claims_refused);
  w.field("join_seconds_mean", r.join_seconds_mean);
  w.field("join_seconds_max", r.join_seconds_max);
  w.field("measured_hours", r.measured_hours);
  w.field("uptime", r.uptime);
  w.field("rounds", r.rounds);
  w.field("simulated_hours", r.simulated_hours);
  w.field("interruptions", r.interruptions);
  w.field("events", r.events);
  w.field("wall_seconds", r.wall_seconds);
  w.close('}');
}

void write_cell(JsonWriter& w, const CellResult& r) {
  w.open(nullptr, '{');
  w.field("mode", mode_name(r.cell.mode));
  w.field("learners", r.cell.learners);
  w.field("chips", r.cell.chips);
  if (r.cell.mode == Mode::kDecoupled) {
    w.field("quorum", r.cell.quorum);
    if (r.cell.sync_every > 0) w.field("sync_every", r.cell.sync_every);
  }
  w.field("goodput", r.goodput);
  w.field("goodput_halfwidth", r.goodput_halfwidth);
  w.field("uptime", r.uptime);
  w.field("paper", r.reference ? *r.reference : std::nan(""));  // written as null
  w.field("simulated_hours", r.simulated_hours);
  w.field("interruptions", r.interruptions);
  w.field("events", r.events);
  w.field("wall_seconds", r.wall_seconds);
  w.field("utilization", r.utilization);
  w.field("on_time", r.on_time);
  w.field("lost_to_partition", r.lost_to_partition);
  if (r.cell.mode == Mode::kDecoupled) {
    w.field("rounds", r.rounds);
    w.field("merged_pushes", r.merged_pushes);
    w.field("late_pushes", r.late_pushes);
    w.field("repairs", r.repairs);
    w.field("syncer_seconds", r.syncer_seconds);
    w.field("reintegrations", r.reintegrations);
    w.field("reintegration_seconds_mean", r.reintegration_seconds_mean);
    w.field("reintegration_seconds_max", r.reintegration_seconds_max);
  }
  w.close('}');
}

void write_utilization_row(JsonWriter& w, const SimulationReport::UtilizationRow& r) {
  w.open(nullptr, '{');
  w.field("model", r.model);
  w.field("method", r.method);
  w.field("target", r.target);
  w.field("gbps", r.bits_per_second ? *r.bits_per_second / 1e9 : std::nan(""));  // null: no grid bandwidth reaches it
  w.field("paper_gbps", r.paper_gbps ? *r.paper_gbps : std::nan(""));
  if (r.paper_gbps && r.bits_per_second) w.field("grid_steps_off", r.grid_steps_off);
  w.close('}');
}

// "what the method needs (the paper's)" per target, a line per method, a block per model.
std::string utilization_table(const SimulationPlan& plan, const SimulationReport& report) {
  const UtilizationView& v = *plan.utilization;
  std::ostringstream out;
  out << printf_string("utilization: the smallest of %zu log-spaced bandwidths from %.3g to %.3g Gbit/s at which each\n"
                       "method keeps a share of compute busy, Gbit/s (the reference's in brackets)\n",
                       v.grid.size(), v.grid.front() / 1e9, v.grid.back() / 1e9);
  const auto schedule = [](const SyncSchedule& s) {
    return printf_string("H = %d, tau = %d, %g bits, volume %g, latency %g s", s.sync_every, s.overlap,
                         s.bits_per_parameter, s.volume_factor, s.latency_seconds);
  };
  out << "  dp: " << schedule(v.dp) << "\n  diloco: " << schedule(v.diloco) << "\n  streaming: " << schedule(v.streaming)
      << ", fragments of " << v.fragment_layers << " layers\n";
  const OuterSpec& o = plan.training.outer;
  out << printf_string("  decoupled: %d simulated learners, H = %d, tau = %d, push %s, broadcast %s, K = %d, fragments of %d layers;\n"
                       "    its learners wait for a broadcast later than tau steps after its push, as Streaming DiLoCo's workers do\n",
                       v.learners, o.sync_every, o.overlap, codec_name(o.push_codec), codec_name(o.broadcast_codec),
                       o.quorum, v.fragment_layers);
  for (const auto& variant : v.variants) {
    std::string sets;
    for (const auto& s : variant.sets) sets += (sets.empty() ? "" : ", ") + s;
    out << "  " << variant.name << ": decoupled with " << sets
        << (variant.outer.eager_updates ? "; late only H steps after its push (eager updates)" : "") << "\n";
  }
  const auto width = [&] {
    size_t n = 11;
    for (const auto& m : v.methods) n = std::max(n, m.size() + 2);
    return static_cast<int>(n);
  }();
  int compared = 0, within = 0, exact = 0;
  for (const Workload& w : v.models) {
    out << printf_string("\n%s: %.3g parameters, %d layers, %g s a step\n%-*s", w.name.c_str(), w.parameters, w.layers,
                         w.step_seconds, width, "");
    for (double t : v.targets) out << printf_string("%17s", printf_string("%g%%", 100.0 * t).c_str());
    out << "\n";
    for (const std::string& m : v.methods) {
      out << printf_string("%-*s", width, m.c_str());
      for (const auto& r : report.utilization) {
        if (r.model != w.name || r.method != m) continue;
        std::string cell = r.bits_per_second ? printf_string("%.1f", *r.bits_per_second / 1e9) : "-";
        if (r.paper_gbps) {
          cell += printf_string(" (%.1f)", *r.paper_gbps);
          if (r.bits_per_second) {
            ++compared;
            within += std::abs(r.grid_steps_off) <= 1;
            exact += r.grid_steps_off == 0;
          }
        }
        out << printf_string("%17s", cell.c_str());
      }
      out << "\n";
    }
  }
  if (!report.utilization_at.empty()) {
    out << "\nutilization % at given bandwidths\n";
    for (const Workload& w : v.models)
      for (const std::string& m : v.methods) {
        out << printf_string("%-8s%-*s", w.name.c_str(), width, m.c_str());
        for (const auto& a : report.utilization_at)
          if (a.model == w.name && a.method == m)
            out << printf_string("   %g Gbit/s: %6.2f", a.bits_per_second / 1e9, 100.0 * a.utilization);
        out << "\n";
      }
  }
  if (compared > 0)
    out << printf_string("\nAgainst the reference: %d of %d cells within one grid step, %d on the same step.\n", within,
                         compared, exact);
  return out.str();
}

}  // namespace

std::string simulation_table(const SimulationPlan& plan, const SimulationReport& report) {
  std::ostringstream out;
  const auto& cells = report.cells;
  out << plan.name << (cells.empty() ? "" : ": goodput % (the plan's reference in brackets)") << "\n"
      << describe_failures(plan) << "\n";
  if (!cells.empty()) {
    const std::vector<int64_t> chips = columns_of(cells);
    std::vector<std::string> rows;
    for (const auto& c : cells)
      if (std::find(rows.begin(), rows.end(), row_label(c.cell)) == rows.end()) rows.push_back(row_label(c.cell));
    out << printf_string("%-30s", "");
    for (int64_t n : chips) out << printf_string("%13s", chips_label(n).c_str());
    out << "\n";
    double worst = 0.0, widest = 0.0;
    int within = 0, compared = 0;
    for (const auto& row : rows) {
      out << printf_string("%-30s", row.c_str());
      for (int64_t n : chips) {
        const auto it = std::find_if(cells.begin(), cells.end(),
                                     [&](const CellResult& c) { return row_label(c.cell) == row && c.cell.chips == n; });
        if (it == cells.end()) {
          out << printf_string("%13s", "");
          continue;
        }
        widest = std::max(widest, it->goodput_halfwidth);
        const std::string ref = it->reference ? printf_string("(%.0f)", 100.0 * *it->reference) : "";
        out << printf_string("%8.1f %-4s", 100.0 * it->goodput, ref.c_str());
        if (it->reference && it->cell.mode == Mode::kDecoupled) {
          const double off = std::abs(it->goodput - *it->reference);
          worst = std::max(worst, off);
          within += off <= 0.03 ? 1 : 0;
          ++compared;
        }
      }
      out << "\n";
    }
    out << printf_string("95%% intervals: within +-%.1f points.", 100.0 * widest);
    if (compared > 0)
      out << printf_string(" Decoupled cells within 3 points of the reference: %d of %d (largest gap %.1f points).",
                           within, compared, 100.0 * worst);
    out << "\n";
  }

  if (plan.network.given && !cells.empty()) {
    out << "\nlinks: utilization % (share of learner time in steps) / on time % (if learners waited for a broadcast\n"
           "later than tau steps after its push, as Streaming DiLoCo's workers do; dp: the same)\n";
    for (const auto& c : cells) {
      out << printf_string("%-30s%7.1f /%6.1f", (row_label(c.cell) + " at " + chips_label(c.cell.chips)).c_str(),
                           100.0 * c.utilization, 100.0 * c.on_time);
      if (c.lost_to_partition > 0) out << printf_string("   %llu messages lost to a partition", (unsigned long long)c.lost_to_partition);
      out << "\n";
    }
  }

  if (!report.rule_of_thumb.empty()) {
    out << "\nrule of thumb: M learners at N chips vs elastic_dp at N/M chips (goodput %)\n";
    out << printf_string("%-34s%10s%14s%10s\n", "", "decoupled", "elastic N/M", "gap");
    size_t k = 0;
    for (const auto& c : cells) {
      if (c.cell.mode != Mode::kDecoupled || c.cell.learners < 2 || k >= report.rule_of_thumb.size()) continue;
      const CellResult& e = report.rule_of_thumb[k++];
      const std::string label = row_label(c.cell) + " at " + chips_label(c.cell.chips);
      const double gap = 100.0 * (c.goodput - e.goodput);
      out << printf_string("%-34s%10.1f%14.1f%+10.1f%s\n", label.c_str(), 100.0 * c.goodput, 100.0 * e.goodput, gap,
                           std::abs(gap) > 3.0 ? "  <- fails" : "");
    }
  }

  if (plan.planning && !report.planning.empty()) {
    const PlanningView& v = *plan.planning;
    out << "\nplanning: " << chips_label(v.chips) << " chips, goodput % / uptime % against learners M (columns) and quorum K\n";
    out << printf_string("%-8s", "");
    for (int m : v.learners) out << printf_string("%13s", ("M = " + std::to_string(m)).c_str());
    out << "\n";
    for (int k : v.quorums) {
      out << printf_string("%-8s", ("K = " + std::to_string(k)).c_str());
      for (int m : v.learners) {
        const auto it = std::find_if(report.planning.begin(), report.planning.end(), [&](const CellResult& c) {
          return c.cell.learners == m && c.cell.quorum == k;
        });
        if (it == report.planning.end()) out << printf_string("%13s", "-");
        else out << printf_string("%7.1f /%4.0f", 100.0 * it->goodput, 100.0 * it->uptime);
      }
      out << "\n";
    }
    for (int k : v.quorums) {
      const auto it = std::find_if(report.planning.begin(), report.planning.end(), [&](const CellResult& c) {
        return c.cell.quorum == k && c.goodput >= v.target;
      });
      out << printf_string("K = %d: ", k)
          << (it == report.planning.end()
                  ? printf_string("no M up to %d reaches %.0f%% goodput\n", v.learners.back(), 100.0 * v.target)
                  : printf_string("M = %d is the fewest learners with %.0f%% goodput (%.1f%%)\n", it->cell.learners,
                                  100.0 * v.target, 100.0 * it->goodput));
    }
  }
  if (plan.scavenging && !report.scavenging.empty()) {
    out << "\n" << describe_scavenging(plan);
    out << "goodput = merged / allocated learner time. Learners allocated, merged and trained (lost steps too),\n"
           "as learner-hours per hour. Speed-up: merged learner time, and tokens trained, against the core alone.\n"
           "Per hour: scavenged learners that joined, left in order, vanished (failures), claims refused; rounds.\n";
    out << printf_string("%-10s%14s%11s%9s%9s%15s%8s%8s%7s%10s%10s%9s\n", "scavenged", "goodput %", "allocated",
                         "merged", "trained", "speed-up", "tokens", "joins", "left", "vanished", "refused", "rounds");
    for (const auto& c : report.scavenging) {
      const double h = c.measured_hours > 0 ? c.measured_hours : 1.0;
      const std::string goodput = printf_string("%.1f +-%.1f", 100.0 * c.goodput, 100.0 * c.goodput_halfwidth);
      const std::string speedup = printf_string("%.2fx +-%.2f", c.speedup, c.speedup_halfwidth);
      out << printf_string("%-10d%14s%11.2f%9.2f%9.2f%15s%7.2fx%8.2f%7.2f%10.2f%10.2f%9.0f\n", c.cell.scavenged,
                           goodput.c_str(), c.allocated_learners, c.merged_learners, c.trained_learners,
                           speedup.c_str(), c.tokens_speedup, double(c.joins) / h, double(c.departures) / h,
                           double(c.vanished) / h, double(c.claims_refused) / h,
                           c.simulated_hours > 0 ? double(c.rounds) / c.simulated_hours : 0.0);
    }
    uint64_t cut = 0, released = 0;
    double join_max = 0.0;
    for (const auto& c : report.scavenging) {
      cut += c.cut_short;
      released += c.released;
      join_max = std::max(join_max, c.join_seconds_max);
    }
    out << printf_string("Departures whose notice ran out before Done: %llu; slots released after a hold: %llu; "
                         "longest join (machine up to welcome): %.1f s.\n",
                         static_cast<unsigned long long>(cut), static_cast<unsigned long long>(released), join_max);
  }
  if (plan.utilization && !report.utilization.empty()) out << "\n" << utilization_table(plan, report);
  if (const uint64_t events = report.events(); events > 0)
    out << printf_string("\n%llu events simulated in %.1f s (%.2f million events/s)\n",
                         static_cast<unsigned long long>(events), report.wall_seconds,
                         report.wall_seconds > 0 ? double(events) / report.wall_seconds / 1e6 : 0.0);
  else
    out << printf_string("\nsimulated in %.1f s\n", report.wall_seconds);
  return out.str();
}

std::string simulation_json(const SimulationPlan& plan, const SimulationReport& report) {
  JsonWriter w;
  w.open(nullptr, '{');
  w.field("plan", plan.name);
  w.field("seed", plan.seed);
  w.field("precision", plan.precision);
  w.open("failures", '{');
  w.field("mtbi_chip_years", plan.failures.mtbi_chip_years);
  w.field("slice_chips", plan.failures.slice_chips);
  w.field("recovery", plan.failures.recovery.describe());
  w.field("recovery_mean_seconds", plan.failures.recovery.mean());
  w.field("restart_seconds", plan.failures.restart_seconds);
  w.field("downscale_seconds", plan.failures.downscale_seconds);
  w.field("upscale_seconds", plan.failures.upscale_seconds);
  w.field("while_down", plan.failures.while_down);
  w.close('}');
  // A plan's rows are what it is about: its grid's cells, or else its utilization search's.
  w.open("rows", '[');
  if (plan.cells.empty() && plan.utilization)
    for (const auto& r : report.utilization) write_utilization_row(w, r);
  else
    for (const auto& c : report.cells) write_cell(w, c);
  w.close(']');
  w.open("rule_of_thumb", '[');
  for (const auto& c : report.rule_of_thumb) write_cell(w, c);
  w.close(']');
  w.open("planning", '[');
  for (const auto& c : report.planning) write_cell(w, c);
  w.close(']');
  if (const auto& s = plan.scavenging) {
    w.open("scavenging", '{');
    w.field("core", s->core);
    w.field("quorum", s->quorum);
    w.field("learner_chips", s->learner_chips);
    if (s->trace.empty()) {
      w.field("availability", s->availability);
      w.field("mean_up_seconds", s->mean_up_seconds);
    } else {
      w.field("trace", s->trace_path);
    }
    w.field("notice_seconds", s->notice_seconds);
    w.open("rows", '[');
    for (const auto& c : report.scavenging) write_scavenging_cell(w, nullptr, c);
    w.close(']');
    if (report.scavenging_core) write_scavenging_cell(w, "core_alone", *report.scavenging_core);
    w.close('}');
  }
  if (const auto& u = plan.utilization) {
    w.open("utilization", '{');
    w.open("grid_gbps", '[');
    for (double b : u->grid) w.item(b / 1e9);
    w.close(']');
    w.open("rows", '[');
    for (const auto& r : report.utilization) write_utilization_row(w, r);
    w.close(']');
    w.open("at", '[');
    for (const auto& a : report.utilization_at) {
      w.open(nullptr, '{');
      w.field("model", a.model);
      w.field("method", a.method);
      w.field("gbps", a.bits_per_second / 1e9);
      w.field("utilization", a.utilization);
      w.close('}');
    }
    w.close(']');
    w.close('}');
  }
  w.field("events", report.events());
  w.field("wall_seconds", report.wall_seconds);
  w.field("events_per_second", report.wall_seconds > 0 ? double(report.events()) / report.wall_seconds : 0.0);
  w.close('}');
  return w.text() + "\n";
}

std::string planning_svg(const SimulationPlan& plan, const SimulationReport& report) {
  if (!plan.planning || report.planning.empty()) return {};
  const PlanningView& v = *plan.planning;
  constexpr double kW = 720, kH = 440, kLeft = 70, kRight = 170, kTop = 50, kBottom = 60;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  const size_t n = v.learners.size();
  // M evenly spaced (the values are usually powers of two); goodput 0..100 %.
  const auto x_of = [&](size_t i) { return kLeft + (n > 1 ? pw * double(i) / double(n - 1) : pw / 2); };
  const auto y_of = [&](double fraction) { return kTop + ph * (1.0 - std::clamp(fraction, 0.0, 1.0)); };
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

  std::ostringstream svg;
  svg << printf_string("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                       "font-family=\"sans-serif\" font-size=\"12\">\n", kW, kH);
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << printf_string("<text x=\"%.0f\" y=\"22\" font-size=\"14\">Decoupled DiLoCo at %s chips, MTBI %g chip-years: "
                       "goodput (solid) and uptime (dashed)</text>\n",
                       kLeft, chips_label(v.chips).c_str(), plan.failures.mtbi_chip_years);
  for (int pct = 0; pct <= 100; pct += 20) {
    const double y = y_of(pct / 100.0);
    svg << printf_string("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", kLeft, y, kLeft + pw, y);
    svg << printf_string("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%d%%</text>\n", kLeft - 6, y + 4, pct);
  }
  for (size_t i = 0; i < n; ++i)
    svg << printf_string("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n", x_of(i), kTop + ph + 18,
                         v.learners[i]);
  svg << printf_string("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">learners M</text>\n", kLeft + pw / 2,
                       kTop + ph + 40);
  const double ty = y_of(v.target);
  svg << printf_string("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" stroke-dasharray=\"2,3\"/>\n",
                       kLeft, ty, kLeft + pw, ty);
  svg << printf_string("<text x=\"%.1f\" y=\"%.1f\" fill=\"#888\">target %.0f%%</text>\n", kLeft + pw + 6, ty + 4,
                       100.0 * v.target);
  for (size_t q = 0; q < v.quorums.size(); ++q) {
    const int k = v.quorums[q];
    const char* color = kColors[q % std::size(kColors)];
    for (const bool uptime : {false, true}) {
      std::string points;
      for (size_t i = 0; i < n; ++i) {
        const auto it = std::find_if(report.planning.begin(), report.planning.end(), [&](const CellResult& c) {
          return c.cell.learners == v.learners[i] && c.cell.quorum == k;
        });
        if (it == report.planning.end()) continue;
        const double y = y_of(uptime ? it->uptime : it->goodput);
        points += printf_string("%.1f,%.1f ", x_of(i), y);
        if (!uptime) svg << printf_string("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", x_of(i), y, color);
      }
      svg << printf_string("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"%s\"/>\n", color,
                           uptime ? " stroke-dasharray=\"6,4\"" : "", points.c_str());
    }
    const double ly = kTop + 16.0 * double(q);
    svg << printf_string("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n",
                         kLeft + pw + 20, ly + 30, kLeft + pw + 44, ly + 30, color);
    svg << printf_string("<text x=\"%.1f\" y=\"%.1f\">quorum K = %d</text>\n", kLeft + pw + 50, ly + 34, k);
  }
  svg << printf_string("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n",
                       kLeft, kTop, pw, ph);
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace atl
