// `atoll validate FILE`: a topology's keys, types and ranges, the fragment
// plan its model gives, and the data it reads, checked without training.
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

// The plan a topology gives its model: "mlp 784-256-10, 2 fragments (200704 rda, 2826 avg)".
Result<std::string> describe_plan(const Topology& t) {
  auto model = make_model(t);
  if (!model.ok()) return model.status();
  auto fragments = plan_fragments((*model)->layout(), t);
  if (!fragments.ok()) return fragments.status();
  const size_t count = fragments->size();
  std::string s = (*model)->describe() + " (" + std::to_string((*model)->layout().size()) + " parameters), " +
                  std::to_string(count) + " fragment" + (count > 1 ? "s" : "") + ":";
  for (const auto& f : *fragments) s += " " + std::to_string(f.size) + " " + merge_rule_name(f.rule);
  return s + "; merged by " + describe_merge_rules((*model)->layout(), *fragments);
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
