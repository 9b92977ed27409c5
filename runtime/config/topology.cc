#include "atoll/topology.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace atl {
namespace {

constexpr size_t kMaxHiddenLayers = 256;  // model.hidden: see validate()

template <class E, size_t N>
Result<E> parse_enum(std::string_view what, std::string_view name, const E (&values)[N],
                     const char* (*to_name)(E)) {
  std::string expected;
  for (E v : values) {
    if (name == to_name(v)) return v;
    expected += std::string(expected.empty() ? "" : ", ") + to_name(v);
  }
  return Status::invalid_argument("unknown " + std::string(what) + " '" + std::string(name) +
                                  "' (expected " + expected + ")");
}

// Collects the first problem; each check names its key.
class Checker {
 public:
  template <class T>
  void range(const std::string& key, T value, T lo, T hi) {
    if (!status_.ok() || (value >= lo && value <= hi)) return;
    std::ostringstream os;
    os << key << " = " << value << " is outside [" << lo << ", " << hi << "]";
    status_ = Status::invalid_argument(os.str());
  }
  void require(bool ok, const std::string& message) {
    if (status_.ok() && !ok) status_ = Status::invalid_argument(message);
  }
  void check(const std::string& key, const Status& s) {
    if (status_.ok() && !s.ok()) status_ = Status::invalid_argument(key + ": " + std::string(s.message()));
  }
  Status status() const { return status_; }

 private:
  Status status_;
};

}  // namespace

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kDecoupled: return "decoupled";
    case Mode::kDp: return "dp";
    case Mode::kElasticDp: return "elastic_dp";
  }
  return "unknown";
}
const char* model_kind_name(ModelKind k) {
  switch (k) {
    case ModelKind::kMlp: return "mlp";
    case ModelKind::kTransformer: return "transformer";
    case ModelKind::kTorchScript: return "torchscript";
    case ModelKind::kExternal: return "external";
  }
  return "?";
}
const char* data_kind_name(DataKind k) {
  switch (k) {
    case DataKind::kMnist: return "mnist";
    case DataKind::kText: return "text";
    case DataKind::kSynthetic: return "synthetic";
  }
  return "unknown";
}
const char* weighting_name(Weighting w) { return w == Weighting::kTokens ? "tokens" : "uniform"; }
const char* hardware_name(Hardware h) { return h == Hardware::kShared ? "shared" : "dedicated"; }

Result<Mode> parse_mode(std::string_view name) {
  static constexpr Mode kAll[] = {Mode::kDecoupled, Mode::kDp, Mode::kElasticDp};
  return parse_enum("mode", name, kAll, mode_name);
}
Result<ModelKind> parse_model_kind(std::string_view name) {
  static constexpr ModelKind kAll[] = {ModelKind::kMlp, ModelKind::kTransformer, ModelKind::kTorchScript,
                                         ModelKind::kExternal};
  return parse_enum("model kind", name, kAll, model_kind_name);
}
Result<DataKind> parse_data_kind(std::string_view name) {
  static constexpr DataKind kAll[] = {DataKind::kMnist, DataKind::kText, DataKind::kSynthetic};
  return parse_enum("data kind", name, kAll, data_kind_name);
}
Result<Weighting> parse_weighting(std::string_view name) {
  static constexpr Weighting kAll[] = {Weighting::kTokens, Weighting::kUniform};
  return parse_enum("weighting", name, kAll, weighting_name);
}

Result<Hardware> parse_hardware(std::string_view name) {
  static constexpr Hardware kAll[] = {Hardware::kShared, Hardware::kDedicated};
  return parse_enum("hardware", name, kAll, hardware_name);
}

int sync_interval(const OuterSpec& o, uint64_t version) {
  if (o.sync_every_start <= 0 || o.sync_ramp_rounds <= 0 || version >= static_cast<uint64_t>(o.sync_ramp_rounds))
    return o.sync_every;
  const double f = static_cast<double>(version) / o.sync_ramp_rounds;
  return std::max(1, static_cast<int>(std::lround(o.sync_every_start + f * (o.sync_every - o.sync_every_start))));
}

int sync_interval(const Topology& t, double speed, uint64_t version) {
  const int h = sync_interval(t.outer, version);
  if (!t.outer.sync_by_speed || !(speed > 0.0)) return h;
  double fastest = speed;
  for (const auto& l : t.learners) fastest = std::max(fastest, l.speed);
  return std::max(1, static_cast<int>(std::lround(h * speed / fastest)));
}

int64_t tokens_per_step(const Topology& t, const LearnerSpec& spec) {
  const int64_t batch = spec.batch_size;
  return t.data.kind == DataKind::kText ? batch * t.model.context : batch;
}

int64_t tokens_per_step(const Topology& t, uint32_t learner) { return tokens_per_step(t, t.learners[learner]); }

uint32_t learner_slots(const Topology& t) {
  return static_cast<uint32_t>(std::max<size_t>(t.learners.size(), static_cast<size_t>(std::max(0, t.membership.max_learners))));
}

LearnerSpec default_spec(const Topology& t, uint32_t id) {
  if (id < t.learners.size()) return t.learners[id];
  return LearnerSpec{1.0, t.learners.empty() ? LearnerSpec{}.batch_size : t.learners.front().batch_size};
}

Status validate(const Topology& t) {
  Checker c;
  const int m = static_cast<int>(t.learners.size());
  c.range("learners (count)", m, 1, kMaxLearnerSlots);
  c.require(t.tokens > 0 || t.seconds > 0, "tokens and seconds are both 0: the run would never end");
  c.range("seconds", t.seconds, 0.0, 1e7);
  c.range("hardware_headroom", t.hardware_headroom, 1.0, 10.0);
  for (int i = 0; i < m; ++i) {
    const auto& l = t.learners[static_cast<size_t>(i)];
    const std::string key = "learners[" + std::to_string(i) + "]";
    c.range(key + ".speed", l.speed, 0.01, 100.0);
    c.range(key + ".batch_size", l.batch_size, 1, 1 << 16);
  }

  const auto& md = t.model;
  if (md.kind == ModelKind::kMlp) {
    c.require(!md.hidden.empty(), "model.hidden must list at least one layer width");
    // Beyond this, building and checking the model takes longer than any run
    // worth validating (100,000 layers took minutes), and it is a typo.
    c.range("model.hidden (layers)", static_cast<int64_t>(md.hidden.size()), int64_t{1}, int64_t{kMaxHiddenLayers});
    for (size_t i = 0; i < md.hidden.size() && i < kMaxHiddenLayers; ++i)
      c.range("model.hidden[" + std::to_string(i) + "]", md.hidden[i], 1, 1 << 16);
    c.require(t.data.kind != DataKind::kText,
              "model.kind = \"mlp\" needs data.kind = \"mnist\" or \"synthetic\"");
  } else if (md.kind == ModelKind::kTorchScript || md.kind == ModelKind::kExternal) {
    const bool external = md.kind == ModelKind::kExternal;
    c.require(!md.path.empty(), external ? "model.path must name the model file (model.kind = \"external\"; "
                                           "atoll.save_model() writes one)"
                                         : "model.path must name the TorchScript file (model.kind = \"torchscript\")");
    if (t.data.kind == DataKind::kText && !external) c.range("model.context", md.context, 2, 4096);
    for (size_t i = 0; i < md.avg.size(); ++i)
      c.require(!md.avg[i].empty(), "model.avg[" + std::to_string(i) + "] is empty: give a glob such as \"*emb*\"");
    // A Python learner hands over its progress at step boundaries of its own
    // loop and never waits: it cannot send dp's gradient of every step.
    c.require(!external || t.mode == Mode::kDecoupled,
              "model.kind = \"external\" trains in mode = \"decoupled\" only: Python learners never wait for a "
              "gradient exchange");
    c.require(!external || !t.outer.barrier,
              "model.kind = \"external\" excludes outer.barrier: a Python learner's step() never waits");
  } else {
    c.range("model.layers", md.layers, 1, 64);
    c.range("model.width", md.width, 8, 4096);
    c.range("model.heads", md.heads, 1, 64);
    c.range("model.context", md.context, 2, 4096);
    c.require(md.heads < 1 || md.width % md.heads == 0, "model.width = " + std::to_string(md.width) +
                                            " is not divisible by model.heads = " + std::to_string(md.heads));
    c.require(t.data.kind == DataKind::kText, "model.kind = \"transformer\" needs data.kind = \"text\"");
  }
  c.range("data.holdout_every", t.data.holdout_every, 2, 1 << 20);
  c.range("data.eval_examples", t.data.eval_examples, 0, 1 << 30);
  c.range("data.features", t.data.features, 1, 1 << 16);
  c.range("data.classes", t.data.classes, 2, 1 << 16);
  c.range("data.examples", t.data.examples, 16, 1 << 26);

  const auto& in = t.inner;
  c.range("inner.lr", in.lr, 0.0f, 10.0f);
  c.range("inner.beta1", in.beta1, 0.0f, 0.9999f);
  c.range("inner.beta2", in.beta2, 0.0f, 0.99999f);
  c.range("inner.eps", in.eps, 1e-12f, 1.0f);
  c.range("inner.weight_decay", in.weight_decay, 0.0f, 10.0f);
  c.range<int64_t>("inner.warmup_steps", in.warmup_steps, 0, int64_t{1} << 40);
  c.range<int64_t>("inner.total_steps", in.total_steps, 0, int64_t{1} << 40);
  c.range("inner.min_lr_ratio", in.min_lr_ratio, 0.0f, 1.0f);
  c.range("inner.muon_momentum", in.muon_momentum, 0.0f, 0.9999f);

  const auto& o = t.outer;
  c.range("outer.fragments", o.fragments, 1, 4096);
  c.range("outer.stream", o.stream, 1, std::max(1, o.fragments));
  c.range("outer.sync_every", o.sync_every, 1, 1 << 20);
  c.range("outer.sync_every_start", o.sync_every_start, 0, 1 << 20);
  c.range("outer.sync_ramp_rounds", o.sync_ramp_rounds, 0, 1 << 20);
  c.require(o.sync_every_start == 0 || o.sync_ramp_rounds > 0,
            "outer.sync_every_start = " + std::to_string(o.sync_every_start) +
                " needs outer.sync_ramp_rounds > 0: the rounds over which H grows to outer.sync_every");
  c.range("outer.overlap", o.overlap, 0, 1 << 20);
  c.range("outer.quorum", o.quorum, 1, kMaxLearnerSlots);
  const int slots = static_cast<int>(learner_slots(t));
  c.require(o.quorum <= slots, "outer.quorum = " + std::to_string(o.quorum) + " exceeds the " + std::to_string(slots) +
                                   (slots == m ? " learners" : " learner slots (membership.max_learners)"));
  c.range("outer.grace_gamma", o.grace_gamma, 0.0, 100.0);
  c.range("outer.grace_cap_steps", o.grace_cap_steps, 0.0, 1000.0);
  c.range("outer.max_staleness", o.max_staleness, 0, 1 << 20);
  c.range("outer.lr", o.nesterov.lr, 0.0f, 10.0f);
  c.range("outer.momentum", o.nesterov.momentum, 0.0f, 0.999f);
  c.range("outer.momentum_every", o.nesterov.every, 1, 1 << 20);
  c.check("outer.push_block", check_block(o.push_codec, o.push_block));
  c.range("outer.push_density", o.push_density, 1e-4f, 1.0f);
  c.require(!o.push_error_feedback || o.carry_progress,
            "outer.push_error_feedback keeps what a push left out in the carried progress: it needs "
            "outer.carry_progress");
  c.require(!o.eager_updates || o.carry_progress,
            "outer.eager_updates keeps a share of the progress that carry_progress keeps whole: it needs "
            "outer.carry_progress");
  c.check("outer.broadcast_block", check_block(o.broadcast_codec, o.broadcast_block));
  c.range("outer.blend_alpha", o.blend_alpha, 0.0f, 1.0f);
  c.require(!(o.carry_progress && o.blend_alpha > 0.0f),
            "outer.carry_progress and outer.blend_alpha > 0 both say what a broadcast does to a learner's "
            "progress: choose one");
  c.require(!(o.force_avg && o.force_rda),
            "outer.force_avg and outer.force_rda both choose every fragment's merge rule: choose one");
  c.range("outer.lr_warmup_rounds", o.lr_warmup_rounds, 0, 1 << 20);
  c.range("outer.reconfigure_seconds", o.reconfigure_seconds, 0.0, 3600.0);
  c.range("checkpoint.every_rounds", t.checkpoint.every_rounds, 0, 1 << 30);
  c.range("checkpoint.every_seconds", t.checkpoint.every_seconds, 0.0, 1e7);
  c.range("checkpoint.keep", t.checkpoint.keep, 2, 1000);
  c.range("membership.max_learners", t.membership.max_learners, 0, kMaxLearnerSlots);
  c.range("syncer.shards", t.syncer.shards, 1, std::max(1, o.fragments));
  c.require(t.syncer.shards == 1 || t.mode == Mode::kDecoupled,
            "syncer.shards = " + std::to_string(t.syncer.shards) + " needs mode = \"decoupled\": " +
                mode_name(t.mode) + " applies one step to the whole model");
  // Shard i owns the fragments p with p % S == i: only a multiple of S gives each shard its share.
  if (const int shards = std::max(1, t.syncer.shards); o.fragments % shards != 0)  // 0 is out of range above
    c.require(false, "syncer.shards = " + std::to_string(shards) + " does not divide outer.fragments = " +
                         std::to_string(o.fragments) + ": the shards would own " +
                         std::to_string(o.fragments / shards + 1) + " or " + std::to_string(o.fragments / shards) +
                         " fragments and hold unequal parts of the model; make outer.fragments a multiple of "
                         "syncer.shards");
  c.require(t.membership.max_learners == 0 || t.membership.max_learners >= m,
            "membership.max_learners = " + std::to_string(t.membership.max_learners) + " is below the " +
                std::to_string(m) + " [[learners]]: give 0 (no open slots) or at least " + std::to_string(m));
  return c.status();
}

}  // namespace atl
