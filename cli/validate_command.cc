// `atoll validate FILE`: a topology's keys, types and ranges, the fragment
// plan its model gives, and the data it reads, checked without training.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "atoll/fragments.h"
#include "atoll/job.h"
#include "atoll/topology_file.h"
#include "command.h"

namespace atl::cli {
namespace {

struct ValidateArgs {
  std::string file, data;
  std::vector<std::string> sets;
};

// The plan a topology gives its model: "mlp 784-256-10 (203530 parameters), 2 fragments: 200704 rda
// 2826 avg", then the tensors split into blocks, what each syncer shard holds and the merge rules.
Result<std::string> describe_plan(const Topology& t) {
  auto model = make_model(t);
  if (!model.ok()) return model.status();
  const ParamLayout& layout = (*model)->layout();
  auto fragments = plan_fragments(layout, t);
  if (!fragments.ok()) return fragments.status();
  const size_t count = fragments->size();
  std::string s = (*model)->describe() + " (" + std::to_string(layout.size()) + " parameters), " +
                  std::to_string(count) + " fragment" + (count > 1 ? "s" : "") + ":";
  for (const auto& f : *fragments) {
    s += " " + std::to_string(f.size) + " " + merge_rule_name(f.rule);
    if (const size_t avg = averaged_floats(f); f.rule == MergeRule::kRda && avg > 0)
      s += " (" + std::to_string(avg) + " avg)";  // a piece of a head beside the body: averaged alone
  }
  if (const auto splits = describe_splits(layout, *fragments); !splits.empty()) s += " (" + splits + ")";
  if (t.syncer.shards > 1) {  // each shard's part, and how far the most uneven one is from an equal share
    const auto held = shard_parameters(*fragments, t.syncer.shards);
    const double share = static_cast<double>(layout.size()) / static_cast<double>(held.size());
    double off = 0;
    s += "; " + std::to_string(held.size()) + " shards hold";
    for (size_t i = 0; i < held.size(); ++i) {
      s += (i ? ", " : " ") + std::to_string(held[i]);
      off = std::max(off, std::abs(static_cast<double>(held[i]) - share) / share);
    }
    char spread[64];
    std::snprintf(spread, sizeof spread, " parameters (at most %.1f%% off an equal share)", 100 * off);
    s += spread;
  }
  return s + "; merged by " + describe_merge_rules(layout, *fragments);
}

int validate_command(const ValidateArgs& a) {
  auto t = load_topology(a.file, a.sets);
  if (!t.ok()) return fail(t.status());
  auto plan = describe_plan(*t);
  if (!plan.ok()) return fail(plan.status().with_context(a.file));
  auto job = Job::load(*t, a.data.empty() ? default_data_root() : a.data);  // reads and checks it all
  if (!job.ok()) return fail(job.status().with_context(a.file + ": data"));
  std::printf("%s: ok: %s, %zu learners, %s; data: %s\n", a.file.c_str(), mode_name(t->mode), t->learners.size(),
              plan->c_str(), (*job)->description().c_str());
  return 0;
}

}  // namespace

void add_validate_command(CLI::App& app, int& status) {
  auto a = std::make_shared<ValidateArgs>();
  auto* val = app.add_subcommand("validate",
                                 "Check a topology file: keys, types, ranges, the fragment plan and the data it reads");
  val->add_option("file", a->file, "Topology file (TOML)")->required();
  add_set_option(val, a->sets);
  add_data_option(val, a->data);
  val->callback([a, &status] { status = validate_command(*a); });
}

}  // namespace atl::cli
