#include "atoll/chaos.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "atoll/chaos_verdict.h"
#include "atoll/log.h"
#include "atoll/printf_string.h"
#include "injector.h"

namespace atl {
namespace {

}  // namespace

Result<ChaosResult> run_with_faults(const Topology& topology, const FaultPlan& given, const ChaosOptions& options) {
  // Faults made in code have no file:line: name them by index, so that the
  // tape's injections can be matched to them.
  FaultPlan plan = given;
  for (size_t i = 0; i < plan.faults.size(); ++i)
    if (plan.faults[i].where.empty()) plan.faults[i].where = "fault[" + std::to_string(i) + "]";
  Topology t = topology;
  RunOptions run_options = options.run;
  if (plan.seconds > 0) {
    run_options.seconds = plan.seconds;
    t.tokens = 0;  // the time limit ends the run, whatever the throughput of the mode
    t.seconds = plan.seconds;
  }
  const auto started = std::chrono::steady_clock::now();
  ChaosResult result;
  result.plan = plan.name;
  result.mode = t.mode;
  if (!options.tape_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.tape_dir, ec);
    result.tape_path = options.tape_dir + "/" + std::filesystem::path(plan.path).stem().string() + "-" +
                       mode_name(t.mode) + ".jsonl";
  }
  auto log = RunLog::open(result.tape_path, started);
  if (!log.ok()) return log.status();
  auto holds = std::make_shared<RestartHolds>();
  RunHooks hooks;
  hooks.message_faults = std::make_shared<MessageFaults>(Rng::derive(plan.seed, 0x6e7));
  hooks.log = *log;
  hooks.restart_hold = [holds](const Child& child) { return holds->remaining_seconds(child.name()); };
  InjectorArgs injector{plan, hooks.message_faults, holds};
  hooks.children.push_back({"chaos injector", [injector](caf::actor_system& sys, const RunContext& context) {
                              return spawn_injector(sys, context, injector);
                            }});
  auto run = Run::start(t, run_options, &hooks);
  if (!run.ok()) return run.status();
  if (options.running) options.running(run->get());
  auto report = (*run)->wait();
  if (options.running) options.running(nullptr);
  if (!report.ok()) return report.status();
  result.report = std::move(*report);
  if (options.stopping && options.stopping())
    result.notes.push_back("interrupted: the run was stopped early, its figures cover only the time it ran");
  ChaosVerdict verdict = judge(plan, result.report, (*run)->parameters(), (*log)->events());
  result.faults_injected = verdict.faults_injected;
  result.recoveries = verdict.recoveries;
  result.alive_fraction = verdict.alive_fraction;
  result.violations = std::move(verdict.violations);
  result.notes.insert(result.notes.end(), verdict.notes.begin(), verdict.notes.end());
  return result;
}

Result<std::vector<ChaosResult>> run_plan(const FaultPlan& plan, const ChaosOptions& options) {
  std::vector<ChaosResult> out;
  for (Mode mode : plan.modes) {
    Topology t = plan.topology;
    t.mode = mode;
    auto r = run_with_faults(t, plan, options);
    if (!r.ok()) return r.status().with_context(plan.path + " (" + mode_name(mode) + ")");
    if (options.stopping && options.stopping()) {  // cut short (noted): no baseline, no further mode
      out.push_back(std::move(*r));
      break;
    }
    if (plan.invariants.max_eval_loss_increase) {
      FaultPlan quiet = plan;  // the same run, no faults
      quiet.faults.clear();
      quiet.random.reset();
      ChaosOptions no_tape = options;
      no_tape.tape_dir.clear();
      auto base = run_with_faults(t, quiet, no_tape);
      if (!base.ok()) return base.status().with_context(plan.path + " (baseline, " + mode_name(mode) + ")");
      if (options.stopping && options.stopping()) {
        r->notes.push_back("interrupted during the run without faults: the held-out loss bound was not checked");
        out.push_back(std::move(*r));
        break;
      }
      r->baseline_eval_loss = base->report.eval.loss;
      const double increase = r->report.eval.loss - base->report.eval.loss;
      if (!(increase <= *plan.invariants.max_eval_loss_increase))
        r->violations.push_back("max_eval_loss_increase: held-out loss " + printf_string("%.4f", r->report.eval.loss) +
                                " is " + printf_string("%.4f", increase) + " above the run without faults (" +
                                printf_string("%.4f", base->report.eval.loss) + "), bound " +
                                printf_string("%.4f", *plan.invariants.max_eval_loss_increase));
    }
    out.push_back(std::move(*r));
  }
  return out;
}

std::string chaos_table(const std::vector<ChaosResult>& results, bool header) {
  std::ostringstream o;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-28s %-11s %8s %6s %7s %10s %9s %9s %8s %9s  %s\n", "plan", "mode", "goodput",
                "alive", "uptime", "eval loss", "(no-fault)", "bits/byte", "injected", "recovered", "verdict");
  if (header) o << buf;
  for (const auto& r : results) {
    const std::string base = r.baseline_eval_loss >= 0 ? printf_string("%.4f", r.baseline_eval_loss) : "-";
    const std::string bpb = r.report.eval.bits_per_byte > 0 ? printf_string("%.4f", r.report.eval.bits_per_byte) : "-";
    std::snprintf(buf, sizeof buf, "%-28.28s %-11s %8.3f %6.3f %7.3f %10.4f %9s %9s %8llu %9llu  %s\n", r.plan.c_str(),
                  mode_name(r.mode), r.report.goodput, r.alive_fraction, r.report.uptime, r.report.eval.loss, base.c_str(),
                  bpb.c_str(),
                  static_cast<unsigned long long>(r.faults_injected), static_cast<unsigned long long>(r.recoveries),
                  r.ok() ? "ok" : "FAILED");
    o << buf;
    for (const auto& v : r.violations) o << "    broken: " << v << "\n";
    for (const auto& n : r.notes) o << "    note: " << n << "\n";
  }
  return o.str();
}

std::string chaos_json(const std::vector<ChaosResult>& results) {
  std::string out = "[\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const auto strings = [](const std::vector<std::string>& texts) {
      std::string list = "[";
      for (size_t k = 0; k < texts.size(); ++k) {
        std::string v;
        for (char c : texts[k]) v += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
        list += (k ? ",\"" : "\"") + v + "\"";
      }
      return list + "]";
    };
    const std::string violations = strings(r.violations), notes = strings(r.notes);
    std::string report = r.report.to_json();
    while (!report.empty() && report.back() == '\n') report.pop_back();
    out += "{\"plan\":\"" + r.plan + "\",\"mode\":\"" + mode_name(r.mode) + "\",\"ok\":" + (r.ok() ? "true" : "false") +
           ",\"alive_fraction\":" + printf_string("%.6g", r.alive_fraction) +
           ",\"faults_injected\":" + std::to_string(r.faults_injected) + ",\"recoveries\":" +
           std::to_string(r.recoveries) + ",\"baseline_eval_loss\":" + printf_string("%.6g", r.baseline_eval_loss) +
           ",\"tape\":\"" + r.tape_path + "\",\"violations\":" + violations + ",\"notes\":" + notes +
           ",\"report\":" + report + "}" +
           (i + 1 < results.size() ? ",\n" : "\n");
  }
  return out + "]\n";
}

}  // namespace atl
