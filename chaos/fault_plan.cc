#include "atoll/fault_plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <variant>

#include "atoll/file.h"
#include "atoll/run_event.h"
#include "atoll/topology_file.h"
#include "atoll/toml_fields.h"

namespace atl {
namespace {

using namespace toml_fields;

// 4, 0.25, 1e+06: as short as the number is.
std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// What a fault's numbers may be, in a plan file and in a replayed tape alike.
struct FieldRange {
  const char* key;
  double lo, hi;
  bool holds(double v) const { return v >= lo && v <= hi; }  // false for NaN
  std::string refusal(double v) const {
    return number_text(v) + " is outside [" + number_text(lo) + ", " + number_text(hi) + "]";
  }
};
constexpr FieldRange kRecoverAfter{"recover_after", 0.0, 3600.0}, kDuration{"duration", 0.0, 86400.0},
    kFactor{"factor", 1.0, 1000.0}, kFaultSeconds{"seconds", 0.0, 3600.0}, kProbability{"probability", 0.0, 1.0},
    kSpeed{"speed", 0.0, 100.0}, kGrace{"grace", 0.0, 3600.0};

int learner_of(const toml::node& n, const std::string& key, int learners) {
  if (n.is_string()) {
    if (get_string(n, key) == "*") return -1;
    fail(n, key, "expected a learner id or \"*\"");
  }
  const int64_t id = get_int(n, key, 0, learners - 1);
  return static_cast<int>(id);
}

// `learners`: the learner slots of the topology (open ones included).
Fault read_fault(const toml::table& t, const std::string& prefix, int learners, bool open_slots) {
  no_unknown_keys(t, prefix, {"kind", "at", "at_step", "learner", "recover_after", "duration", "factor", "seconds",
                              "probability", "speed", "batch_size", "count", "grace", "shard"});
  Fault f;
  f.where = where(t).substr(0, where(t).size() - 2);
  const toml::node* kind = t.get("kind");
  if (!kind) fail(t, prefix + "kind", "missing (what kind of fault?)");
  f.kind = get_enum(*kind, prefix + "kind", parse_fault_kind);
  const toml::node* at = t.get("at");
  const toml::node* at_step = t.get("at_step");
  if (!at == !at_step) fail(t, prefix + "at", "give exactly one of at (seconds) and at_step (a learner's step)");
  if (at) {
    f.at = get_number(*at, prefix + "at");
    if (f.at < 0) fail(*at, prefix + "at", "must be >= 0");
  }
  if (at_step) f.at_step = static_cast<uint64_t>(get_int(*at_step, prefix + "at_step", 0, INT64_MAX));
  const toml::node* learner = t.get("learner");
  if (f.kind == FaultKind::kJoin) {
    if (learner) fail(*learner, prefix + "learner", "a join names no learner: the syncer gives the newcomer a free slot");
    if (!open_slots)
      fail(t, prefix + "kind", "join needs open slots: set membership.max_learners above the topology's [[learners]]");
  } else if (targets_learners(f.kind)) {
    if (!learner) fail(t, prefix + "learner", std::string("missing: which learner does the ") +
                                                   fault_kind_name(f.kind) + " hit? (an id or \"*\")");
    f.learner = learner_of(*learner, prefix + "learner", learners);
  } else if (learner) {
    fail(*learner, prefix + "learner", std::string(fault_kind_name(f.kind)) + " does not target a learner");
  }
  if (at_step && f.learner < 0) fail(*at_step, prefix + "at_step", "needs a single learner whose steps to count");
  const auto number = [&](const FieldRange& range, double& out) {
    if (const toml::node* n = t.get(range.key)) {
      out = get_number(*n, prefix + range.key);
      if (!range.holds(out)) fail(*n, prefix + range.key, range.refusal(out));
    }
  };
  number(kRecoverAfter, f.recover_after);
  number(kDuration, f.duration);
  number(kFactor, f.factor);
  number(kFaultSeconds, f.seconds);
  number(kProbability, f.probability);
  const auto only = [&](const char* key, FaultKind owner) {
    if (const toml::node* n = t.get(key); n && f.kind != owner)
      fail(*n, prefix + key, std::string("only a ") + fault_kind_name(owner) + " has " + key);
  };
  only("speed", FaultKind::kJoin);
  only("batch_size", FaultKind::kJoin);
  only("count", FaultKind::kJoin);
  only("grace", FaultKind::kPreempt);
  if (const toml::node* n = t.get("shard")) {
    if (f.kind != FaultKind::kKillSyncer && f.kind != FaultKind::kKillCheckpointer)
      fail(*n, prefix + "shard", "only a kill_syncer or a kill_checkpointer has shard");
    f.shard = static_cast<uint32_t>(get_int(*n, prefix + "shard", 0, 1 << 16));  // checked against syncer.shards at the run
  }
  number(kSpeed, f.speed);
  if (const toml::node* n = t.get("batch_size")) f.batch_size = static_cast<int>(get_int(*n, prefix + "batch_size", 1, 1 << 16));
  if (const toml::node* n = t.get("count")) f.count = static_cast<int>(get_int(*n, prefix + "count", 1, kMaxLearnerSlots));
  if (f.kind == FaultKind::kJoin && t.get("speed") && f.speed < 0.01) fail(*t.get("speed"), prefix + "speed", "must be >= 0.01");
  if (f.kind == FaultKind::kPreempt) {
    f.duration = 2.0;  // the grace, unless given
    number(kGrace, f.duration);
  }
  const bool timed = f.kind == FaultKind::kStall || f.kind == FaultKind::kSlow || is_message_fault(f.kind);
  if (timed && f.duration <= 0) fail(t, prefix + "duration", std::string("missing: how long does the ") +
                                                                 fault_kind_name(f.kind) + " last?");
  if ((f.kind == FaultKind::kDelay || f.kind == FaultKind::kReorder) && f.seconds <= 0)
    fail(t, prefix + "seconds", std::string("missing: the ") + fault_kind_name(f.kind) + "'s " +
                                    (f.kind == FaultKind::kDelay ? "delay" : "window") + " in seconds");
  if (f.kind == FaultKind::kSlow && f.factor <= 1) fail(t, prefix + "factor", "missing: how many times slower (> 1)?");
  return f;
}

RandomFaults read_random(const toml::table& t, bool open_slots) {
  no_unknown_keys(t, "random.",
                  {"kind", "mtbf_seconds", "recovery", "recovery_seconds", "recovery_min", "recovery_max", "grace"});
  RandomFaults r;
  if (const toml::node* k = t.get("kind")) {
    r.kind = get_enum(*k, "random.kind", parse_fault_kind);
    if (r.kind != FaultKind::kKill && r.kind != FaultKind::kCrash && r.kind != FaultKind::kPreempt)
      fail(*k, "random.kind", "random faults are kill, crash or preempt");
    if (r.kind == FaultKind::kPreempt && !open_slots)
      fail(*k, "random.kind", "preempt hits the learners of open slots: set membership.max_learners above the "
                              "topology's [[learners]]");
  }
  if (const toml::node* g = t.get("grace")) {
    if (r.kind != FaultKind::kPreempt) fail(*g, "random.grace", "only random preemptions have a grace");
    r.grace = get_number(*g, "random.grace");
    if (!kGrace.holds(r.grace)) fail(*g, "random.grace", kGrace.refusal(r.grace));
  }
  const toml::node* mtbf = t.get("mtbf_seconds");
  if (!mtbf) fail(t, "random.mtbf_seconds", "missing: the mean time between failures of a learner");
  r.mtbf_seconds = get_number(*mtbf, "random.mtbf_seconds");
  if (r.mtbf_seconds <= 0) fail(*mtbf, "random.mtbf_seconds", "must be > 0");
  if (const toml::node* rec = t.get("recovery")) {
    const std::string how = get_string(*rec, "random.recovery");
    if (how == "fixed") r.recovery = RandomFaults::Recovery::kFixed;
    else if (how == "uniform") r.recovery = RandomFaults::Recovery::kUniform;
    else if (how == "exponential") r.recovery = RandomFaults::Recovery::kExponential;
    else fail(*rec, "random.recovery", "unknown distribution '" + how + "' (expected fixed, uniform or exponential)");
  }
  for (auto [name, out] : {std::pair{"recovery_seconds", &r.recovery_seconds}, std::pair{"recovery_min", &r.recovery_min},
                           std::pair{"recovery_max", &r.recovery_max}})
    if (const toml::node* n = t.get(name)) {
      *out = get_number(*n, std::string("random.") + name);
      if (*out < 0) fail(*n, std::string("random.") + name, "must be >= 0");
    }
  if (r.recovery_min > r.recovery_max) fail(t, "random.recovery_min", "is above random.recovery_max");
  return r;
}

Invariants read_invariants(const toml::table& t) {
  no_unknown_keys(t, "invariants.", {"versions_never_decrease", "finite", "no_adopted_version_lost",
                                     "all_faults_injected", "reintegrate_within_seconds", "min_goodput",
                                     "max_eval_loss_increase"});
  Invariants inv;
  if (const toml::node* n = t.get("versions_never_decrease")) inv.versions_never_decrease = get_bool(*n, "invariants.versions_never_decrease");
  if (const toml::node* n = t.get("finite")) inv.finite = get_bool(*n, "invariants.finite");
  if (const toml::node* n = t.get("no_adopted_version_lost")) inv.no_adopted_version_lost = get_bool(*n, "invariants.no_adopted_version_lost");
  if (const toml::node* n = t.get("all_faults_injected")) inv.all_faults_injected = get_bool(*n, "invariants.all_faults_injected");
  // A bound that is negative, or a share outside [0, 1], is a typo that would silently disable or fail the check.
  const auto bounded = [&](const char* key, double lo, double hi) {
    const toml::node* n = t.get(key);
    const std::string name = std::string("invariants.") + key;
    const double v = get_number(*n, name);
    if (const FieldRange range{key, lo, hi}; !range.holds(v)) fail(*n, name, range.refusal(v));
    return v;
  };
  if (t.get("reintegrate_within_seconds"))
    inv.reintegrate_within_seconds = bounded("reintegrate_within_seconds", 0.0, 1e6);
  if (t.get("min_goodput")) inv.min_goodput = bounded("min_goodput", 0.0, 1.0);
  if (t.get("max_eval_loss_increase")) inv.max_eval_loss_increase = bounded("max_eval_loss_increase", 0.0, 1e6);
  return inv;
}

}  // namespace

Result<std::vector<Fault>> faults_from_tape(const std::string& path) {
  auto text = read_text(path);
  if (!text.ok()) return text.status().with_context("event tape");
  return parse_fault_tape(*text, path);
}

Result<std::vector<Fault>> parse_fault_tape(std::string_view text, const std::string& path) {
  std::istringstream in{std::string(text)};
  std::vector<Fault> faults;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(n);
    auto decoded = decode_event_line(line);
    if (!decoded.ok()) return decoded.status().with_context(where);
    const auto* x = *decoded ? std::get_if<event::Injected>(&(*decoded)->event) : nullptr;
    if (!x || !x->hit) continue;
    // The same ranges a plan file allows (read_fault): a tape is input too.
    std::string bad;
    const auto field = [&](const FieldRange& range, double v) {
      if (!range.holds(v) && bad.empty()) bad = std::string(range.key) + " " + range.refusal(v);
      return v;
    };
    Fault f;
    f.kind = x->kind;
    f.at = field({"t", 0.0, 86400.0 * 365}, (*decoded)->t);
    f.learner = static_cast<int>(field({"learner", -1, 1 << 20}, static_cast<double>(x->learner)));
    f.recover_after = field(kRecoverAfter, x->recover_after);
    f.duration = field(kDuration, x->duration);
    f.factor = field(kFactor, x->factor);
    f.seconds = field(kFaultSeconds, x->seconds);
    f.probability = field(kProbability, x->probability);
    f.speed = field(kSpeed, x->speed);
    f.batch_size = static_cast<int>(field({"batch_size", 0, 1 << 16}, x->batch_size));
    f.shard = static_cast<uint32_t>(field({"shard", 0, 1 << 16}, x->shard));
    if (f.kind == FaultKind::kJoin) f.learner = -1;  // the syncer gives the slot again
    if (!bad.empty()) return Status::corruption(where + ": " + bad);
    f.where = where;
    faults.push_back(f);
  }
  return faults;
}

Result<FaultPlan> load_fault_plan(const std::string& path) {
  auto text = read_text(path, kMaxConfigFileBytes);
  if (!text.ok()) return text.status();
  return parse_fault_plan(*text, path);
}

Result<FaultPlan> parse_fault_plan(std::string_view text, const std::string& path) {
  namespace fs = std::filesystem;
  auto parsed = parse_toml(text, path);
  if (!parsed.ok()) return parsed.status();
  toml::table& root = *parsed;
  FaultPlan plan;
  plan.path = path;
  plan.name = fs::path(path).stem().string();
  try {
    no_unknown_keys(root, "",
                    {"name", "topology", "set", "seconds", "seed", "modes", "fault", "random", "invariants", "replay"});
    if (const toml::node* n = root.get("name")) plan.name = get_string(*n, "name");
    std::string topology_file;
    if (const toml::node* n = root.get("topology")) {
      topology_file = get_string(*n, "topology");
      if (fs::path(topology_file).is_relative()) topology_file = (fs::path(path).parent_path() / topology_file).string();
    }
    std::vector<std::string> sets;
    if (const toml::node* n = root.get("set")) {
      const auto* arr = n->as_array();
      if (!arr) fail(*n, "set", "expected an array of \"key=value\" strings");
      for (size_t i = 0; i < arr->size(); ++i) sets.push_back(get_string((*arr)[i], "set[" + std::to_string(i) + "]"));
    }
    // Modes side by side run on dedicated hardware (atoll/step_pacer.h):
    // otherwise a mode whose learners wait or die hands their cores to the
    // others, and the comparison measures the machine. `set` may say otherwise.
    const toml::node* modes = root.get("modes");
    const bool side_by_side = modes && modes->as_array() && modes->as_array()->size() > 1;
    const bool hardware_set =
        std::any_of(sets.begin(), sets.end(), [](const std::string& s) { return s.rfind("hardware=", 0) == 0; });
    if (side_by_side && !hardware_set) sets.insert(sets.begin(), "hardware=dedicated");
    auto topology = load_topology(topology_file, sets);
    if (!topology.ok()) return topology.status().with_context(path + ": topology");
    plan.topology = *topology;
    const int learners = static_cast<int>(learner_slots(plan.topology));
    const bool open_slots = learner_slots(plan.topology) > plan.topology.learners.size();
    if (const toml::node* n = root.get("seconds")) {
      plan.seconds = get_number(*n, "seconds");
      if (plan.seconds < 0) fail(*n, "seconds", "must be >= 0");
    }
    if (const toml::node* n = root.get("seed")) plan.seed = static_cast<uint64_t>(get_int(*n, "seed", 0, INT64_MAX));
    if (const toml::node* n = root.get("modes")) {
      const auto* arr = n->as_array();
      if (!arr || arr->empty()) fail(*n, "modes", "expected a non-empty array of modes");
      for (size_t i = 0; i < arr->size(); ++i) plan.modes.push_back(get_enum((*arr)[i], "modes[" + std::to_string(i) + "]", parse_mode));
    } else {
      plan.modes.push_back(plan.topology.mode);
    }
    if (const toml::node* n = root.get("fault")) {
      const auto* arr = n->as_array();
      if (!arr) fail(*n, "fault", "expected an array of tables ([[fault]])");
      for (size_t i = 0; i < arr->size(); ++i) {
        const std::string prefix = "fault[" + std::to_string(i) + "].";
        const auto* t = (*arr)[i].as_table();
        if (!t) fail((*arr)[i], prefix.substr(0, prefix.size() - 1), "expected a table");
        plan.faults.push_back(read_fault(*t, prefix, learners, open_slots));
      }
    }
    if (const toml::node* n = root.get("replay")) {
      std::string tape = get_string(*n, "replay");
      if (fs::path(tape).is_relative()) tape = (fs::path(path).parent_path() / tape).string();
      auto replayed = faults_from_tape(tape);
      if (!replayed.ok()) fail(*n, "replay", std::string(replayed.status().message()));
      for (const auto& f : *replayed)
        if (f.kind == FaultKind::kJoin && !open_slots)
          fail(*n, "replay", f.where + ": a join, and the topology has no open slots (membership.max_learners)");
        else if (f.learner >= learners)
          fail(*n, "replay", f.where + ": learner " + std::to_string(f.learner) + " is not in the topology");
      plan.faults.insert(plan.faults.end(), replayed->begin(), replayed->end());
    }
    if (const toml::node* n = root.get("random")) {
      const auto* t = n->as_table();
      if (!t) fail(*n, "random", "expected a table ([random])");
      plan.random = read_random(*t, open_slots);
    }
    if (const toml::node* n = root.get("invariants")) {
      const auto* t = n->as_table();
      if (!t) fail(*n, "invariants", "expected a table ([invariants])");
      plan.invariants = read_invariants(*t);
    }
    if (plan.seconds <= 0 && plan.topology.tokens == 0 && plan.topology.seconds <= 0)
      fail(root, "seconds", "the run would never end: set seconds or the topology's tokens");
    if (plan.seconds > 0)
      for (const auto& f : plan.faults)
        if (f.at >= 0 && f.at >= plan.seconds)
          throw KeyError{f.where + ": " + fault_kind_name(f.kind) + " at " + number_text(f.at) +
                         " s would never be injected: the run ends at seconds = " + number_text(plan.seconds)};
  } catch (const KeyError& e) {
    return Status::invalid_argument(e.text);
  }
  return plan;
}

}  // namespace atl
