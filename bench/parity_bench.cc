// Model quality of Decoupled DiLoCo against data-parallel training (issue 10):
// at equal tokens and at equal wall-clock time, every variant over seeds.
//
//   atoll_parity_bench [TOPOLOGY.toml] [--set key=value]... [--seeds N] [--out DIR]
//                      [--only headline|controls|levers|NAME,...]
//
// Groups (default: headline), each on the topology with its own settings:
//   headline  decoupled (4 learners of speeds 1, 1, 0.7, 0.5, K = 1 with
//             grace, int4 pushes) against dp with its own tuned learning
//             rate, at 20 bytes per parameter: the default transformer with 2
//             blocks instead of 4 (479k parameters, 9.6M bytes), which makes
//             three seeds of both modes affordable on 2 cores (about 35 min)
//   controls  one learner: decoupled (outer steps over its own progress)
//             against plain training, the same batch, lr and budget
//   levers    the default job (4M bytes) with one setting changed: what each
//             lever buys, against the default and against `--set mode=dp`
//
// Every run evaluates its global model at 10 points, so the equal-time column
// reads the baseline's quality at the wall time the other run took (dp is
// paced by its slowest learner); a run longer than the baseline's is compared
// with its end. Records go to --out (default atoll-out/bench/parity); the same
// command resumes. A --set applies to every group, after the group's settings.
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "atoll/file.h"
#include "compare.h"

namespace {

using atl::TrialRecord;
using atl::Variant;

// dp's learning rate, tuned at the headline's budget: 6e-3 reached 1.687
// bits per byte, 4e-3 1.693 (one seed; 3e-3 lost to 4e-3 at 4M bytes). The
// baseline is dp at its best, not at decoupled's settings.
const std::string kDpLr = "inner.lr=6e-3";
const std::string kOneLearner = "learners=[{speed=1.0,batch_size=32}]";
const std::vector<std::string> kSmallModel = {"model.layers=2"};  // 478,976 parameters

struct Group {
  std::string name;
  std::vector<std::string> settings;  // before each variant's own
  std::string baseline;               // the variant the others are compared with
  std::vector<Variant> variants;
};

std::vector<Group> groups() {
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  return {
      {"headline", with(kSmallModel, {"tokens=9600000"}), "dp",
       {{"decoupled", {}}, {"dp", {"mode=dp", kDpLr}}}},
      {"controls", with(kSmallModel, {"tokens=2500000"}), "1 learner alone",
       {{"1 learner, decoupled", {kOneLearner}}, {"1 learner alone", {"mode=dp", kOneLearner}}}},
      {"levers", {}, "default job",
       {{"default job", {}},
        {"default job, dp", {"mode=dp"}},
        {"no final flush", {"outer.final_flush=false"}},
        {"no carry", {"outer.carry_progress=false"}},
        {"bf16 pushes", {"outer.push_codec=bf16"}},
        {"int2 pushes", {"outer.push_codec=int2"}},
        {"bf16 broadcasts", {"outer.broadcast_codec=bf16"}},
        {"H=24", {"outer.sync_every=24"}}}},
  };
}

struct Paired {
  std::vector<double> equal_tokens, equal_time;  // relative to the baseline, per seed
  int longer_than_baseline = 0;                  // runs that outlasted the baseline's whole run
};

double mean(const std::vector<double>& xs) {
  double s = 0;
  for (double x : xs) s += x;
  return xs.empty() ? NAN : s / double(xs.size());
}
double stddev(const std::vector<double>& xs) {
  if (xs.size() < 2) return 0.0;
  const double m = mean(xs);
  double s = 0;
  for (double x : xs) s += (x - m) * (x - m);
  return std::sqrt(s / double(xs.size() - 1));
}

// Pairs each run with the baseline's run of the same seed.
Paired pair_with(const std::vector<TrialRecord>& records, const std::string& label, const std::string& baseline) {
  std::map<uint64_t, const TrialRecord*> base;
  for (const auto& r : records)
    if (r.ok && r.label == baseline) base[r.seed] = &r;
  Paired p;
  for (const auto& r : records) {
    if (!r.ok || r.label != label || !base.count(r.seed)) continue;
    const TrialRecord& b = *base[r.seed];
    p.equal_tokens.push_back(r.quality() / b.quality() - 1.0);
    auto at = b.quality_at_seconds(r.wall_seconds);
    if (!at && r.wall_seconds >= b.wall_seconds) {
      at = b.quality();
      ++p.longer_than_baseline;
    }
    if (at) p.equal_time.push_back(r.quality() / *at - 1.0);
  }
  return p;
}

std::string comparison_table(const std::vector<Group>& chosen, const std::vector<TrialRecord>& records) {
  std::string out;
  char buf[512];
  bool any_longer = false;
  for (const auto& g : chosen) {
    std::snprintf(buf, sizeof buf, "\n%s: against '%s', paired by seed (negative: better)\n", g.name.c_str(),
                  g.baseline.c_str());
    out += buf;
    std::snprintf(buf, sizeof buf, "  %-22s %-24s %-22s %-22s %10s %11s %8s\n", "variant", "quality (mean +- sd, n)",
                  "equal tokens", "equal wall time", "tokens/s", "bytes/token", "wall s");
    out += buf;
    const auto rows = atl::summarize(g.variants, records);
    for (const auto& row : rows) {
      if (row.trials.empty()) continue;
      char quality[64], tokens[64] = "", time[64] = "";
      std::snprintf(quality, sizeof quality, "%.4f +- %.4f (%d)", row.quality.mean, row.quality.stddev, row.quality.n);
      if (row.label != g.baseline) {
        const Paired p = pair_with(records, row.label, g.baseline);
        if (!p.equal_tokens.empty())
          std::snprintf(tokens, sizeof tokens, "%+.2f%% +- %.2f%%", 100 * mean(p.equal_tokens),
                        100 * stddev(p.equal_tokens));
        any_longer |= p.longer_than_baseline > 0;
        if (!p.equal_time.empty())
          std::snprintf(time, sizeof time, "%+.2f%% +- %.2f%%%s", 100 * mean(p.equal_time), 100 * stddev(p.equal_time),
                        p.longer_than_baseline ? " *" : "");
      }
      std::snprintf(buf, sizeof buf, "  %-22s %-24s %-22s %-22s %10.0f %11.1f %8.1f\n", row.label.c_str(), quality,
                    tokens, time, row.tokens_per_second.mean, row.bytes_per_token.mean, row.wall_seconds.mean);
      out += buf;
    }
  }
  if (any_longer) out += "\n* some runs took longer than the baseline's whole run: compared with its end.\n";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  atl::bench::BenchOptions options;
  options.out = "atoll-out/bench/parity";
  options.seeds = 3;
  options.curve_points = 10;
  const char* usage =
      "Held-out quality of decoupled against dp (tuned lr) at equal tokens and at equal wall time,\n"
      "every variant over --seeds seeds (default 3). --only picks groups (headline, controls, levers)\n"
      "or variants by name; default: headline. A --set (say tokens=N) applies after each group's\n"
      "own settings. Records go to --out (default atoll-out/bench/parity); the same command resumes.\n";
  if (int status = atl::bench::parse_bench_args(argc, argv, usage, options); status >= 0) return status;
  if (options.only.empty()) options.only = {"headline"};

  std::vector<Group> chosen;
  std::vector<Variant> variants;
  std::set<std::string> known;
  for (const auto& g : groups()) {
    bool whole = false;
    for (const auto& o : options.only) whole |= o == g.name;
    Group picked{g.name, g.settings, g.baseline, {}};
    for (const auto& v : g.variants) {
      known.insert(v.label);
      bool named = whole || v.label == g.baseline;  // the baseline runs with its group
      for (const auto& o : options.only) named |= o == v.label;
      if (!named) continue;
      Variant run{v.label, g.settings};  // the group's settings, the variant's, then --set
      run.overrides.insert(run.overrides.end(), v.overrides.begin(), v.overrides.end());
      run.overrides.insert(run.overrides.end(), options.overrides.begin(), options.overrides.end());
      picked.variants.push_back(run);
    }
    if (picked.variants.size() < 2 && !whole) continue;  // only the baseline: nothing named here
    variants.insert(variants.end(), picked.variants.begin(), picked.variants.end());
    chosen.push_back(std::move(picked));
  }
  options.overrides.clear();  // applied per variant above
  for (const auto& o : options.only)
    if (o != "headline" && o != "controls" && o != "levers" && !known.count(o)) {
      std::fprintf(stderr, "%s: --only %s: no such group or variant\n", argv[0], o.c_str());
      return 2;
    }

  std::vector<TrialRecord> records;
  const int status = atl::bench::run_bench(options, variants, records);
  const std::string table = comparison_table(chosen, records);
  std::fputs(table.c_str(), stdout);
  const std::string path = options.out + "/comparison.txt";
  if (atl::write_file_atomic(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(table.data()), table.size()))
          .ok())
    std::printf("comparison written to %s\n", path.c_str());
  return status;
}
