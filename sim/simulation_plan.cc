// Simulation plans (TOML; examples/simulate/) and availability traces (CSV):
// errors name the file, line and key.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "atoll/file.h"
#include "atoll/simulation.h"
#include "atoll/topology_file.h"
#include "atoll/toml_fields.h"

namespace atl {
namespace {

using namespace toml_fields;

const toml::table& table_of(const toml::node& n, const std::string& key) {
  const auto* t = n.as_table();
  if (!t) fail(n, key, std::string("expected a table, got ") + type_name(n));
  return *t;
}

const toml::array& array_of(const toml::node& n, const std::string& key) {
  const auto* a = n.as_array();
  if (!a || a->empty()) fail(n, key, "expected a non-empty array");
  return *a;
}

// A number in [lo, hi] (NaN never is).
double number_in(const toml::node& n, const std::string& key, double lo, double hi) {
  const double v = get_number(n, key);
  if (!(v >= lo && v <= hi))
    fail(n, key, std::to_string(v) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

void read_number(const toml::table& t, const char* name, const std::string& prefix, double lo, double hi, double& out) {
  if (const toml::node* n = t.get(name)) out = number_in(*n, prefix + name, lo, hi);
}

DelayModel read_delay(const toml::table& t, const std::string& prefix) {
  no_unknown_keys(t, prefix, {"distribution", "seconds", "scale_seconds", "shape", "exponent"});
  DelayModel d;
  if (const toml::node* n = t.get("distribution")) {
    const std::string kind = get_string(*n, prefix + "distribution");
    if (kind == "fixed") d.kind = DelayModel::Kind::kFixed;
    else if (kind == "exponential") d.kind = DelayModel::Kind::kExponential;
    else if (kind == "exponentiated_weibull") d.kind = DelayModel::Kind::kExponentiatedWeibull;
    else fail(*n, prefix + "distribution", "unknown distribution '" + kind +
                                              "' (expected fixed, exponential or exponentiated_weibull)");
  }
  read_number(t, "seconds", prefix, 0.0, 1e7, d.seconds);
  read_number(t, "scale_seconds", prefix, 1e-3, 1e7, d.scale_seconds);
  read_number(t, "shape", prefix, 0.05, 20.0, d.shape);
  read_number(t, "exponent", prefix, 0.01, 100.0, d.exponent);
  return d;
}

FailureModel read_failures(const toml::table& t) {
  no_unknown_keys(t, "failures.", {"mtbi_chip_years", "slice_chips", "while_down", "restart_seconds",
                                   "downscale_seconds", "upscale_seconds", "recovery"});
  FailureModel f;
  read_number(t, "mtbi_chip_years", "failures.", 1e-6, 1e6, f.mtbi_chip_years);
  if (const toml::node* n = t.get("slice_chips")) f.slice_chips = get_int(*n, "failures.slice_chips", 1, int64_t{1} << 40);
  if (const toml::node* n = t.get("while_down")) f.while_down = get_bool(*n, "failures.while_down");
  read_number(t, "restart_seconds", "failures.", 0.0, 1e7, f.restart_seconds);
  read_number(t, "downscale_seconds", "failures.", 0.0, 1e7, f.downscale_seconds);
  read_number(t, "upscale_seconds", "failures.", 0.0, 1e7, f.upscale_seconds);
  if (const toml::node* n = t.get("recovery")) f.recovery = read_delay(table_of(*n, "failures.recovery"), "failures.recovery.");
  return f;
}

std::vector<int64_t> read_ints(const toml::node& n, const std::string& key, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  const auto& arr = array_of(n, key);
  for (size_t i = 0; i < arr.size(); ++i) out.push_back(get_int(arr[i], key + "[" + std::to_string(i) + "]", lo, hi));
  return out;
}

std::vector<int> read_int32s(const toml::node& n, const std::string& key, int lo, int hi) {
  std::vector<int> out;
  for (int64_t v : read_ints(n, key, lo, hi)) out.push_back(static_cast<int>(v));
  return out;
}

TrainingModel::Compute read_compute(const toml::table& t) {
  no_unknown_keys(t, "training.compute.", {"parameters", "tokens_per_step", "chips", "peak_flops", "mfu"});
  TrainingModel::Compute c;
  for (const char* key : {"parameters", "tokens_per_step", "peak_flops"})
    if (!t.get(key)) fail(t, std::string("training.compute.") + key, "missing (the step time is 6 N tokens / (chips peak mfu))");
  read_number(t, "parameters", "training.compute.", 1.0, 1e15, c.parameters);
  read_number(t, "tokens_per_step", "training.compute.", 1.0, 1e12, c.tokens_per_step);
  read_number(t, "chips", "training.compute.", 1.0, 1e9, c.chips);
  read_number(t, "peak_flops", "training.compute.", 1e6, 1e18, c.peak_flops);
  read_number(t, "mfu", "training.compute.", 1e-3, 1.0, c.mfu);
  return c;
}

SyncSchedule read_schedule(const toml::table& t, const std::string& prefix, SyncSchedule s) {
  no_unknown_keys(t, prefix, {"sync_every", "overlap", "bits", "volume", "latency_seconds"});
  if (const toml::node* n = t.get("sync_every")) s.sync_every = static_cast<int>(get_int(*n, prefix + "sync_every", 1, 1 << 20));
  if (const toml::node* n = t.get("overlap")) s.overlap = static_cast<int>(get_int(*n, prefix + "overlap", 0, 1 << 20));
  read_number(t, "bits", prefix, 0.01, 64.0, s.bits_per_parameter);
  read_number(t, "volume", prefix, 0.01, 100.0, s.volume_factor);
  read_number(t, "latency_seconds", prefix, 0.0, 1e3, s.latency_seconds);
  return s;
}

std::vector<std::pair<std::string, const toml::table*>> array_of_tables(const toml::table& t, const std::string& prefix,
                                                                        const char* name) {
  std::vector<std::pair<std::string, const toml::table*>> out;
  if (const toml::node* n = t.get(name)) {
    const auto* arr = n->as_array();
    if (!arr) fail(*n, prefix + name, "expected an array of tables ([[" + prefix + name + "]])");
    for (size_t i = 0; i < arr->size(); ++i) {
      const std::string key = prefix + name + "[" + std::to_string(i) + "]";
      out.emplace_back(key + ".", &table_of((*arr)[i], key));
    }
  }
  return out;
}

UtilizationView read_utilization(const toml::table& t) {
  no_unknown_keys(t, "utilization.", {"targets", "methods", "grid", "fragment_layers", "learners", "periods", "at_gbps", "dp",
                                      "diloco", "streaming", "model", "reference", "variants"});
  UtilizationView v;
  if (const toml::node* n = t.get("variants")) {
    for (const auto& [name, sets] : table_of(*n, "utilization.variants")) {
      const std::string key = "utilization.variants." + std::string(name.str());
      UtilizationView::Variant variant{std::string(name.str()), {}, {}};
      if (variant.name == "dp" || variant.name == "diloco" || variant.name == "streaming" || variant.name == "decoupled")
        fail(sets, key, "'" + variant.name + "' is a method of its own: name the variant otherwise");
      const auto& arr = array_of(sets, key);
      for (size_t i = 0; i < arr.size(); ++i) {
        std::string s = get_string(arr[i], key + "[" + std::to_string(i) + "]");
        if (!s.starts_with("outer."))
          fail(arr[i], key + "[" + std::to_string(i) + "]", "'" + s + "': a variant sets outer.* keys only");
        variant.sets.push_back(std::move(s));
      }
      v.variants.push_back(std::move(variant));
    }
  }
  const auto known_method = [&](const std::string& m) {
    return m == "dp" || m == "diloco" || m == "streaming" || m == "decoupled" ||
           std::any_of(v.variants.begin(), v.variants.end(), [&](const auto& x) { return x.name == m; });
  };
  if (const toml::node* n = t.get("targets")) {
    v.targets.clear();
    const auto& arr = array_of(*n, "utilization.targets");
    for (size_t i = 0; i < arr.size(); ++i)
      v.targets.push_back(number_in(arr[i], "utilization.targets[" + std::to_string(i) + "]", 0.001, 0.999));
  }
  if (const toml::node* n = t.get("methods")) {
    v.methods.clear();
    const auto& arr = array_of(*n, "utilization.methods");
    for (size_t i = 0; i < arr.size(); ++i) {
      const std::string key = "utilization.methods[" + std::to_string(i) + "]";
      std::string m = get_string(arr[i], key);
      if (!known_method(m))
        fail(arr[i], key, "unknown method '" + m + "' (expected dp, diloco, streaming, decoupled or a utilization.variants name)");
      v.methods.push_back(std::move(m));
    }
  }
  if (const toml::node* n = t.get("grid")) {
    const auto& arr = array_of(*n, "utilization.grid");
    if (arr.size() != 3) fail(*n, "utilization.grid", "expected [from_gbit, to_gbit, points]");
    const double from = number_in(arr[0], "utilization.grid[0]", 1e-6, 1e6);
    const double to = number_in(arr[1], "utilization.grid[1]", from, 1e6);
    v.grid = bandwidth_grid(from, to, static_cast<int>(get_int(arr[2], "utilization.grid[2]", 2, 10000)));
  }
  if (const toml::node* n = t.get("at_gbps")) {
    const auto& arr = array_of(*n, "utilization.at_gbps");
    for (size_t i = 0; i < arr.size(); ++i)
      v.at.push_back(1e9 * number_in(arr[i], "utilization.at_gbps[" + std::to_string(i) + "]", 1e-6, 1e6));
  }
  if (const toml::node* n = t.get("fragment_layers"))
    v.fragment_layers = static_cast<int>(get_int(*n, "utilization.fragment_layers", 1, 1 << 20));
  if (const toml::node* n = t.get("learners")) v.learners = static_cast<int>(get_int(*n, "utilization.learners", 1, 1024));
  read_number(t, "periods", "utilization.", 3.0, 1e4, v.periods);
  if (const toml::node* n = t.get("dp")) v.dp = read_schedule(table_of(*n, "utilization.dp"), "utilization.dp.", v.dp);
  if (const toml::node* n = t.get("diloco"))
    v.diloco = read_schedule(table_of(*n, "utilization.diloco"), "utilization.diloco.", v.diloco);
  if (const toml::node* n = t.get("streaming"))
    v.streaming = read_schedule(table_of(*n, "utilization.streaming"), "utilization.streaming.", v.streaming);
  for (const auto& [prefix, m] : array_of_tables(t, "utilization.", "model")) {
    no_unknown_keys(*m, prefix, {"name", "parameters", "layers", "step_seconds"});
    Workload w;
    for (const char* key : {"name", "parameters", "layers", "step_seconds"})
      if (!m->get(key)) fail(*m, prefix + key, "missing");
    w.name = get_string(*m->get("name"), prefix + "name");
    w.parameters = number_in(*m->get("parameters"), prefix + "parameters", 1.0, 1e15);
    w.layers = static_cast<int>(get_int(*m->get("layers"), prefix + "layers", 1, 1 << 20));
    w.step_seconds = number_in(*m->get("step_seconds"), prefix + "step_seconds", 1e-6, 1e6);
    if (w.layers % v.fragment_layers != 0)
      fail(*m->get("layers"), prefix + "layers", std::to_string(w.layers) + " layers do not make fragments of " +
                                                     std::to_string(v.fragment_layers) + " (utilization.fragment_layers)");
    v.models.push_back(std::move(w));
  }
  if (v.models.empty()) fail(t, "utilization.model", "missing: at least one [[utilization.model]]");
  for (const auto& [prefix, r] : array_of_tables(t, "utilization.", "reference")) {
    no_unknown_keys(*r, prefix, {"model", "method", "gbps"});
    UtilizationView::Reference ref;
    for (const char* key : {"model", "method", "gbps"})
      if (!r->get(key)) fail(*r, prefix + key, "missing");
    ref.model = get_string(*r->get("model"), prefix + "model");
    ref.method = get_string(*r->get("method"), prefix + "method");
    const auto& arr = array_of(*r->get("gbps"), prefix + "gbps");
    if (arr.size() != v.targets.size())
      fail(*r->get("gbps"), prefix + "gbps", std::to_string(arr.size()) + " figures for " +
                                                 std::to_string(v.targets.size()) + " targets");
    for (size_t i = 0; i < arr.size(); ++i) ref.gbps.push_back(get_number(arr[i], prefix + "gbps[" + std::to_string(i) + "]"));
    if (std::none_of(v.models.begin(), v.models.end(), [&](const Workload& w) { return w.name == ref.model; }))
      fail(*r->get("model"), prefix + "model", "'" + ref.model + "' is not a [[utilization.model]] name");
    if (!known_method(ref.method))
      fail(*r->get("method"), prefix + "method",
           "unknown method '" + ref.method + "' (expected dp, diloco, streaming, decoupled or a utilization.variants name)");
    v.references.push_back(std::move(ref));
  }
  return v;
}

LinkShape read_link(const toml::node& n, const std::string& key) {
  auto shape = parse_link_shape(get_string(n, key));
  if (!shape.ok()) fail(n, key, std::string(shape.status().message()));
  return *shape;
}

NetworkModel read_network(const toml::table& t) {
  no_unknown_keys(t, "network.", {"link", "hub", "wire_parameters", "wait_late", "region", "partition"});
  NetworkModel net;
  net.given = true;
  if (const toml::node* n = t.get("link")) net.link = read_link(*n, "network.link");
  if (const toml::node* n = t.get("hub")) net.hub = read_link(*n, "network.hub");
  read_number(t, "wire_parameters", "network.", 0.0, 1e15, net.wire_parameters);
  if (const toml::node* n = t.get("wait_late")) net.wait_late = get_bool(*n, "network.wait_late");
  for (const auto& [prefix, r] : array_of_tables(t, "network.", "region")) {
    no_unknown_keys(*r, prefix, {"learners", "link"});
    NetworkModel::Region region;
    const toml::node* l = r->get("learners");
    const toml::node* k = r->get("link");
    if (!l) fail(*r, prefix + "learners", "missing: which learners are in this region?");
    if (!k) fail(*r, prefix + "link", "missing: the region's link (e.g. \"rate=2gbit,delay=30ms\")");
    region.learners = read_int32s(*l, prefix + "learners", 0, kMaxLearnerSlots - 1);
    region.link = read_link(*k, prefix + "link");
    net.regions.push_back(std::move(region));
  }
  for (const auto& [prefix, p] : array_of_tables(t, "network.", "partition")) {
    no_unknown_keys(*p, prefix, {"learners", "at_seconds", "seconds"});
    NetworkModel::Partition part;
    const toml::node* l = p->get("learners");
    if (!l) fail(*p, prefix + "learners", "missing: whose links are cut?");
    if (!p->get("seconds")) fail(*p, prefix + "seconds", "missing: for how long?");
    part.learners = read_int32s(*l, prefix + "learners", 0, kMaxLearnerSlots - 1);
    read_number(*p, "at_seconds", prefix, 0.0, 1e9, part.at_seconds);
    read_number(*p, "seconds", prefix, 1e-3, 1e9, part.seconds);
    net.partitions.push_back(std::move(part));
  }
  return net;
}

TrainingModel read_training(const toml::table& t, const std::string& path) {
  no_unknown_keys(t, "training.",
                  {"step_seconds", "step_jitter", "latency_seconds", "learner_failure", "parameters", "set", "compute"});
  TrainingModel m;
  read_number(t, "step_seconds", "training.", 1e-6, 1e5, m.step_seconds);
  if (const toml::node* n = t.get("compute")) {
    if (t.get("step_seconds")) fail(*n, "training.compute", "give step_seconds or [training.compute], not both");
    m.compute = read_compute(table_of(*n, "training.compute"));
    const auto& c = *m.compute;
    m.step_seconds = 6.0 * c.parameters * c.tokens_per_step / (c.chips * c.peak_flops * c.mfu);
    if (!(m.step_seconds >= 1e-6 && m.step_seconds <= 1e7))
      fail(*n, "training.compute", "gives a step of " + std::to_string(m.step_seconds) + " s, outside [1e-6, 1e7]");
  }
  read_number(t, "step_jitter", "training.", 0.0, 3.0, m.step_jitter);
  read_number(t, "latency_seconds", "training.", 0.0, 1e3, m.latency_seconds);
  if (const toml::node* n = t.get("parameters")) m.parameters = get_int(*n, "training.parameters", 0, int64_t{1} << 31);
  if (const toml::node* n = t.get("learner_failure")) {
    const std::string how = get_string(*n, "training.learner_failure");
    if (how == "elastic") m.learner_failure = LearnerFailure::kElastic;
    else if (how == "restart") m.learner_failure = LearnerFailure::kRestart;
    else fail(*n, "training.learner_failure", "unknown '" + how + "' (expected elastic or restart)");
  }
  // The rounds' settings are a topology's [outer] keys, set as `atoll run --set` does.
  std::vector<std::string> sets;
  if (const toml::node* n = t.get("set")) {
    const auto& arr = array_of(*n, "training.set");
    for (size_t i = 0; i < arr.size(); ++i) {
      const std::string key = "training.set[" + std::to_string(i) + "]";
      std::string s = get_string(arr[i], key);
      if (!s.starts_with("outer.") && !s.starts_with("syncer."))
        fail(arr[i], key, "'" + s + "': only outer.* and syncer.* keys shape the simulated rounds");
      sets.push_back(std::move(s));
    }
  }
  auto topology = parse_topology("", path, sets);
  if (!topology.ok()) fail(t, "training.set", std::string(topology.status().message()));
  m.outer = topology->outer;
  m.sets = std::move(sets);
  m.syncer_shards = topology->syncer.shards;
  return m;
}

// A trace's field: a plain number of seconds, finite, at least 0.
std::optional<double> seconds_field(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
  double v = 0.0;
  const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), v);
  const bool whole = !text.empty() && err == std::errc{} && end == text.data() + text.size();
  if (!whole || !std::isfinite(v) || v < 0) return std::nullopt;
  return v;
}

ScavengingPlan read_scavenging(const toml::table& t, const std::string& path) {
  no_unknown_keys(t, "scavenging.", {"core", "scavenged", "quorum", "learner_chips", "availability", "mean_up_seconds",
                                     "notice_seconds", "trace"});
  ScavengingPlan s;
  if (const toml::node* n = t.get("core"))
    s.core = static_cast<int>(get_int(*n, "scavenging.core", 1, kMaxLearnerSlots));
  if (const toml::node* n = t.get("scavenged"))
    s.scavenged = read_int32s(*n, "scavenging.scavenged", 0, kMaxLearnerSlots - s.core);
  if (const toml::node* n = t.get("quorum")) s.quorum = static_cast<int>(get_int(*n, "scavenging.quorum", 1, 1024));
  if (const toml::node* n = t.get("learner_chips"))
    s.learner_chips = get_int(*n, "scavenging.learner_chips", 1, int64_t{1} << 30);
  // A machine that is never up lends nothing; 1: always up, never departs.
  read_number(t, "availability", "scavenging.", 1e-6, 1.0, s.availability);
  read_number(t, "mean_up_seconds", "scavenging.", 1e-3, 1e9, s.mean_up_seconds);
  read_number(t, "notice_seconds", "scavenging.", 0.0, 1e7, s.notice_seconds);
  if (const toml::node* n = t.get("trace")) {
    for (const char* model : {"availability", "mean_up_seconds"})
      if (t.get(model))
        fail(*n, "scavenging.trace", std::string("a trace says when learners are up: drop scavenging.") + model);
    s.trace_path = get_string(*n, "scavenging.trace");
    std::string file = s.trace_path;
    if (std::filesystem::path(file).is_relative()) file = (std::filesystem::path(path).parent_path() / file).string();
    auto trace = load_availability_trace(file);
    if (!trace.ok()) fail(*n, "scavenging.trace", std::string(trace.status().message()));
    s.trace = std::move(*trace);
    const toml::node* counts = t.get("scavenged");
    for (int k : s.scavenged)
      if (static_cast<size_t>(k) > s.trace.size())
        fail(counts ? *counts : *n, "scavenging.scavenged",
             std::to_string(k) + " scavenged learners, and the trace has " + std::to_string(s.trace.size()));
  }
  return s;
}

}  // namespace

double ScavengingPlan::mean_cycle_seconds(int learners) const {
  if (trace.empty()) return availability >= 1.0 ? 0.0 : mean_up_seconds / availability;
  double sum = 0.0;
  size_t n = 0;
  for (int i = 0; i < learners && static_cast<size_t>(i) < trace.size(); ++i)
    for (const AvailabilityPeriod& p : trace[static_cast<size_t>(i)]) {
      sum += p.up_seconds + p.down_seconds;
      ++n;
    }
  return n ? sum / double(n) : 0.0;
}

Result<AvailabilityTrace> load_availability_trace(const std::string& path) {
  auto text = read_text(path);
  if (!text.ok()) return text.status().with_context("availability trace");
  return parse_availability_trace(*text, path);
}

Result<AvailabilityTrace> parse_availability_trace(std::string_view text, const std::string& path) {
  std::istringstream in{std::string(text)};
  AvailabilityTrace trace;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string where = path + ":" + std::to_string(n) + ": ";
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::vector<std::string_view> fields;
    for (std::string_view rest = line;;) {
      const size_t comma = rest.find(',');
      fields.push_back(rest.substr(0, comma));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    if (fields.size() < 3 || fields.size() > 4)
      return Status::invalid_argument(where + std::to_string(fields.size()) +
                                      " fields; expected learner,up_seconds,down_seconds[,notice_seconds]");
    const std::optional<double> learner = seconds_field(fields[0]);
    if (!learner && trace.empty() && fields[0].find("learner") != std::string_view::npos) continue;  // the header
    if (!learner || *learner != std::floor(*learner) || *learner >= kMaxLearnerSlots)
      return Status::invalid_argument(where + "learner '" + std::string(fields[0]) +
                                      "': expected a learner number from 0 (rows learner,up_seconds,down_seconds)");
    const auto id = static_cast<size_t>(*learner);
    if (id > trace.size())
      return Status::invalid_argument(where + "learner " + std::to_string(id) + " before learner " +
                                      std::to_string(trace.size()) + ": number learners from 0 without gaps");
    AvailabilityPeriod p;
    const char* names[] = {"up_seconds", "down_seconds", "notice_seconds"};
    double* values[] = {&p.up_seconds, &p.down_seconds, &p.notice_seconds};
    for (size_t f = 1; f < fields.size(); ++f) {
      const std::optional<double> v = seconds_field(fields[f]);
      if (!v || *v > 1e9)
        return Status::invalid_argument(where + names[f - 1] + " '" + std::string(fields[f]) +
                                        "': expected seconds, a number in [0, 1e9]");
      *values[f - 1] = *v;
    }
    // The trace repeats: a period of no time would repeat forever at one instant.
    if (p.up_seconds + p.down_seconds <= 0)
      return Status::invalid_argument(where + "up_seconds and down_seconds are both 0");
    if (id == trace.size()) trace.emplace_back();
    trace[id].push_back(p);
  }
  if (trace.empty()) return Status::invalid_argument(path + ": no rows (learner,up_seconds,down_seconds)");
  return trace;
}

LinkShape NetworkModel::link_of(int learner) const {
  for (const auto& r : regions)
    if (std::find(r.learners.begin(), r.learners.end(), learner) != r.learners.end()) return r.link;
  return link;
}

double NetworkModel::cut_until(int learner, double t) const {
  for (const auto& p : partitions)
    if (t >= p.at_seconds && t < p.at_seconds + p.seconds &&
        std::find(p.learners.begin(), p.learners.end(), learner) != p.learners.end())
      return p.at_seconds + p.seconds;
  return t;
}

Result<SimulationPlan> load_simulation_plan(const std::string& path, const std::vector<std::string>& overrides) {
  auto text = read_text(path, kMaxConfigFileBytes);
  if (!text.ok()) return text.status();
  return parse_simulation_plan(*text, path, overrides);
}

Result<SimulationPlan> parse_simulation_plan(std::string_view text, const std::string& path,
                                             const std::vector<std::string>& overrides) {
  auto parsed = parse_toml(text, path);
  if (!parsed.ok()) return parsed.status();
  toml::table& root = *parsed;
  for (const auto& o : overrides) ATOLL_RETURN_IF_ERROR(apply_override(root, o));
  SimulationPlan plan;
  plan.path = path;
  plan.name = std::filesystem::path(path).stem().string();
  try {
    no_unknown_keys(root, "", {"name", "seed", "precision", "min_hours", "max_hours", "failures", "training", "grid",
                               "reference", "planning", "scavenging", "network", "utilization"});
    if (const toml::node* n = root.get("name")) plan.name = get_string(*n, "name");
    if (const toml::node* n = root.get("seed")) plan.seed = static_cast<uint64_t>(get_int(*n, "seed", 0, INT64_MAX));
    read_number(root, "precision", "", 1e-4, 0.5, plan.precision);
    read_number(root, "min_hours", "", 0.0, 1e7, plan.min_hours);
    read_number(root, "max_hours", "", 1e-3, 1e7, plan.max_hours);
    if (plan.min_hours > plan.max_hours) fail(*root.get("min_hours"), "min_hours", "is above max_hours");
    if (const toml::node* n = root.get("failures")) plan.failures = read_failures(table_of(*n, "failures"));
    if (const toml::node* n = root.get("training")) plan.training = read_training(table_of(*n, "training"), path);
    if (const toml::node* n = root.get("network")) plan.network = read_network(table_of(*n, "network"));

    std::vector<int64_t> chips;
    if (const toml::node* n = root.get("grid")) {
      const auto& g = table_of(*n, "grid");
      no_unknown_keys(g, "grid.", {"modes", "chips", "learners", "quorum", "sync_every"});
      const toml::node* chips_node = g.get("chips");
      if (!chips_node) fail(g, "grid.chips", "missing: how many chips?");
      chips = read_ints(*chips_node, "grid.chips", 1, int64_t{1} << 40);
      std::vector<Mode> modes = {Mode::kDp, Mode::kElasticDp, Mode::kDecoupled};
      if (const toml::node* m = g.get("modes")) {
        modes.clear();
        const auto& arr = array_of(*m, "grid.modes");
        for (size_t i = 0; i < arr.size(); ++i)
          modes.push_back(get_enum(arr[i], "grid.modes[" + std::to_string(i) + "]", parse_mode));
      }
      std::vector<int> learners = {8}, quorums = {1}, syncs = {0};
      if (const toml::node* m = g.get("learners")) learners = read_int32s(*m, "grid.learners", 1, 1 << 20);
      if (const toml::node* m = g.get("quorum")) quorums = read_int32s(*m, "grid.quorum", 1, 1 << 20);
      if (const toml::node* m = g.get("sync_every")) syncs = read_int32s(*m, "grid.sync_every", 1, 1 << 20);
      for (Mode mode : modes) {
        if (mode != Mode::kDecoupled) {  // one job; with links, its members exchange through the syncer
          for (int m : plan.network.given ? learners : std::vector<int>{1})
            for (int64_t c : chips) plan.cells.push_back({mode, m, c, 1, 0});
          continue;
        }
        for (int k : quorums)
          for (int h : syncs)
            for (int m : learners)
              for (int64_t c : chips) {
                if (k > m) continue;  // a quorum beyond the learners never forms
                if (c < m) fail(*g.get("chips"), "grid.chips", std::to_string(c) + " chips cannot make " +
                                                                   std::to_string(m) + " learners");
                plan.cells.push_back({mode, m, c, k, h});
              }
      }
    }
    if (const toml::node* n = root.get("reference")) {
      const auto* arr = n->as_array();
      if (!arr) fail(*n, "reference", "expected an array of tables ([[reference]])");
      for (size_t i = 0; i < arr->size(); ++i) {
        const std::string prefix = "reference[" + std::to_string(i) + "].";
        const auto& t = table_of((*arr)[i], prefix.substr(0, prefix.size() - 1));
        no_unknown_keys(t, prefix, {"mode", "learners", "goodput"});
        Reference r;
        const toml::node* mode = t.get("mode");
        if (!mode) fail(t, prefix + "mode", "missing: which mode's figures?");
        r.mode = get_enum(*mode, prefix + "mode", parse_mode);
        if (const toml::node* m = t.get("learners")) r.learners = static_cast<int>(get_int(*m, prefix + "learners", 1, 1 << 20));
        const toml::node* goodput = t.get("goodput");
        if (!goodput) fail(t, prefix + "goodput", "missing: one goodput per grid.chips (a fraction; -1 where there is none)");
        const auto& values = array_of(*goodput, prefix + "goodput");
        if (values.size() != chips.size())
          fail(*goodput, prefix + "goodput", std::to_string(values.size()) + " values for the " +
                                                 std::to_string(chips.size()) + " entries of grid.chips");
        for (size_t k = 0; k < values.size(); ++k) {
          const double v = get_number(values[k], prefix + "goodput[" + std::to_string(k) + "]");
          if (v < 0) continue;  // no published figure for this cell
          if (v > 1) fail(values[k], prefix + "goodput[" + std::to_string(k) + "]", "a fraction in [0, 1] (or -1: none)");
          r.chips = chips[k];
          r.goodput = v;
          plan.references.push_back(r);
        }
      }
    }
    if (const toml::node* n = root.get("planning")) {
      const auto& t = table_of(*n, "planning");
      no_unknown_keys(t, "planning.", {"chips", "learners", "quorums", "target"});
      PlanningView v;
      const toml::node* c = t.get("chips");
      if (!c) fail(t, "planning.chips", "missing: how many chips?");
      v.chips = get_int(*c, "planning.chips", 1, int64_t{1} << 40);
      const toml::node* m = t.get("learners");
      if (!m) fail(t, "planning.learners", "missing: which numbers of learners?");
      v.learners = read_int32s(*m, "planning.learners", 1, 1 << 20);
      for (int x : v.learners)
        if (x > v.chips) fail(*m, "planning.learners", std::to_string(x) + " learners need as many chips");
      v.quorums = {1};
      if (const toml::node* k = t.get("quorums")) v.quorums = read_int32s(*k, "planning.quorums", 1, 1 << 20);
      read_number(t, "target", "planning.", 0.0, 1.0, v.target);
      plan.planning = v;
    }
    if (const toml::node* n = root.get("scavenging"))
      plan.scavenging = read_scavenging(table_of(*n, "scavenging"), path);
    if (const toml::node* n = root.get("utilization")) {
      plan.utilization = read_utilization(table_of(*n, "utilization"));
      for (auto& variant : plan.utilization->variants) {  // on top of training.set, read as it was
        std::vector<std::string> sets = plan.training.sets;
        sets.insert(sets.end(), variant.sets.begin(), variant.sets.end());
        auto topology = parse_topology("", path, sets);
        if (!topology.ok())
          fail(*n, "utilization.variants." + variant.name, std::string(topology.status().message()));
        variant.outer = topology->outer;
      }
    }
    if (plan.cells.empty() && !plan.planning && !plan.scavenging && !plan.utilization)
      fail(root, "grid", "nothing to simulate: give a [grid], a [planning], a [scavenging] or a [utilization] table");
  } catch (const KeyError& e) {
    return Status::invalid_argument(e.text);
  }
  return plan;
}

}  // namespace atl
