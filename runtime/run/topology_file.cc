#include "atoll/topology_file.h"

#include <toml++/toml.h>

#include "atoll/file.h"
#include "atoll/float_text.h"
#include "atoll/job.h"
#include "atoll/toml_fields.h"

#include <charconv>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>

namespace atl {
namespace {

using namespace toml_fields;

using Setter = std::function<void(Topology&, const toml::node&, const std::string& key)>;

// Every scalar key of the file, by dotted name.
const std::map<std::string, Setter>& scalar_keys() {
  static const std::map<std::string, Setter> keys = {
      {"mode", [](Topology& t, const toml::node& n, const std::string& k) { t.mode = get_enum(n, k, parse_mode); }},
      {"seed", [](Topology& t, const toml::node& n, const std::string& k) { t.seed = static_cast<uint64_t>(get_int(n, k, 0, INT64_MAX)); }},
      {"tokens", [](Topology& t, const toml::node& n, const std::string& k) { t.tokens = static_cast<uint64_t>(get_int(n, k, 0, INT64_MAX)); }},
      {"seconds", [](Topology& t, const toml::node& n, const std::string& k) { t.seconds = get_number(n, k); }},
      {"hardware", [](Topology& t, const toml::node& n, const std::string& k) { t.hardware = get_enum(n, k, parse_hardware); }},
      {"hardware_headroom", [](Topology& t, const toml::node& n, const std::string& k) { t.hardware_headroom = get_number(n, k); }},
      {"model.kind", [](Topology& t, const toml::node& n, const std::string& k) { t.model.kind = get_enum(n, k, parse_model_kind); }},
      {"model.layers", [](Topology& t, const toml::node& n, const std::string& k) { t.model.layers = get_int32(n, k); }},
      {"model.width", [](Topology& t, const toml::node& n, const std::string& k) { t.model.width = get_int32(n, k); }},
      {"model.heads", [](Topology& t, const toml::node& n, const std::string& k) { t.model.heads = get_int32(n, k); }},
      {"model.context", [](Topology& t, const toml::node& n, const std::string& k) { t.model.context = get_int32(n, k); }},
      {"model.path", [](Topology& t, const toml::node& n, const std::string& k) { t.model.path = get_string(n, k); }},
      {"data.kind", [](Topology& t, const toml::node& n, const std::string& k) { t.data.kind = get_enum(n, k, parse_data_kind); }},
      {"data.dir", [](Topology& t, const toml::node& n, const std::string& k) { t.data.dir = get_string(n, k); }},
      {"data.holdout_every", [](Topology& t, const toml::node& n, const std::string& k) { t.data.holdout_every = get_int32(n, k); }},
      {"data.eval_examples", [](Topology& t, const toml::node& n, const std::string& k) { t.data.eval_examples = get_int32(n, k); }},
      {"data.features", [](Topology& t, const toml::node& n, const std::string& k) { t.data.features = get_int32(n, k); }},
      {"data.classes", [](Topology& t, const toml::node& n, const std::string& k) { t.data.classes = get_int32(n, k); }},
      {"data.examples", [](Topology& t, const toml::node& n, const std::string& k) { t.data.examples = get_int32(n, k); }},
      {"inner.lr", [](Topology& t, const toml::node& n, const std::string& k) { t.inner.lr = static_cast<float>(get_number(n, k)); }},
      {"inner.beta1", [](Topology& t, const toml::node& n, const std::string& k) { t.inner.beta1 = static_cast<float>(get_number(n, k)); }},
      {"inner.beta2", [](Topology& t, const toml::node& n, const std::string& k) { t.inner.beta2 = static_cast<float>(get_number(n, k)); }},
      {"inner.eps", [](Topology& t, const toml::node& n, const std::string& k) { t.inner.eps = static_cast<float>(get_number(n, k)); }},
      {"inner.weight_decay", [](Topology& t, const toml::node& n, const std::string& k) { t.inner.weight_decay = static_cast<float>(get_number(n, k)); }},
      {"inner.warmup_steps", [](Topology& t, const toml::node& n, const std::string& k) { t.inner.warmup_steps = get_int(n, k, 0, INT64_MAX); }},
      {"inner.total_steps", [](Topology& t, const toml::node& n, const std::string& k) { t.inner.total_steps = get_int(n, k, 0, INT64_MAX); }},
      {"inner.min_lr_ratio", [](Topology& t, const toml::node& n, const std::string& k) { t.inner.min_lr_ratio = static_cast<float>(get_number(n, k)); }},
      {"inner.muon", [](Topology& t, const toml::node& n, const std::string& k) { t.inner.muon = get_bool(n, k); }},
      {"inner.muon_momentum", [](Topology& t, const toml::node& n, const std::string& k) { t.inner.muon_momentum = static_cast<float>(get_number(n, k)); }},
      {"outer.fragments", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.fragments = get_int32(n, k); }},
      {"outer.stream", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.stream = get_int32(n, k); }},
      {"outer.sync_every", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.sync_every = get_int32(n, k); }},
      {"outer.overlap", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.overlap = get_int32(n, k); }},
      {"outer.quorum", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.quorum = get_int32(n, k); }},
      {"outer.grace_gamma", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.grace_gamma = get_number(n, k); }},
      {"outer.grace_cap_steps", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.grace_cap_steps = get_number(n, k); }},
      {"outer.max_staleness", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.max_staleness = get_int32(n, k); }},
      {"outer.lr", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.nesterov.lr = static_cast<float>(get_number(n, k)); }},
      {"outer.momentum", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.nesterov.momentum = static_cast<float>(get_number(n, k)); }},
      {"outer.momentum_every", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.nesterov.every = get_int32(n, k); }},
      {"outer.push_codec", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.push_codec = get_enum(n, k, parse_codec); }},
      {"outer.push_block", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.push_block = static_cast<uint32_t>(get_int(n, k, 0, UINT32_MAX)); }},
      {"outer.broadcast_codec", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.broadcast_codec = get_enum(n, k, parse_codec); }},
      {"outer.blend_alpha", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.blend_alpha = static_cast<float>(get_number(n, k)); }},
      {"outer.barrier", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.barrier = get_bool(n, k); }},
      {"outer.weighting", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.weighting = get_enum(n, k, parse_weighting); }},
      {"outer.force_avg", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.force_avg = get_bool(n, k); }},
      {"outer.force_rda", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.force_rda = get_bool(n, k); }},
      {"outer.reconfigure_seconds", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.reconfigure_seconds = get_number(n, k); }},
      {"outer.broadcast_block", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.broadcast_block = static_cast<uint32_t>(get_int(n, k, 0, UINT32_MAX)); }},
      {"outer.sync_every_start", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.sync_every_start = get_int32(n, k); }},
      {"outer.sync_ramp_rounds", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.sync_ramp_rounds = get_int32(n, k); }},
      {"outer.sync_by_speed", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.sync_by_speed = get_bool(n, k); }},
      {"outer.final_flush", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.final_flush = get_bool(n, k); }},
      {"outer.carry_progress", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.carry_progress = get_bool(n, k); }},
      {"outer.push_density", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.push_density = static_cast<float>(get_number(n, k)); }},
      {"outer.push_error_feedback", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.push_error_feedback = get_bool(n, k); }},
      {"outer.eager_updates", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.eager_updates = get_bool(n, k); }},
      {"outer.lr_warmup_rounds", [](Topology& t, const toml::node& n, const std::string& k) { t.outer.lr_warmup_rounds = get_int32(n, k); }},
      {"checkpoint.dir", [](Topology& t, const toml::node& n, const std::string& k) { t.checkpoint.dir = get_string(n, k); }},
      {"checkpoint.every_rounds", [](Topology& t, const toml::node& n, const std::string& k) { t.checkpoint.every_rounds = get_int32(n, k); }},
      {"checkpoint.every_seconds", [](Topology& t, const toml::node& n, const std::string& k) { t.checkpoint.every_seconds = get_number(n, k); }},
      {"checkpoint.keep", [](Topology& t, const toml::node& n, const std::string& k) { t.checkpoint.keep = get_int32(n, k); }},
      {"checkpoint.moments", [](Topology& t, const toml::node& n, const std::string& k) { t.checkpoint.moments = get_bool(n, k); }},
      {"membership.max_learners", [](Topology& t, const toml::node& n, const std::string& k) { t.membership.max_learners = get_int32(n, k); }},
      {"syncer.shards", [](Topology& t, const toml::node& n, const std::string& k) { t.syncer.shards = get_int32(n, k); }},
  };
  return keys;
}

// Keys that hold arrays, handled by hand.
constexpr const char* kHidden = "model.hidden";
constexpr const char* kAvg = "model.avg";
constexpr const char* kLearners = "learners";
const char* const kTables[] = {"model", "data", "inner", "outer", "checkpoint", "membership", "syncer"};

[[noreturn]] void unknown_key(const toml::node& n, const std::string& key) {
  std::string best;
  size_t best_d = 4;
  const auto consider = [&](const std::string& k) {
    const size_t d = distance(key, k);
    if (d < best_d) best_d = d, best = k;
  };
  for (const auto& [k, setter] : scalar_keys()) consider(k);
  consider(kHidden);
  consider(kAvg);
  consider(kLearners);
  consider("learners.speed");
  consider("learners.batch_size");
  fail(n, key, "unknown key" + (best.empty() ? std::string() : " (did you mean " + best + "?)"));
}

void read_learners(Topology& t, const toml::node& n, std::map<std::string, std::string>& lines) {
  const auto* arr = n.as_array();
  if (!arr) fail(n, kLearners, std::string("expected an array of tables ([[learners]]), got ") + type_name(n));
  t.learners.clear();
  for (size_t i = 0; i < arr->size(); ++i) {
    const auto& item = (*arr)[i];
    const std::string prefix = "learners[" + std::to_string(i) + "]";
    const auto* tbl = item.as_table();
    if (!tbl) fail(item, prefix, std::string("expected a table, got ") + type_name(item));
    LearnerSpec l;
    lines[prefix] = where(item);
    for (const auto& [k, v] : *tbl) {
      const std::string key = prefix + "." + std::string(k.str());
      lines[key] = where(v);
      if (k.str() == "speed") l.speed = get_number(v, key);
      else if (k.str() == "batch_size") l.batch_size = get_int32(v, key);
      else fail(v, key, "unknown key (a learner has speed and batch_size)");
    }
    t.learners.push_back(l);
  }
}

void read_table(Topology& t, const toml::table& tbl, const std::string& prefix,
                std::map<std::string, std::string>& lines) {
  for (const auto& [k, v] : tbl) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    lines[key] = where(v);
    if (prefix.empty() && key == kLearners) {
      read_learners(t, v, lines);
      continue;
    }
    if (key == kHidden) {
      const auto* arr = v.as_array();
      if (!arr) fail(v, key, std::string("expected an array of layer widths, got ") + type_name(v));
      t.model.hidden.clear();
      for (size_t i = 0; i < arr->size(); ++i) t.model.hidden.push_back(get_int32((*arr)[i], key + "[" + std::to_string(i) + "]"));
      continue;
    }
    if (key == kAvg) {
      const auto* arr = v.as_array();
      if (!arr) fail(v, key, std::string("expected an array of tensor-name globs, got ") + type_name(v));
      t.model.avg.clear();
      for (size_t i = 0; i < arr->size(); ++i) t.model.avg.push_back(get_string((*arr)[i], key + "[" + std::to_string(i) + "]"));
      continue;
    }
    if (const auto* sub = v.as_table()) {
      const bool known = prefix.empty() && std::find(std::begin(kTables), std::end(kTables), key) != std::end(kTables);
      if (!known) unknown_key(v, key);
      read_table(t, *sub, key, lines);
      continue;
    }
    const auto it = scalar_keys().find(key);
    if (it == scalar_keys().end()) unknown_key(v, key);
    it->second(t, v, key);
  }
}

Result<Topology> from_table(toml::table& root, const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) ATOLL_RETURN_IF_ERROR(apply_override(root, o));
  Topology t;
  std::map<std::string, std::string> lines;
  try {
    read_table(t, root, "", lines);
  } catch (const KeyError& e) {
    return Status::invalid_argument(e.text);
  }
  Status s = validate(t);
  if (s.ok()) {  // the model must be able to hold the fragment plan too
    auto layout = model_layout(t);
    s = layout.ok() ? plan_fragments(*layout, t).status() : layout.status();
  }
  if (s.ok()) return t;
  // validate() starts its message with the key: put the key's line in front.
  std::string msg(s.message());
  const size_t end = msg.find_first_of(" :");
  const auto it = lines.find(msg.substr(0, end));
  if (it != lines.end()) return Status::invalid_argument(it->second + msg);
  const size_t bracket = msg.find('[');
  if (bracket != std::string::npos && bracket < end) {  // learners[2].speed from a default: name the array
    const auto arr = lines.find(msg.substr(0, bracket));
    if (arr != lines.end()) return Status::invalid_argument(arr->second + msg);
  }
  return Status::invalid_argument(msg);
}

}  // namespace

Result<Topology> parse_topology(std::string_view text, const std::string& source,
                                const std::vector<std::string>& overrides) {
  auto root = parse_toml(text, source);
  if (!root.ok()) return root.status();
  return from_table(*root, overrides);
}

Result<Topology> load_topology(const std::string& path, const std::vector<std::string>& overrides) {
  if (path.empty()) {
    toml::table none;
    return from_table(none, overrides);
  }
  auto text = read_text(path, kMaxConfigFileBytes);
  if (!text.ok()) return text.status();
  return parse_topology(*text, path, overrides);
}

// A float as the double of the shortest decimal that reads back to it: 0.9f
// becomes 0.9, not 0.89999997615814209.
double tidy(float f) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf - 1, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

namespace {

toml::table to_table(const Topology& t) {
  toml::table root;
  root.insert("mode", mode_name(t.mode));
  root.insert("seed", static_cast<int64_t>(t.seed));
  root.insert("tokens", static_cast<int64_t>(t.tokens));
  root.insert("seconds", t.seconds);
  root.insert("hardware", hardware_name(t.hardware));
  root.insert("hardware_headroom", t.hardware_headroom);
  toml::array hidden;
  for (int h : t.model.hidden) hidden.push_back(h);
  toml::array avg;
  for (const auto& g : t.model.avg) avg.push_back(g);
  root.insert("model", toml::table{{"kind", model_kind_name(t.model.kind)}, {"hidden", hidden},
                                   {"layers", t.model.layers}, {"width", t.model.width},
                                   {"heads", t.model.heads}, {"context", t.model.context},
                                   {"path", t.model.path}, {"avg", avg}});
  root.insert("data", toml::table{{"kind", data_kind_name(t.data.kind)}, {"dir", t.data.dir},
                                  {"holdout_every", t.data.holdout_every}, {"eval_examples", t.data.eval_examples},
                                  {"features", t.data.features}, {"classes", t.data.classes},
                                  {"examples", t.data.examples}});
  root.insert("inner", toml::table{{"lr", tidy(t.inner.lr)}, {"beta1", tidy(t.inner.beta1)},
                                   {"beta2", tidy(t.inner.beta2)}, {"eps", tidy(t.inner.eps)},
                                   {"weight_decay", tidy(t.inner.weight_decay)},
                                   {"warmup_steps", t.inner.warmup_steps}, {"total_steps", t.inner.total_steps},
                                   {"min_lr_ratio", tidy(t.inner.min_lr_ratio)}, {"muon", t.inner.muon},
                                   {"muon_momentum", tidy(t.inner.muon_momentum)}});
  const auto& o = t.outer;
  root.insert("outer", toml::table{{"fragments", o.fragments}, {"stream", o.stream}, {"sync_every", o.sync_every}, {"overlap", o.overlap},
                                   {"quorum", o.quorum}, {"grace_gamma", o.grace_gamma},
                                   {"grace_cap_steps", o.grace_cap_steps}, {"max_staleness", o.max_staleness},
                                   {"lr", tidy(o.nesterov.lr)}, {"momentum", tidy(o.nesterov.momentum)},
                                   {"momentum_every", o.nesterov.every},
                                   {"push_codec", codec_name(o.push_codec)}, {"push_block", int64_t{o.push_block}},
                                   {"broadcast_codec", codec_name(o.broadcast_codec)},
                                   {"broadcast_block", int64_t{o.broadcast_block}},
                                   {"blend_alpha", tidy(o.blend_alpha)}, {"barrier", o.barrier},
                                   {"weighting", weighting_name(o.weighting)}, {"force_avg", o.force_avg},
                                   {"force_rda", o.force_rda},
                                   {"reconfigure_seconds", o.reconfigure_seconds},
                                   {"final_flush", o.final_flush}, {"carry_progress", o.carry_progress},
                                   {"lr_warmup_rounds", o.lr_warmup_rounds},
                                   {"sync_every_start", o.sync_every_start},
                                   {"sync_ramp_rounds", o.sync_ramp_rounds},
                                   {"sync_by_speed", o.sync_by_speed}, {"push_density", tidy(o.push_density)},
                                   {"push_error_feedback", o.push_error_feedback},
                                   {"eager_updates", o.eager_updates}});
  root.insert("checkpoint", toml::table{{"dir", t.checkpoint.dir}, {"every_rounds", t.checkpoint.every_rounds},
                                        {"every_seconds", t.checkpoint.every_seconds}, {"keep", t.checkpoint.keep},
                                        {"moments", t.checkpoint.moments}});
  root.insert("membership", toml::table{{"max_learners", t.membership.max_learners}});
  root.insert("syncer", toml::table{{"shards", t.syncer.shards}});
  toml::array learners;
  for (const auto& l : t.learners) learners.push_back(toml::table{{"speed", l.speed}, {"batch_size", l.batch_size}});
  root.insert("learners", learners);
  return root;
}

}  // namespace

std::string to_toml(const Topology& t) {
  std::ostringstream os;
  os << to_table(t) << "\n";
  return shortest_floats(os.str());
}

std::string to_json(const Topology& t) {
  std::ostringstream os;
  os << toml::json_formatter{to_table(t)} << "\n";
  return shortest_floats(os.str());
}

}  // namespace atl
