#include "atoll/sweep.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "atoll/file.h"
#include "atoll/float_text.h"
#include "atoll/json_writer.h"
#include "atoll/printf_string.h"

namespace atl {
namespace {

// FNV-1a, 64 bits: stable across runs and builds (std::hash is not).
uint64_t fnv1a(const std::string& s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::string hex(uint64_t h) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::string record_path(const std::string& dir, const Trial& trial) { return dir + "/" + trial.id() + ".toml"; }

toml::array strings(const std::vector<std::string>& xs) {
  toml::array a;
  for (const auto& x : xs) a.push_back(x);
  return a;
}

}  // namespace

Result<GridAxis> parse_grid_axis(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos)
    return Status::invalid_argument("--grid " + text + ": expected key=value1,value2,...");
  GridAxis axis{trim(text.substr(0, eq)), {}};
  if (axis.key.empty()) return Status::invalid_argument("--grid " + text + ": no key before '='");
  // Split at commas outside brackets, braces and quotes: a value may be "[1, 2]".
  int depth = 0;
  char quote = 0;
  std::string value;
  const auto flush = [&]() -> Status {
    const std::string v = trim(value);
    if (v.empty()) return Status::invalid_argument("--grid " + text + ": an empty value");
    axis.values.push_back(v);
    value.clear();
    return {};
  };
  for (size_t i = eq + 1; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',' && depth == 0) {
      ATOLL_RETURN_IF_ERROR(flush());
      continue;
    }
    value += c;
  }
  if (quote || depth != 0) return Status::invalid_argument("--grid " + text + ": unbalanced quotes or brackets");
  ATOLL_RETURN_IF_ERROR(flush());
  return axis;
}

std::vector<Variant> expand_grid(const std::vector<GridAxis>& axes) {
  std::vector<Variant> out = {Variant{}};
  for (const auto& axis : axes) {
    std::vector<Variant> next;
    for (const auto& v : out)
      for (const auto& value : axis.values) {
        Variant w = v;
        w.label += (w.label.empty() ? "" : " ") + axis.key + "=" + value;
        w.overrides.push_back(axis.key + "=" + value);
        next.push_back(std::move(w));
      }
    out = std::move(next);
  }
  if (axes.empty()) out[0].label = "defaults";
  return out;
}

uint64_t stable_hash(const std::string& text) { return fnv1a(text); }

std::string Trial::id() const {
  uint64_t h = fnv1a(variant.label);
  h = fnv1a("\x1f" + std::to_string(seed), h);
  for (const auto& o : variant.overrides) h = fnv1a("\x1f" + o, h);
  h = fnv1a("\x1f" + hex(topology_hash), h);
  return "trial-" + hex(h);
}

TrialRecord TrialRecord::of(const Trial& trial, const Report& r) {
  TrialRecord t;
  t.label = trial.variant.label;
  t.seed = trial.seed;
  t.overrides = trial.variant.overrides;
  t.topology_hash = trial.topology_hash;
  t.ok = std::isfinite(r.eval.loss);
  if (!t.ok) t.error = "no held-out loss (the global model was not there at the end)";
  t.text = r.eval.bits_per_byte > 0;
  t.wall_seconds = r.wall_seconds;
  t.tokens = r.tokens;
  t.tokens_per_second = r.tokens_per_second;
  t.bytes_per_token = r.bytes_per_token;
  t.goodput = r.goodput;
  t.loss = r.eval.loss;
  t.loss_stderr = r.eval.loss_stderr;
  t.bits_per_byte = r.eval.bits_per_byte;
  t.bits_per_byte_stderr = r.eval.bits_per_byte_stderr;
  t.accuracy = r.eval.accuracy;
  t.windows = r.eval.windows;
  t.curve = r.curve;
  t.others_cpu = r.hardware.others_cpu;
  t.steal = r.hardware.steal;
  t.paced_steps = r.hardware.paced_steps;
  t.late_steps = r.hardware.late_steps;
  return t;
}

TrialRecord TrialRecord::failed(const Trial& trial, const std::string& error) {
  TrialRecord t;
  t.label = trial.variant.label;
  t.seed = trial.seed;
  t.overrides = trial.variant.overrides;
  t.topology_hash = trial.topology_hash;
  t.error = error;
  return t;
}

std::optional<double> TrialRecord::quality_at_seconds(double seconds) const {
  const auto q = [&](const Report::CurvePoint& p) { return text ? p.bits_per_byte : 100.0 * p.accuracy; };
  for (size_t i = 1; i < curve.size(); ++i) {
    const auto &a = curve[i - 1], &b = curve[i];
    if (seconds < a.seconds || seconds > b.seconds) continue;
    const double f = b.seconds > a.seconds ? (seconds - a.seconds) / (b.seconds - a.seconds) : 1.0;
    return q(a) + f * (q(b) - q(a));
  }
  return std::nullopt;
}

std::optional<double> TrialRecord::tokens_to_reach(double quality) const {
  const auto q = [&](const Report::CurvePoint& p) { return text ? p.bits_per_byte : 100.0 * p.accuracy; };
  const auto reached = [&](double v) { return text ? v <= quality : v >= quality; };
  for (size_t i = 0; i < curve.size(); ++i) {
    if (!reached(q(curve[i]))) continue;
    if (i == 0) return static_cast<double>(curve[0].tokens);
    const auto &a = curve[i - 1], &b = curve[i];
    const double f = (quality - q(a)) / (q(b) - q(a));  // q(a) not reached, q(b) reached: 0 < f <= 1
    return static_cast<double>(a.tokens) + f * (static_cast<double>(b.tokens) - static_cast<double>(a.tokens));
  }
  return std::nullopt;
}

std::string TrialRecord::to_toml() const {
  toml::table t{{"label", label},
                {"seed", static_cast<int64_t>(seed)},
                {"overrides", strings(overrides)},
                {"topology", hex(topology_hash)},
                {"ok", ok},
                {"error", error},
                {"text", text},
                {"wall_seconds", wall_seconds},
                {"tokens", static_cast<int64_t>(tokens)},
                {"tokens_per_second", tokens_per_second},
                {"bytes_per_token", bytes_per_token},
                {"goodput", goodput},
                {"loss", std::isfinite(loss) ? loss : -1.0},
                {"loss_stderr", loss_stderr},
                {"bits_per_byte", bits_per_byte},
                {"bits_per_byte_stderr", bits_per_byte_stderr},
                {"accuracy", accuracy},
                {"windows", windows}};
  if (std::isfinite(others_cpu)) t.insert("others_cpu", others_cpu);
  if (std::isfinite(steal)) t.insert("steal", steal);
  if (paced_steps) {
    t.insert("paced_steps", static_cast<int64_t>(paced_steps));
    t.insert("late_steps", static_cast<int64_t>(late_steps));
  }
  toml::array seconds, tokens_at, losses, bpb, acc;
  for (const auto& p : curve) {
    seconds.push_back(p.seconds);
    tokens_at.push_back(static_cast<int64_t>(p.tokens));
    losses.push_back(p.loss);
    bpb.push_back(p.bits_per_byte);
    acc.push_back(p.accuracy);
  }
  t.insert("curve", toml::table{{"seconds", seconds}, {"tokens", tokens_at}, {"loss", losses},
                                {"bits_per_byte", bpb}, {"accuracy", acc}});
  std::ostringstream os;
  os << "# one trial of `atoll sweep`: " << label << ", seed " << seed << "\n" << t << "\n";
  return shortest_floats(os.str());
}

Result<TrialRecord> TrialRecord::parse_toml(const std::string& text, const std::string& source) {
  toml::table t;
  try {
    t = toml::parse(text, std::string_view(source));
  } catch (const toml::parse_error& e) {
    return Status::corruption(source + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  TrialRecord r;
  const auto num = [&](const char* key) { return t[key].value<double>().value_or(0.0); };
  const auto str = [&](const char* key) { return t[key].value<std::string>().value_or(""); };
  if (!t["label"].is_string() || !t["seed"].is_integer() || !t["ok"].is_boolean())
    return Status::corruption(source + ": not a trial record (label, seed or ok missing)");
  r.label = str("label");
  // (is_integer first: value<int64_t>() converts a float unchecked.)
  r.seed = t["seed"].is_integer() ? static_cast<uint64_t>(t["seed"].value<int64_t>().value_or(0)) : 0;
  if (const auto* a = t["overrides"].as_array())
    for (const auto& o : *a) r.overrides.push_back(o.value<std::string>().value_or(""));
  r.topology_hash = std::strtoull(str("topology").c_str(), nullptr, 16);
  r.ok = t["ok"].value<bool>().value_or(false);
  r.error = str("error");
  r.text = t["text"].value<bool>().value_or(false);
  r.wall_seconds = num("wall_seconds");
  r.tokens = static_cast<uint64_t>(t["tokens"].value<int64_t>().value_or(0));
  r.tokens_per_second = num("tokens_per_second");
  r.bytes_per_token = num("bytes_per_token");
  r.goodput = num("goodput");
  r.loss = num("loss");
  r.loss_stderr = num("loss_stderr");
  r.bits_per_byte = num("bits_per_byte");
  r.bits_per_byte_stderr = num("bits_per_byte_stderr");
  r.accuracy = num("accuracy");
  r.windows = t["windows"].value<int64_t>().value_or(0);
  r.others_cpu = t["others_cpu"].value<double>().value_or(std::numeric_limits<double>::quiet_NaN());
  r.steal = t["steal"].value<double>().value_or(std::numeric_limits<double>::quiet_NaN());
  r.paced_steps = static_cast<uint64_t>(std::max<int64_t>(0, t["paced_steps"].value<int64_t>().value_or(0)));
  r.late_steps = std::min(r.paced_steps, static_cast<uint64_t>(std::max<int64_t>(0, t["late_steps"].value<int64_t>().value_or(0))));
  const auto column = [&](const char* key) {
    std::vector<double> out;
    if (const auto* a = t["curve"][key].as_array())
      for (const auto& x : *a) out.push_back(x.value<double>().value_or(0.0));
    return out;
  };
  const auto secs = column("seconds"), toks = column("tokens"), losses = column("loss"),
             bpb = column("bits_per_byte"), acc = column("accuracy");
  if (toks.size() != secs.size() || losses.size() != secs.size() || bpb.size() != secs.size() ||
      acc.size() != secs.size())
    return Status::corruption(source + ": the curve's columns differ in length");
  for (size_t i = 0; i < secs.size(); ++i)
    r.curve.push_back({secs[i], static_cast<uint64_t>(toks[i]), losses[i], bpb[i], acc[i]});
  return r;
}

Result<std::optional<TrialRecord>> load_record(const std::string& dir, const Trial& trial) {
  const std::string path = record_path(dir, trial);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<TrialRecord>();
  auto bytes = read_file(path);
  if (!bytes.ok()) return bytes.status();
  auto record = TrialRecord::parse_toml(std::string(bytes->begin(), bytes->end()), path);
  if (!record.ok()) return record.status();
  if (record->label != trial.variant.label || record->seed != trial.seed ||
      record->overrides != trial.variant.overrides || record->topology_hash != trial.topology_hash)
    return std::optional<TrialRecord>();  // a hash collision, or edited by hand: run it again
  return std::optional<TrialRecord>(std::move(*record));
}

Status save_record(const std::string& dir, const Trial& trial, const TrialRecord& record) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::io_error(dir + ": cannot create the folder: " + ec.message());
  const std::string text = record.to_toml();
  return write_file_atomic(record_path(dir, trial), std::span<const uint8_t>(
                                                             reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

Spread Spread::of(const std::vector<double>& xs) {
  Spread s;
  s.n = static_cast<int>(xs.size());
  if (xs.empty()) return s;
  s.mean = std::accumulate(xs.begin(), xs.end(), 0.0) / s.n;
  s.min = *std::min_element(xs.begin(), xs.end());
  s.max = *std::max_element(xs.begin(), xs.end());
  if (s.n > 1) {
    double ss = 0.0;
    for (double x : xs) ss += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(ss / (s.n - 1));
  }
  return s;
}

std::vector<SweepRow> summarize(const std::vector<Variant>& variants, const std::vector<TrialRecord>& records) {
  std::vector<SweepRow> rows;
  for (const auto& v : variants) {
    SweepRow row{v.label, v.overrides, {}, 0, {}, {}, {}, {}, {}, {}, 0.0};
    for (const auto& r : records)
      if (r.label == v.label && r.overrides == v.overrides) {
        if (r.ok) row.trials.push_back(r);
        else ++row.failed;
      }
    std::sort(row.trials.begin(), row.trials.end(), [](const auto& a, const auto& b) { return a.seed < b.seed; });
    std::vector<double> q, loss, tps, bpt, good, wall;
    double stderr_sum = 0.0;
    for (const auto& t : row.trials) {
      q.push_back(t.quality());
      loss.push_back(t.loss);
      tps.push_back(t.tokens_per_second);
      bpt.push_back(t.bytes_per_token);
      good.push_back(t.goodput);
      wall.push_back(t.wall_seconds);
      stderr_sum += t.text ? t.bits_per_byte_stderr : 0.0;
    }
    row.quality = Spread::of(q);
    row.loss = Spread::of(loss);
    row.tokens_per_second = Spread::of(tps);
    row.bytes_per_token = Spread::of(bpt);
    row.goodput = Spread::of(good);
    row.wall_seconds = Spread::of(wall);
    row.eval_stderr = row.trials.empty() ? 0.0 : stderr_sum / static_cast<double>(row.trials.size());
    rows.push_back(std::move(row));
  }
  return rows;
}

namespace {

void sort_best_first(std::vector<SweepRow>& rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const SweepRow& a, const SweepRow& b) {
    if (a.trials.empty() != b.trials.empty()) return b.trials.empty();
    return a.loss.mean < b.loss.mean;
  });
}

}  // namespace

std::string sweep_table(std::vector<SweepRow> rows) {
  sort_best_first(rows);
  const bool text = std::any_of(rows.begin(), rows.end(),
                                [](const SweepRow& r) { return !r.trials.empty() && r.trials[0].text; });
  size_t width = 7;
  for (const auto& r : rows) width = std::max(width, r.label.size());
  width = std::min<size_t>(width, 60);
  std::ostringstream o;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-4s %-*s %22s %7s %5s %10s %11s %8s %8s\n", "rank", static_cast<int>(width),
                "variant", text ? "bits/byte (mean +- sd)" : "accuracy % (mean +- sd)", "best", "runs", "tokens/s",
                "bytes/token", "goodput", "wall s");
  o << buf;
  int rank = 0;
  for (const auto& r : rows) {
    ++rank;
    if (r.trials.empty()) {
      std::snprintf(buf, sizeof buf, "%-4d %-*s %22s %7s %5s   (%d failed)\n", rank, static_cast<int>(width),
                    r.label.substr(0, width).c_str(), "-", "-", "0", r.failed);
      o << buf;
      continue;
    }
    char quality[64];
    std::snprintf(quality, sizeof quality, "%.4f +- %.4f", r.quality.mean, r.quality.stddev);
    std::snprintf(buf, sizeof buf, "%-4d %-*s %22s %7.4f %5d %10.0f %11.1f %8.3f %8.1f%s\n", rank,
                  static_cast<int>(width), r.label.substr(0, width).c_str(), quality,
                  text ? r.quality.min : r.quality.max, r.quality.n, r.tokens_per_second.mean, r.bytes_per_token.mean,
                  r.goodput.mean, r.wall_seconds.mean,
                  r.failed ? ("  (" + std::to_string(r.failed) + " failed)").c_str() : "");
    o << buf;
  }
  std::vector<TrialRecord> all;
  for (const auto& r : rows) all.insert(all.end(), r.trials.begin(), r.trials.end());
  o << shared_machine_line(all) << late_pace_line(all);
  return o.str();
}

namespace {

// HEADER then "label, seed S (DETAIL)" for each record FLAGGED picks, joined
// by "; ", as one line; "" when it picks none.
template <class Flagged, class Detail>
std::string flagged_runs_line(const std::vector<TrialRecord>& records, const std::string& header, Flagged flagged,
                              Detail detail) {
  std::string runs;
  for (const auto& t : records) {
    if (!flagged(t)) continue;
    runs += (runs.empty() ? "" : "; ") + t.label + ", seed " + std::to_string(t.seed) + " (" + detail(t) + ")";
  }
  return runs.empty() ? "" : header + runs + "\n";
}

}  // namespace

std::string shared_machine_line(const std::vector<TrialRecord>& records) {
  return flagged_runs_line(
      records,
      printf_string("shared the machine (more than %.0f%% of its CPU went elsewhere): ",
                    100 * TrialRecord::kSharedMachine),
      [](const TrialRecord& t) { return t.shared_machine(); },
      [](const TrialRecord& t) {
        return printf_string("%.0f%% others, %.0f%% steal", 100 * t.others_cpu, 100 * t.steal);
      });
}

std::string late_pace_line(const std::vector<TrialRecord>& records) {
  return flagged_runs_line(
      records,
      printf_string("ran late (more than %.0f%% of paced steps took longer than their pace; more hardware_headroom): ",
                    100 * TrialRecord::kLatePace),
      [](const TrialRecord& t) { return t.late_pace(); },
      [](const TrialRecord& t) { return printf_string("%.0f%% late", 100 * t.late_share()); });
}

std::string sweep_json(std::vector<SweepRow> rows, const std::vector<std::string>& shared_overrides,
                       const std::string& topology_file) {
  sort_best_first(rows);
  JsonWriter j;
  j.open(nullptr, '{');
  j.field("topology", topology_file.empty() ? std::string("(built-in default)") : topology_file);
  j.open("overrides", '[');
  for (const auto& o : shared_overrides) j.item(o);
  j.close(']');
  const auto spread = [&](const char* key, const Spread& s) {
    j.open(key, '{');
    j.field("n", s.n);
    j.field("mean", s.mean);
    j.field("stddev", s.stddev);
    j.field("min", s.min);
    j.field("max", s.max);
    j.close('}');
  };
  j.open("variants", '[');
  for (const auto& r : rows) {
    j.open(nullptr, '{');
    j.field("label", r.label);
    j.open("overrides", '[');
    for (const auto& o : r.overrides) j.item(o);
    j.close(']');
    j.field("failed", r.failed);
    const bool text = !r.trials.empty() && r.trials[0].text;
    spread(text ? "bits_per_byte" : "accuracy_percent", r.quality);
    spread("eval_loss", r.loss);
    j.field("eval_stderr", r.eval_stderr);
    spread("tokens_per_second", r.tokens_per_second);
    spread("bytes_per_token", r.bytes_per_token);
    spread("goodput", r.goodput);
    spread("wall_seconds", r.wall_seconds);
    j.open("trials", '[');
    for (const auto& t : r.trials) {
      j.open(nullptr, '{');
      j.field("seed", t.seed);
      j.field("quality", t.quality());
      j.field("eval_loss", t.loss);
      j.field("eval_stderr", t.text ? t.bits_per_byte_stderr : 0.0);
      j.field("windows", t.windows);
      j.field("tokens", t.tokens);
      j.field("wall_seconds", t.wall_seconds);
      j.field("tokens_per_second", t.tokens_per_second);
      j.field("bytes_per_token", t.bytes_per_token);
      j.field("goodput", t.goodput);
      j.field("others_cpu", t.others_cpu);
      j.field("steal", t.steal);
      j.field("paced_steps", t.paced_steps);
      j.field("late_steps", t.late_steps);
      j.open("curve", '[');
      for (const auto& p : t.curve) {
        j.open(nullptr, '{');
        j.field("seconds", p.seconds);
        j.field("tokens", p.tokens);
        j.field("quality", t.text ? p.bits_per_byte : 100.0 * p.accuracy);
        j.close('}');
      }
      j.close(']');
      j.close('}');
    }
    j.close(']');
    j.close('}');
  }
  j.close(']');
  j.close('}');
  return j.text() + "\n";
}

}  // namespace atl
