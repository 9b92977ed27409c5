// Topology: every knob of a run, with its default.
//
// The field groups match the tables of a topology file ([model], [data],
// [inner], [outer], [[learners]]) and validate() names problems by those keys
// ("outer.quorum"). The same struct travels to learners inside a Welcome
// (schema/topology.capnp mirrors it field by field).
//
// Units: tokens are training examples for a classifier and predicted bytes for
// a language model; seconds are wall-clock; *_steps are a learner's inner steps.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "atoll/codec_kind.h"
#include "atoll/optimizer_config.h"
#include "atoll/status.h"

namespace atl {

// Values are part of the wire format: never renumber.
enum class Mode : uint8_t {
  kDecoupled = 0,  // Decoupled DiLoCo: learners never wait for each other
  kDp = 1,         // synchronous data-parallel: all learners every step
  kElasticDp = 2,  // data-parallel that shrinks to the live learners after a failure
};
enum class ModelKind : uint8_t {
  kMlp = 0,
  kTransformer = 1,
  kTorchScript = 2,  // a PyTorch module exported as TorchScript (torchscript_model.h)
  // A model atoll does not run: Python learners (atoll.Learner) train it in
  // their own loops; model.path names its model file (atoll/external_model.h).
  kExternal = 3,
};
enum class DataKind : uint8_t {
  kMnist = 0,      // data/mnist, MLP classifier
  kText = 1,       // a folder of documents (State of the Union), byte-level LM
  kSynthetic = 2,  // Gaussian clusters made from the seed: no files needed
};
// How the syncer weighs learners' outer gradients in a merge.
enum class Weighting : uint8_t {
  kTokens = 0,   // tokens^2 / steps (docs/design.md section 5)
  kUniform = 1,  // every learner with progress counts 1 (for equivalence tests)
};
// How the learners of one process share its compute pool (atoll/step_pacer.h).
enum class Hardware : uint8_t {
  // A step takes the wall time it gets: when a learner dies, the others take
  // its share of the cores and speed up.
  kShared = 0,
  // Each learner owns a fixed share of the pool, as an island owns its chips:
  // its step takes the calibrated step time / speed and no less, so a dead
  // learner's compute is lost to the run (fair chaos comparisons on one machine).
  kDedicated = 1,
};

const char* mode_name(Mode mode);            // "decoupled", "dp", "elastic_dp"
const char* model_kind_name(ModelKind kind); // "mlp", "transformer", "torchscript"
const char* data_kind_name(DataKind kind);   // "mnist", "text", "synthetic"
const char* weighting_name(Weighting w);     // "tokens", "uniform"
const char* hardware_name(Hardware h);       // "shared", "dedicated"
Result<Mode> parse_mode(std::string_view name);
Result<ModelKind> parse_model_kind(std::string_view name);
Result<DataKind> parse_data_kind(std::string_view name);
Result<Weighting> parse_weighting(std::string_view name);
Result<Hardware> parse_hardware(std::string_view name);

struct LearnerSpec {
  // Relative compute speed: 0.5 takes twice as long per inner step as 1.0.
  double speed = 1.0;
  // Examples (classifier) or windows of model.context bytes (language model) per inner step.
  int batch_size = 8;

  friend bool operator==(const LearnerSpec&, const LearnerSpec&) = default;
};

struct ModelSpec {
  ModelKind kind = ModelKind::kTransformer;
  std::vector<int> hidden = {256};  // mlp: hidden layer widths
  int layers = 4;                   // transformer: blocks
  int width = 128;                  // transformer: model width
  int heads = 4;                    // transformer: attention heads (divides width)
  int context = 128;                // transformer, torchscript on text: bytes of context
  std::string path;                 // torchscript: the module file (torch.jit.save); external: the model
                                    // file (atoll.save_model); relative to the cwd
  // torchscript, external: tensors whose names match one of these globs (fnmatch) are
  // merged by weighted mean (AVG), the others by RDA. The default catches
  // embeddings and output heads by the names of GPT-2 and nanoGPT
  // (transformer.wte, wpe, lm_head), LLaMA (tok_embeddings, embed_tokens,
  // output, lm_head), BERT (*embeddings*), the PyTorch examples (encoder,
  // decoder) and a top-level head.
  std::vector<std::string> avg = {"*emb*",  "*wte.*",        "*wpe.*",          "*lm_head.*",
                                  "head.*", "output.weight", "encoder.weight", "decoder.weight"};

  friend bool operator==(const ModelSpec&, const ModelSpec&) = default;
};

struct DataSpec {
  DataKind kind = DataKind::kText;
  std::string dir;         // empty: <data root>/mnist or <data root>/sotu
  int holdout_every = 10;  // text: every n-th document is held out
  int eval_examples = 0;   // examples evaluated (0: the whole held-out set); text: windows spread over
                           // every held-out document (0: 2048)
  int features = 32;       // synthetic: inputs per example
  int classes = 10;        // synthetic: clusters (labels)
  int examples = 8192;     // synthetic: training examples (plus a quarter as many held out)

  friend bool operator==(const DataSpec&, const DataSpec&) = default;
};

// The outer loop: fragments, rounds and the syncer's optimizer (docs/design.md section 5).
// dp and elastic_dp ignore fragments, sync_every and the codecs: every step,
// every learner sends its fp32 gradient and gets the fp32 parameters back.
struct OuterSpec {
  int fragments = 12;             // P
  // Streaming rounds: the fragments fall due `stream` at a time (consecutive
  // ids) and go back to back, each a round of its own, so that one
  // fragment's broadcast comes down a learner's link while the next one's push
  // goes up: a group crosses about once plus one fragment, not twice
  // (docs/design.md, "Streaming rounds"). 1: each fragment on its own step.
  int stream = 1;
  int sync_every = 12;            // H: a learner pushes a fragment every H of its inner steps
  // Post-local start: a fragment's first rounds come every sync_every_start
  // steps, and the interval grows linearly to sync_every over its first
  // sync_ramp_rounds rounds (0: H from the start). Early on, replicas drift
  // apart fastest; later, syncing less often costs little.
  int sync_every_start = 0;
  int sync_ramp_rounds = 0;
  int overlap = 2;                // tau: a broadcast may arrive up to tau steps after a push
  int quorum = 1;                 // K: distinct learners a round waits for
  double grace_gamma = 1.0;       // grace = clamp(gamma*(tau*step - to_quorum - sync), 0, cap)
  double grace_cap_steps = 2.0;   // cap, in step times of the slowest live learner
  int max_staleness = 1;          // pushes based on a version older than current - this are refused
  // Outer lr 0.5 with momentum 0.6, tuned at the parity headline's budget
  // (docs/benchmarks.md, "Fair tuning"): lr 0.7 gave 0.02 bits per byte more
  // over 3 seeds x 2 runs. At H = 12 momentum amplifies the step (about
  // lr/(1-mu)); 0.8 cost 0.05 to 0.08 bits per byte.
  NesterovConfig nesterov = {0.5f, 0.6f};
  Codec push_codec = Codec::kInt4;
  uint32_t push_block = 64;       // values per quantization step
  // SparseLoCo (arXiv 2508.15706): a push keeps this share of each block of
  // push_block values, the largest in magnitude, and sends the others as
  // zeros (1: all of them). The wire format stays the push codec's, dense.
  float push_density = 1.0f;
  // Error feedback on pushes: what the push's codec and density left out
  // stays in the learner's carried progress and goes with its next push (a
  // merged learner carries from what the syncer got, not from what it had).
  // Needs carry_progress.
  bool push_error_feedback = false;
  // Eager updates (arXiv 2502.12996): on a version that merged its push, a
  // learner keeps its progress since that push at the share the syncer's next
  // step would give it, outer lr x (1 + momentum) / the learners merged,
  // instead of whole; its next push still sends that progress whole. Needs
  // carry_progress (which keeps the progress at share 1).
  bool eager_updates = false;
  // fp32 and bf16 broadcasts carry a fragment's values. int8, int4 and int2
  // carry the quantized difference to the copy the learners hold, in blocks
  // of broadcast_block values; the syncer tracks that copy, so what one
  // broadcast rounds away travels with the next (error feedback), and the
  // copy never drifts from the global parameters.
  // int4 with error feedback: 2.3 times fewer bytes than bf16, and no worse
  // at 4M bytes (2.061 against 2.107 bits per byte, one seed).
  Codec broadcast_codec = Codec::kInt4;
  uint32_t broadcast_block = 64;
  float blend_alpha = 0.0f;       // on a broadcast: theta <- alpha*theta + (1-alpha)*global
  bool barrier = false;           // a learner waits for the broadcast of what it pushed
  Weighting weighting = Weighting::kTokens;
  bool force_avg = false;         // merge every fragment by weighted mean (no RDA)
  bool force_rda = false;         // merge every fragment by RDA (embeddings and heads too)
  double reconfigure_seconds = 1.0;  // elastic_dp: from a learner's failure to the group shrinking
  // When the run ends (budget, time limit, stop), every fragment gets one last
  // round that waits for every live learner, so that no counted token is
  // missing from the final model. Learners train no more once pulled for it.
  bool final_flush = true;
  // On a broadcast, a learner keeps the progress on the fragment that the new
  // version does not contain (its steps since its merged push, or all of them
  // since its base when it was not merged) on top of the new global values,
  // instead of overwriting it. Excludes blend_alpha.
  bool carry_progress = true;
  // Rounds over which a fragment's outer lr ramps linearly up to outer.lr (0: none).
  int lr_warmup_rounds = 0;
  // DyLU (Async Local-SGD, arXiv 2401.09135): a learner's H is sync_every
  // scaled by its speed over the fastest [[learners]] speed, so slow and fast
  // learners fall due at about the same wall time and merge fresh progress.
  bool sync_by_speed = false;

  friend bool operator==(const OuterSpec&, const OuterSpec&) = default;
};

// Durable syncer state (docs/design.md section 6). A run writes into its own subfolder
// of `dir`, so a fresh run never restores another run's state.
struct CheckpointSpec {
  std::string dir = "atoll-out/checkpoints";  // empty: no checkpoints
  int every_rounds = 100;      // write after this many rounds ...
  double every_seconds = 30;   // ... or this much time, whichever comes first
  int keep = 3;                // newest files kept
  // AdamW state in every checkpoint, so that a whole restart resumes warm:
  // dp's optimizer, or (decoupled) one learner's moments, fetched before each
  // write (2 x 4 bytes per parameter in the file, 2 x 2 on the wire).
  bool moments = true;

  friend bool operator==(const CheckpointSpec&, const CheckpointSpec&) = default;
};

// Who may be a learner of the run (docs/design.md section 6, "Membership").
// The [[learners]] are its fixed members, ids 0..M-1, each started by id
// (`atoll learner --id`). Slots M..max_learners-1 are open: a learner that
// joins without an id is given the lowest free one, and leaves it when it
// departs. Each slot owns one data shard, so no two members train the same
// bytes at once.
inline constexpr int kMaxLearnerSlots = 4096;

// The syncer's processes (docs/design.md section 10). With S shards, shard i
// owns the fragments p with shard_of(p, S) == i (fragments.h), every S-th from i: it holds only their global copies,
// merges only their rounds and checkpoints only them.
struct SyncerSpec {
  int shards = 1;  // 1 to outer.fragments

  friend bool operator==(const SyncerSpec&, const SyncerSpec&) = default;
};

struct MembershipSpec {
  int max_learners = 0;  // slots in all; 0: the number of [[learners]] (no open slots)

  friend bool operator==(const MembershipSpec&, const MembershipSpec&) = default;
};

// The defaults are the built-in job of `atoll run`: a byte-level transformer
// on the State of the Union corpus, four learners of heterogeneous speed
// (about 3 minutes on 2 cores). examples/topologies/mnist.toml is the MLP on
// MNIST.
struct Topology {
  Mode mode = Mode::kDecoupled;
  uint64_t seed = 1;
  uint64_t tokens = 4'000'000;  // training budget over all learners (about 3 minutes)
  double seconds = 0.0;         // wall-clock limit; 0: none
  std::vector<LearnerSpec> learners = {{1.0, 8}, {1.0, 8}, {0.7, 8}, {0.5, 8}};
  Hardware hardware = Hardware::kShared;
  // Dedicated hardware: a step's wall time over its measured compute, room
  // for the actors' own work (atoll/step_pacer.h). At least 1.
  double hardware_headroom = 1.15;
  ModelSpec model;
  DataSpec data;
  // lr 3e-3, betas 0.9/0.95, eps 1e-8, weight decay 0.1, 50 warmup steps,
  // then a cosine to 0.1 of lr over the budget: the best of lr 1e-3 to 5e-3
  // at 4M bytes (docs/benchmarks.md, "Model quality").
  AdamWConfig inner = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 50, 0, 0.1f};
  OuterSpec outer;
  CheckpointSpec checkpoint;
  MembershipSpec membership;
  SyncerSpec syncer;

  friend bool operator==(const Topology&, const Topology&) = default;
};

// H for the round that follows `version` of a fragment (outer.sync_every,
// after the ramp from outer.sync_every_start).
int sync_interval(const OuterSpec& outer, uint64_t version);
// H for a learner of `speed`: sync_interval(), scaled by speed over the
// fastest [[learners]] speed when outer.sync_by_speed (DyLU), at least 1.
int sync_interval(const Topology& topology, double speed, uint64_t version);

// Tokens one inner step of a learner of `spec` trains: batch_size examples,
// or batch_size windows of model.context predicted bytes.
int64_t tokens_per_step(const Topology& topology, const LearnerSpec& spec);
int64_t tokens_per_step(const Topology& topology, uint32_t learner);  // a fixed learner's

// Learner slots of the run: the fixed [[learners]] and the open slots above
// them (membership.max_learners). Ids run from 0 to slots - 1.
uint32_t learner_slots(const Topology& topology);
// The spec a learner of slot `id` trains with unless it brings its own: its
// [[learners]] entry, or for an open slot speed 1 and the first entry's batch.
LearnerSpec default_spec(const Topology& topology, uint32_t id);

// Checks every value against its range and the others ("outer.quorum = 5
// exceeds the 4 learners"). Model-dependent checks (fragments vs tensors)
// happen when the model is built.
Status validate(const Topology& topology);

}  // namespace atl
