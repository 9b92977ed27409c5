// `atoll assemble`: the final model of a run whose syncer shards ran in
// processes of their own, put together from each shard's final checkpoint
// (atoll/assembled_model.h), evaluated on the held-out data, and saved; with
// the run's report folded from the figures those checkpoints carry
// (atoll/assembled_report.h).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "atoll/assembled_model.h"
#include "atoll/assembled_report.h"
#include "atoll/checkpoint.h"
#include "atoll/evaluation.h"
#include "atoll/job.h"
#include "atoll/log.h"
#include "atoll/model_file.h"
#include "atoll/run.h"
#include "atoll/run_view.h"
#include "atoll/topology_file.h"
#include "command.h"
#include "output_file.h"

namespace atl::cli {
namespace {

struct AssembleArgs {
  std::string file, run_name, data, report = output("model-report.json"), save_model;
  std::vector<std::string> sets;
  std::string sample_prompt = EvaluationOptions{}.sample_prompt;
};

// Shard i's checkpoint folder, opened (and locked: no syncer writes it now).
Result<std::unique_ptr<CheckpointStore>> open_shard_folder(const Topology& t, const std::string& run_name,
                                                           uint32_t shard) {
  const std::string folder = checkpoint_folder(t, run_name, shard);
  if (!std::filesystem::is_directory(folder))  // opening a store would make it
    return Status::not_found("no checkpoint folder " + folder + " (is checkpoint.dir the run's, and --run-name?)");
  if (t.syncer.shards == 1 && std::filesystem::is_directory(folder + "/shard-0"))
    return Status::invalid_argument(folder + " holds the folders of a syncer in shards (shard-0, ...): give the "
                                    "run's shard count, --set syncer.shards=S");
  auto store = CheckpointStore::open(folder, t.checkpoint.keep);
  if (!store.ok()) return store.status().with_context("shard " + std::to_string(shard));
  return std::move(*store);
}

// The newest good checkpoint in a shard's folder (files skipped are logged with why).
Result<CheckpointState> latest_checkpoint(const CheckpointStore& store, uint64_t fingerprint) {
  auto latest = store.load_latest(fingerprint, [](const std::string& why) { log_warn(why); });
  if (!latest.ok()) return latest.status();
  if (!*latest)
    return Status::not_found("no checkpoint of this model in " + store.dir() +
                             " (did the syncer run with this topology, and end?)");
  return std::move(**latest);
}

// Each shard's part of the run as its checkpoint holds it: its versions and
// size, and the figures it counted (`figured` false when one has none, from
// before syncers recorded them, or none that read).
std::vector<ShardFigures> shard_figures(const std::vector<CheckpointState>& by_shard, const std::vector<Fragment>& plan,
                                        bool& figured) {
  std::vector<ShardFigures> shards;
  figured = true;
  for (uint32_t s = 0; s < by_shard.size(); ++s) {
    ShardFigures sf;
    sf.shard = s;
    sf.versions.assign(plan.size(), 0);
    for (const auto& f : by_shard[s].fragments) {
      sf.versions[f.fragment] = f.version;
      sf.parameters += f.values.size();
      ++sf.fragments;
    }
    sf.figures.stats.rounds = by_shard[s].rounds;
    if (by_shard[s].figures.empty()) {
      figured = false;
    } else if (auto figures = decode_figures(by_shard[s].figures); !figures.ok()) {
      log_warn("shard " + std::to_string(s) + "'s checkpoint: " + figures.status().to_string());
      figured = false;
    } else {
      sf.figures = std::move(*figures);
    }
    shards.push_back(std::move(sf));
  }
  return shards;
}

// A report of the model alone, with each shard's rounds and versions: what
// checkpoints without figures allow.
Report model_only_report(const Topology& t, const std::vector<ShardFigures>& shards) {
  log_warn("a shard's checkpoint holds no figures of the run that read (written by an older atoll?): the report "
           "holds the model's figures and each shard's rounds and versions only");
  Report r;
  r.mode = mode_name(t.mode);
  for (const auto& s : shards) {
    r.rounds += s.figures.stats.rounds;
    SyncerSample sample;
    sample.shard = s.shard;
    sample.parameters = s.parameters;
    sample.fragments = s.fragments;
    sample.stats = s.figures.stats;
    sample.versions = s.versions;
    r.shards.push_back(shard_report(sample, static_cast<int>(shards.size())));
  }
  return r;
}

// The run's curve: point k is the model put together from every shard's
// k-th point (written beside its checkpoints with `atoll syncer --curve`),
// on the run's clock; a point some shard lacks is left out, with a warning.
Result<std::vector<Report::CurvePoint>> curve_of(const Topology& t, const std::vector<const CheckpointStore*>& stores,
                                                 const std::vector<ShardFigures>& shards, const ParamLayout& layout,
                                                 const std::vector<Fragment>& plan, const Job& job) {
  std::vector<Report::CurvePoint> curve;
  const bool text = t.data.kind == DataKind::kText;
  for (uint32_t k = 0;; ++k) {
    std::vector<CheckpointState> parts;
    for (const CheckpointStore* store : stores) {
      auto point = store->load_point(k, layout.fingerprint());
      if (!point.ok()) return point.status();
      if (*point) parts.push_back(std::move(**point));
    }
    if (parts.empty()) return curve;
    if (parts.size() < stores.size()) {
      log_warn("point " + std::to_string(k) + " of the curve is left out: " + std::to_string(parts.size()) + " of " +
               std::to_string(stores.size()) + " shards wrote it");
      continue;
    }
    auto model = assemble_from_checkpoints(parts, layout.fingerprint(), plan, layout.size());
    if (!model.ok()) return model.status().with_context("point " + std::to_string(k) + " of the curve");
    double seconds = 0.0;
    uint64_t tokens = 0;
    for (const auto& part : parts) {
      auto figures = decode_figures(part.figures);
      if (!figures.ok()) return figures.status().with_context("point " + std::to_string(k) + " of the curve");
      seconds = std::max(seconds, run_seconds(*figures, shards));
      tokens = std::max(tokens, figures->tokens);
    }
    auto sums = evaluate_held_out(t, job, model->theta);
    if (!sums.ok()) return sums.status().with_context("held-out evaluation of point " + std::to_string(k));
    curve.push_back(Report::CurvePoint::of(seconds, tokens, *sums, text));
  }
}

int assemble_command(const AssembleArgs& a) {
  auto t = load_topology(a.file, a.sets);
  if (!t.ok()) return fail(t.status());
  if (t->checkpoint.dir.empty())
    return fail(Status::invalid_argument("checkpoint.dir is empty: give the run's (--set checkpoint.dir=DIR)"));
  auto model = make_model(*t);
  if (!model.ok()) return fail(model.status());
  const ParamLayout& layout = (*model)->layout();
  auto plan = plan_fragments(layout, *t);
  if (!plan.ok()) return fail(plan.status());
  std::vector<std::unique_ptr<CheckpointStore>> stores;
  std::vector<CheckpointState> by_shard;
  for (uint32_t s = 0; s < static_cast<uint32_t>(t->syncer.shards); ++s) {
    auto store = open_shard_folder(*t, a.run_name, s);
    if (!store.ok()) return fail(store.status());
    auto c = latest_checkpoint(**store, layout.fingerprint());
    if (!c.ok()) return fail(c.status());
    stores.push_back(std::move(*store));
    by_shard.push_back(std::move(*c));
  }
  auto assembled = assemble_from_checkpoints(by_shard, layout.fingerprint(), *plan, layout.size());
  if (!assembled.ok()) return fail(assembled.status());
  auto job = Job::load(*t, a.data.empty() ? default_data_root() : a.data);
  if (!job.ok()) return fail(job.status().with_context("data"));
  auto sums = evaluate_held_out(*t, **job, assembled->theta);
  if (!sums.ok()) return fail(sums.status().with_context("held-out evaluation"));

  bool figured = false;
  const std::vector<ShardFigures> shards = shard_figures(by_shard, *plan, figured);
  Report r = figured ? assembled_report(*t, shards) : model_only_report(*t, shards);
  r.model = (*model)->describe();
  r.data = (*job)->description();
  r.final_versions = assembled->versions;
  r.set_final_eval(*sums, **job);
  if (figured) {
    std::vector<const CheckpointStore*> folders;
    for (const auto& s : stores) folders.push_back(s.get());
    auto curve = curve_of(*t, folders, shards, layout, *plan, **job);
    if (curve.ok()) r.curve = std::move(*curve);
    else log_warn("no curve: " + curve.status().to_string());
    if (!r.curve.empty()) r.end_curve();
  }
  EvaluationOptions eo;
  eo.sample_prompt = a.sample_prompt;
  r.sample = sample_text(**model, assembled->theta, eo, t->seed);

  std::printf("assembled %s from the final checkpoints of run %s's %zu syncer shard%s\n", r.model.c_str(),
              a.run_name.c_str(), by_shard.size(), by_shard.size() == 1 ? "" : "s");
  std::printf("%s", r.to_table().c_str());
  if (!r.curve.empty()) {
    std::printf("  curve (seconds, tokens, held-out loss):");
    for (const auto& c : r.curve) std::printf(" (%.1f, %llu, %.4f)", c.seconds, static_cast<unsigned long long>(c.tokens), c.loss);
    std::printf("\n");
  }
  if (!a.report.empty() && !write_output(a.report, r.to_json(), "report")) return kExitFailed;
  if (!a.save_model.empty()) {
    ModelFile file{shapes_of(layout), assembled->theta, r.model + " assembled from run " + a.run_name};
    if (Status s = save_model_file(a.save_model, file); !s.ok()) return fail(s);
    std::printf("the final model is saved in %s\n", a.save_model.c_str());
  }
  return kExitDone;
}

}  // namespace

void add_assemble_command(CLI::App& app, int& status) {
  auto a = std::make_shared<AssembleArgs>();
  auto* cmd = app.add_subcommand(
      "assemble", "Put a run's final model together from its syncer shards' checkpoints, evaluate and save it, and report the run");
  cmd->add_option("file", a->file, "The run's topology file (TOML); none: the built-in default");
  add_set_option(cmd, a->sets);
  cmd->add_option("--run-name", a->run_name, "The run's name: its checkpoints are in <checkpoint.dir>/<run-name>")
      ->required();
  cmd->add_option("--save-model", a->save_model,
                  "Write the assembled model here as a model file (atoll.load_model() reads it)");
  add_report_option(cmd, a->report);
  add_sample_prompt_option(cmd, a->sample_prompt);
  add_data_option(cmd, a->data);
  cmd->footer(
      "\nA syncer in S shards run as S processes (atoll syncer --shard i/S) never holds the whole\n"
      "model: each shard writes a checkpoint of its fragments when the run ends. Once every shard\n"
      "has ended, this reads the newest good checkpoint of each (<checkpoint.dir>/<run-name>/shard-i;\n"
      "without shards, the run's folder), checks that they belong to this topology's model and\n"
      "fragment plan and together hold every fragment once, puts the model together, evaluates it\n"
      "on the held-out data (held-out loss, and bits per byte or accuracy) and writes the run's report\n"
      "and, with --save-model, the model file. The report is the one a process holding every shard\n"
      "would write: the model's figures, and the training figures (tokens, goodput, rounds, bytes,\n"
      "merges per learner and per shard) from those each checkpoint carries (a shard restarted in a\n"
      "new process goes on from its checkpoint's). Shards run with --curve N wrote the model's points\n"
      "beside their checkpoints: each point every shard has is put together and evaluated, for the\n"
      "report's curve of quality against time and tokens. The shards' folders must be readable here (a shared\n"
      "file system, or copied together); a folder a running syncer holds is refused (its lock).\n"
      "Example:\n"
      "  atoll assemble topology.toml --set checkpoint.dir=/shared/checkpoints --run-name exp1 \\\n"
      "    --report exp1-model.json --save-model exp1.atoll-model");
  cmd->callback([a, &status] { status = assemble_command(*a); });
}

}  // namespace atl::cli
