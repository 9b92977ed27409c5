// Job: the model and the data a topology describes.
//
// make_model() needs only the topology (the syncer has no data). A Job holds
// the data, loaded once per process and shared read-only by every learner in
// it: each learner's shard, and the held-out batches every evaluation uses.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "atoll/batch.h"
#include "atoll/data_source.h"
#include "atoll/example_set.h"
#include "atoll/fragments.h"
#include "atoll/model.h"
#include "atoll/status.h"
#include "atoll/topology.h"

namespace atl {

// A fresh model object (with its own scratch memory) for the topology's
// [model] and the input and output sizes of its [data].
Result<std::unique_ptr<Model>> make_model(const Topology& topology);
// Its layout alone: for an external model, without copying its values (a
// topology's check of a 100M-parameter model costs a read, not three copies).
Result<ParamLayout> model_layout(const Topology& topology);

// The fragments a topology gives its model: outer.fragments in decoupled
// mode, or one per tensor when the model has fewer tensors than that; one
// (the whole model) in dp and elastic_dp. Each merges by its own rule
// (fragments.h) unless outer.force_avg or outer.force_rda sets every one.
// Errors name the key. Everything that counts fragments counts these, never
// outer.fragments itself.
Result<std::vector<Fragment>> plan_fragments(const ParamLayout& layout, const Topology& topology);

// The initial global parameters: the model's initialization from the topology's seed.
std::vector<float> initial_parameters(const Model& model, const Topology& topology);
// Their CRC32C: a learner and the syncer compare it before a welcome leaves them out.
uint32_t parameters_crc(std::span<const float> params);

// Gaussian clusters: `classes` centres in `features` dimensions, `count`
// examples, labels balanced; the same seed gives the same set.
ExampleSet make_clusters(int features, int classes, int count, uint64_t seed);

// Where scripts/setup unpacked the data sets: $ATOLL_DATA_DIR, else ./data.
std::string default_data_root();

class Job {
 public:
  // Loads (or makes) the data. `data_root` is where scripts/setup unpacked the
  // data sets; a topology's data.dir overrides it. Errors name the file.
  static Result<std::shared_ptr<const Job>> load(const Topology& topology, const std::string& data_root);
  // No data, no held-out batches: for learners that bring their own (trained
  // outside atoll), and for a syncer whose model atoll does not run.
  static std::shared_ptr<const Job> without_data(const Topology& topology, std::string description);

  const Topology& topology() const { return topology_; }
  // "MNIST: 60000 training / 10000 held-out examples"
  const std::string& description() const { return description_; }

  // Learner `learner`'s training stream: its slot's own shard (one per
  // learner slot, atoll/topology.h), seeded by learner and incarnation (a
  // restarted learner, or the next member of an open slot, draws a fresh
  // order from the same shard). REQUIRES: learner < learner_slots(), and a
  // model that is not external (its learners bring their own data).
  std::unique_ptr<DataSource> make_stream(uint32_t learner, uint64_t incarnation) const;

  // The held-out batches every evaluation uses (none for an external model).
  const std::vector<Batch>& eval_batches() const { return eval_; }

 private:
  Job() = default;

  Topology topology_;
  std::string description_;
  std::shared_ptr<const ExampleSet> examples_;                    // classifiers
  std::vector<std::vector<uint32_t>> shards_;                     // classifiers: per learner
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> text_; // language models: per learner
  std::vector<Batch> eval_;
};

}  // namespace atl
