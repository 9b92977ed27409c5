#include "atoll/job.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "atoll/crc32c.h"
#include "atoll/external_model.h"
#include "atoll/mlp.h"
#include "atoll/mnist.h"
#include "atoll/model_file.h"
#include "atoll/module_layout.h"
#include "atoll/rng.h"
#include "atoll/text_corpus.h"
#include "atoll/torchscript_model.h"
#include "atoll/transformer.h"

namespace atl {
namespace {

constexpr int kEvalBatch = 1000;
constexpr int kEvalWindows = 2048;    // text: held-out windows when data.eval_examples = 0
constexpr int kTextEvalBatch = 16;

std::string data_dir(const Topology& t, const std::string& root, const char* fallback) {
  return t.data.dir.empty() ? root + "/" + fallback : t.data.dir;
}

// The first `limit` examples of a set (0: all).
ExampleSet head(ExampleSet set, int limit) {
  if (limit <= 0 || static_cast<size_t>(limit) >= set.size()) return set;
  set.x.resize(static_cast<size_t>(limit) * static_cast<size_t>(set.features));
  set.y.resize(static_cast<size_t>(limit));
  return set;
}

// Inputs and classes of a classifier on `t`'s data (MNIST: 28 x 28 pixels, 10 digits).
int classifier_features(const Topology& t) { return t.data.kind == DataKind::kMnist ? 784 : t.data.features; }
int classifier_classes(const Topology& t) { return t.data.kind == DataKind::kMnist ? 10 : t.data.classes; }

// A missing model file's error says how to write one, and where a relative path is read from.
Status explained(const Status& missing) {
  if (missing.code() != Status::Code::kNotFound) return missing;
  std::error_code ec;
  const std::string cwd = std::filesystem::current_path(ec).string();
  return Status::not_found(std::string(missing.message()) +
                           " (write it with atoll.save_model(module, path) from the module the learners train; a "
                           "relative model.path is read from the folder the syncer runs in, " + cwd + ")");
}

// model.kind = "external": the model file's tensors and values. Errors name the file.
Result<std::unique_ptr<Model>> load_external_model(const std::string& path, const std::vector<std::string>& avg) {
  auto file = load_model_file(path);
  if (!file.ok()) return explained(file.status());
  const std::string description = "external " + (file->description.empty() ? std::string("model") : file->description) +
                                  " from " + path + " (" + std::to_string(file->tensors.size()) +
                                  " tensors, trained by Python learners)";
  auto model = make_external_model(file->tensors, std::move(file->values), avg, description);
  if (!model.ok()) return model.status().with_context(path);
  return model;
}

}  // namespace

std::string default_data_root() {
  const char* env = std::getenv("ATOLL_DATA_DIR");
  return env && *env ? env : "data";
}

Result<std::unique_ptr<Model>> make_model(const Topology& t) {
  ATOLL_RETURN_IF_ERROR(validate(t));
  if (t.model.kind == ModelKind::kTorchScript) {
    TorchScriptConfig c;
    c.path = t.model.path;
    c.avg = t.model.avg;
    c.bytes = t.data.kind == DataKind::kText;
    c.context = t.model.context;
    c.features = classifier_features(t);
    c.classes = classifier_classes(t);
    auto model = load_torchscript_model(c);
    if (!model.ok()) return model.status().with_context("model.path");
    return model;
  }
  if (t.model.kind == ModelKind::kExternal) {
    auto model = load_external_model(t.model.path, t.model.avg);
    if (!model.ok()) return model.status().with_context("model.path");
    return model;
  }
  if (t.model.kind == ModelKind::kTransformer)
    return std::unique_ptr<Model>(std::make_unique<Transformer>(
        TransformerConfig{t.model.layers, t.model.width, t.model.heads, t.model.context, 256}));
  MlpConfig c;
  c.hidden = t.model.hidden;
  c.inputs = classifier_features(t);
  c.classes = classifier_classes(t);
  return std::unique_ptr<Model>(std::make_unique<Mlp>(c));
}

Result<ParamLayout> model_layout(const Topology& t) {
  if (t.model.kind == ModelKind::kExternal) {
    ATOLL_RETURN_IF_ERROR(validate(t));
    auto shapes = load_model_shapes(t.model.path);
    if (!shapes.ok()) return explained(shapes.status()).with_context("model.path");
    auto layout = module_layout(*shapes, t.model.avg);
    if (!layout.ok()) return layout.status().with_context(t.model.path).with_context("model.path");
    return layout;
  }
  auto model = make_model(t);
  if (!model.ok()) return model.status();
  return (*model)->layout();
}

Result<std::vector<Fragment>> plan_fragments(const ParamLayout& layout, const Topology& t) {
  // More fragments than tensors would leave some empty: then one fragment per
  // tensor, so that the default fits any model.
  const int count = t.mode == Mode::kDecoupled ? std::min(t.outer.fragments, layout.count()) : 1;
  if (t.syncer.shards > count)
    return Status::invalid_argument("syncer.shards (" + std::to_string(t.syncer.shards) + ") exceeds the " +
                                    std::to_string(count) + " fragments of the model (" +
                                    std::to_string(layout.count()) + " tensors): a shard would hold none");
  if (count % t.syncer.shards != 0)  // outer.fragments was a multiple of it, but the model has fewer tensors
    return Status::invalid_argument("syncer.shards = " + std::to_string(t.syncer.shards) + " does not divide the " +
                                    std::to_string(count) + " fragments of the model (" +
                                    std::to_string(layout.count()) +
                                    " tensors, so no more fragments than that): the shards would hold unequal parts");
  auto fragments = plan_fragments(layout, count, t.syncer.shards);
  if (!fragments.ok()) return fragments.status().with_context("outer.fragments");
  for (Fragment& f : *fragments) {
    if (t.outer.force_avg) force_rule(f, MergeRule::kAvg);
    if (t.outer.force_rda) force_rule(f, MergeRule::kRda);
  }
  return fragments;
}

std::vector<float> initial_parameters(const Model& model, const Topology& t) {
  std::vector<float> params(model.layout().size());
  model.init(params, Rng::derive(t.seed, 0x1417));  // a stream of its own, apart from data seeds
  return params;
}

uint32_t parameters_crc(std::span<const float> params) {
  return crc32c(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(params.data()), params.size_bytes()));
}

ExampleSet make_clusters(int features, int classes, int count, uint64_t seed) {
  Rng rng(seed);
  const auto f = static_cast<size_t>(features);
  std::vector<float> centres(static_cast<size_t>(classes) * f);
  // Two centres lie about 3 noise standard deviations apart: separable, but
  // not at once, so a run's loss and accuracy have somewhere to go.
  const double spread = 3.0 / std::sqrt(2.0 * features);
  for (auto& c : centres) c = static_cast<float>(spread * rng.normal());
  ExampleSet set;
  set.features = features;
  set.classes = classes;
  set.x.reserve(static_cast<size_t>(count) * f);
  for (int i = 0; i < count; ++i) {
    const auto label = static_cast<size_t>(i % classes);
    for (size_t k = 0; k < f; ++k) set.x.push_back(centres[label * f + k] + static_cast<float>(rng.normal()));
    set.y.push_back(static_cast<int32_t>(label));
  }
  return set;
}

Result<std::shared_ptr<const Job>> Job::load(const Topology& t, const std::string& data_root) {
  ATOLL_RETURN_IF_ERROR(validate(t));
  std::shared_ptr<Job> job(new Job());
  job->topology_ = t;
  // One shard per learner slot, open ones included: a slot is held by one
  // member at a time, so no two members train the same bytes at once.
  const int m = static_cast<int>(learner_slots(t));
  if (t.model.kind == ModelKind::kExternal)  // the learners bring their own data, and evaluate on their own
    return without_data(t, "the learners' own (model.kind = \"external\")");
  switch (t.data.kind) {
    case DataKind::kMnist: {
      auto mnist = load_mnist(data_dir(t, data_root, "mnist"));
      if (!mnist.ok()) {
        Status st = mnist.status().with_context("data.kind = \"mnist\"");
        if (st.code() != Status::Code::kNotFound) return st;
        return Status::not_found(std::string(st.message()) +
                                 " (run scripts/setup, or point --data or ATOLL_DATA_DIR at its data folder)");
      }
      job->examples_ = std::make_shared<const ExampleSet>(to_examples(mnist->train));
      job->eval_ = example_batches(head(to_examples(mnist->test), t.data.eval_examples), kEvalBatch);
      job->description_ = "MNIST: " + std::to_string(mnist->train.count) + " training / " +
                          std::to_string(mnist->test.count) + " held-out examples";
      break;
    }
    case DataKind::kSynthetic: {
      const int held = std::max(t.data.classes, t.data.examples / 4);
      ExampleSet all = make_clusters(t.data.features, t.data.classes, t.data.examples + held,
                                     Rng::derive(t.seed, 0xda7a));
      ExampleSet train, test;
      train.features = test.features = all.features;
      train.classes = test.classes = all.classes;
      const auto split = static_cast<size_t>(t.data.examples) * static_cast<size_t>(all.features);
      train.x.assign(all.x.begin(), all.x.begin() + static_cast<ptrdiff_t>(split));
      train.y.assign(all.y.begin(), all.y.begin() + t.data.examples);
      test.x.assign(all.x.begin() + static_cast<ptrdiff_t>(split), all.x.end());
      test.y.assign(all.y.begin() + t.data.examples, all.y.end());
      job->examples_ = std::make_shared<const ExampleSet>(std::move(train));
      job->eval_ = example_batches(head(std::move(test), t.data.eval_examples), kEvalBatch);
      job->description_ = "synthetic clusters: " + std::to_string(t.data.examples) + " training / " +
                          std::to_string(held) + " held-out examples of " + std::to_string(t.data.features) +
                          " features, " + std::to_string(t.data.classes) + " classes";
      break;
    }
    case DataKind::kText: {
      const std::string dir = data_dir(t, data_root, "sotu");
      auto corpus = read_text_corpus(dir, TextCorpusOptions{".txt", t.data.holdout_every});
      if (!corpus.ok()) {
        Status st = corpus.status().with_context("data.kind = \"text\"");
        if (st.code() != Status::Code::kNotFound) return st;
        return Status::not_found(std::string(st.message()) +
                                 " (run scripts/setup, or point --data or ATOLL_DATA_DIR at its data folder)");
      }
      const auto shards = split_documents(corpus->train, m, Rng::derive(t.seed, 0x5a4d));
      for (const auto& shard : shards) {
        if (shard.size() <= static_cast<size_t>(t.model.context) + 1)
          return Status::invalid_argument(dir + ": a learner's shard has " + std::to_string(shard.size()) +
                                          " bytes, not enough for one window of model.context + 1");
        job->text_.push_back(std::make_shared<const std::vector<uint8_t>>(shard));
      }
      const auto heldout = concatenate(corpus->heldout);
      const int windows = t.data.eval_examples > 0 ? t.data.eval_examples : kEvalWindows;
      job->eval_ = text_batches(heldout, t.model.context, kTextEvalBatch, static_cast<size_t>(windows));
      job->description_ = "State of the Union text: " + std::to_string(corpus->train.size()) + " speeches (" +
                          std::to_string(corpus->train_bytes()) + " bytes) to train, " +
                          std::to_string(corpus->heldout.size()) + " held out (" +
                          std::to_string(corpus->heldout_bytes()) + " bytes; " + std::to_string(windows) +
                          " windows evaluated)";
      return std::shared_ptr<const Job>(std::move(job));
    }
  }
  if (job->examples_->size() < static_cast<size_t>(m))
    return Status::invalid_argument("data has " + std::to_string(job->examples_->size()) +
                                    " training examples, fewer than the " + std::to_string(m) + " learner slots");
  job->shards_ = split_indices(job->examples_->size(), m, Rng::derive(t.seed, 0x5a4d));
  return std::shared_ptr<const Job>(std::move(job));
}

std::shared_ptr<const Job> Job::without_data(const Topology& t, std::string description) {
  std::shared_ptr<Job> job(new Job());
  job->topology_ = t;
  job->description_ = std::move(description);
  return job;
}

std::unique_ptr<DataSource> Job::make_stream(uint32_t learner, uint64_t incarnation) const {
  const uint64_t seed = Rng::derive(Rng::derive(topology_.seed, learner), incarnation);
  if (!text_.empty()) return std::make_unique<TextStream>(text_.at(learner), topology_.model.context, seed);
  return std::make_unique<ExampleStream>(examples_, shards_.at(learner), seed);
}

}  // namespace atl
