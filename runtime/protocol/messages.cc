#include "atoll/messages.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>
#include <kj/io.h>

#include <cmath>
#include <cstring>

#include "atoll/crc32c.h"
#include "atoll/wire.capnp.h"

namespace atl {
namespace {

namespace s = ::atl::schema;

constexpr uint32_t kTrailerMagic = 0x314c5441;  // "ATL1" little-endian
constexpr size_t kTrailerBytes = 8;

// Thrown inside decoding, caught at the top with kj::Exception: one error path.
struct DecodeError {
  std::string what;
};

template <class E>
E checked_enum(uint16_t raw, uint16_t max, const char* what) {
  if (raw > max) throw DecodeError{std::string("unknown ") + what + " " + std::to_string(raw)};
  return static_cast<E>(raw);
}

kj::ArrayPtr<const kj::byte> bytes_of(const std::vector<uint8_t>& v) { return {v.data(), v.size()}; }
kj::ArrayPtr<const kj::byte> bytes_of(const std::string& v) {
  return {reinterpret_cast<const kj::byte*>(v.data()), v.size()};
}

// ---- payload

void put(const Payload& p, s::Payload::Builder b) {
  b.setCodec(static_cast<s::Codec>(p.codec));
  b.setBlock(p.block);
  b.setCount(p.count);
  b.setBytes(bytes_of(p.bytes));
}

Payload get(s::Payload::Reader r) {
  Payload p;
  p.codec = checked_enum<Codec>(static_cast<uint16_t>(r.getCodec()), 4, "codec");
  p.block = r.getBlock();
  p.count = r.getCount();
  const auto bytes = r.getBytes();
  p.bytes.assign(bytes.begin(), bytes.end());
  return p;
}

void put(const std::vector<FragmentValues>& fs, capnp::List<s::FragmentValues>::Builder b) {
  for (unsigned i = 0; i < b.size(); ++i) {
    b[i].setFragment(fs[i].fragment);
    b[i].setVersion(fs[i].version);
    put(fs[i].values, b[i].initValues());
    b[i].setMergedThrough(fs[i].merged_through);
  }
}
std::vector<FragmentValues> get(capnp::List<s::FragmentValues>::Reader r) {
  std::vector<FragmentValues> out;
  for (auto f : r) out.push_back({f.getFragment(), f.getVersion(), get(f.getValues()), f.getMergedThrough()});
  return out;
}
void put(const OptimizerState& o, s::OptimizerState::Builder b) {
  b.setStep(o.step);
  put(o.m, b.initM());
  put(o.v, b.initV());
}
OptimizerState get(s::OptimizerState::Reader r) { return {r.getStep(), get(r.getM()), get(r.getV())}; }

// ---- topology

void put(const Topology& t, s::Topology::Builder b) {
  b.setMode(static_cast<s::Mode>(t.mode));
  b.setSeed(t.seed);
  b.setTokens(t.tokens);
  b.setSeconds(t.seconds);
  auto ls = b.initLearners(static_cast<unsigned>(t.learners.size()));
  for (unsigned i = 0; i < ls.size(); ++i) {
    ls[i].setSpeed(t.learners[i].speed);
    ls[i].setBatchSize(static_cast<uint32_t>(t.learners[i].batch_size));
  }
  auto m = b.initModel();
  m.setKind(static_cast<s::ModelKind>(t.model.kind));
  auto hidden = m.initHidden(static_cast<unsigned>(t.model.hidden.size()));
  for (unsigned i = 0; i < hidden.size(); ++i) hidden.set(i, static_cast<uint32_t>(t.model.hidden[i]));
  m.setLayers(static_cast<uint32_t>(t.model.layers));
  m.setWidth(static_cast<uint32_t>(t.model.width));
  m.setHeads(static_cast<uint32_t>(t.model.heads));
  m.setContext(static_cast<uint32_t>(t.model.context));
  m.setPath(t.model.path);
  auto avg = m.initAvg(static_cast<unsigned>(t.model.avg.size()));
  for (unsigned i = 0; i < avg.size(); ++i) avg.set(i, t.model.avg[i]);
  auto d = b.initData();
  d.setKind(static_cast<s::DataKind>(t.data.kind));
  d.setDir(t.data.dir);
  d.setHoldoutEvery(static_cast<uint32_t>(t.data.holdout_every));
  d.setEvalExamples(static_cast<uint32_t>(t.data.eval_examples));
  d.setFeatures(static_cast<uint32_t>(t.data.features));
  d.setClasses(static_cast<uint32_t>(t.data.classes));
  d.setExamples(static_cast<uint32_t>(t.data.examples));
  auto in = b.initInner();
  in.setLr(t.inner.lr);
  in.setBeta1(t.inner.beta1);
  in.setBeta2(t.inner.beta2);
  in.setEps(t.inner.eps);
  in.setWeightDecay(t.inner.weight_decay);
  in.setWarmupSteps(t.inner.warmup_steps);
  in.setTotalSteps(t.inner.total_steps);
  in.setMinLrRatio(t.inner.min_lr_ratio);
  in.setMuon(t.inner.muon);
  in.setMuonMomentum(t.inner.muon_momentum);
  auto o = b.initOuter();
  o.setFragments(static_cast<uint32_t>(t.outer.fragments));
  o.setSyncEvery(static_cast<uint32_t>(t.outer.sync_every));
  o.setOverlap(static_cast<uint32_t>(t.outer.overlap));
  o.setQuorum(static_cast<uint32_t>(t.outer.quorum));
  o.setGraceGamma(t.outer.grace_gamma);
  o.setGraceCapSteps(t.outer.grace_cap_steps);
  o.setMaxStaleness(static_cast<uint32_t>(t.outer.max_staleness));
  o.setLr(t.outer.nesterov.lr);
  o.setMomentum(t.outer.nesterov.momentum);
  o.setPushCodec(static_cast<s::Codec>(t.outer.push_codec));
  o.setPushBlock(t.outer.push_block);
  o.setBroadcastCodec(static_cast<s::Codec>(t.outer.broadcast_codec));
  o.setBlendAlpha(t.outer.blend_alpha);
  o.setBarrier(t.outer.barrier);
  o.setWeighting(static_cast<s::Weighting>(t.outer.weighting));
  o.setForceAvg(t.outer.force_avg);
  o.setForceRda(t.outer.force_rda);
  o.setReconfigureSeconds(t.outer.reconfigure_seconds);
  o.setFinalFlush(t.outer.final_flush);
  o.setCarryProgress(t.outer.carry_progress);
  o.setLrWarmupRounds(static_cast<uint32_t>(t.outer.lr_warmup_rounds));
  o.setBroadcastBlock(t.outer.broadcast_block);
  o.setSyncEveryStart(static_cast<uint32_t>(t.outer.sync_every_start));
  o.setSyncRampRounds(static_cast<uint32_t>(t.outer.sync_ramp_rounds));
  o.setSyncBySpeed(t.outer.sync_by_speed);
  o.setMomentumEvery(static_cast<uint32_t>(t.outer.nesterov.every));
  o.setPushDensity(t.outer.push_density);
  o.setPushErrorFeedback(t.outer.push_error_feedback);
  o.setEagerUpdates(t.outer.eager_updates);
  o.setStream(static_cast<uint32_t>(t.outer.stream));
  auto c = b.initCheckpoint();
  c.setDir(t.checkpoint.dir);
  c.setEveryRounds(static_cast<uint32_t>(t.checkpoint.every_rounds));
  c.setEverySeconds(t.checkpoint.every_seconds);
  c.setKeep(static_cast<uint32_t>(t.checkpoint.keep));
  b.initMembership().setMaxLearners(static_cast<uint32_t>(t.membership.max_learners));
  b.setHardware(static_cast<s::Hardware>(t.hardware));
  b.setSyncerShards(static_cast<uint32_t>(t.syncer.shards));
  b.setHardwareHeadroom(t.hardware_headroom);
}

// Unsigned wire fields become int knobs; anything above INT32_MAX is out of
// every range validate() accepts, so clamp to make it fail there, by name.
int as_int(uint32_t v) { return v > 0x7fffffffu ? 0x7fffffff : static_cast<int>(v); }

Topology get(s::Topology::Reader r) {
  Topology t;
  t.mode = checked_enum<Mode>(static_cast<uint16_t>(r.getMode()), 2, "mode");
  t.seed = r.getSeed();
  t.tokens = r.getTokens();
  t.seconds = r.getSeconds();
  t.learners.clear();
  for (auto l : r.getLearners()) t.learners.push_back({l.getSpeed(), as_int(l.getBatchSize())});
  auto m = r.getModel();
  t.model.kind = checked_enum<ModelKind>(static_cast<uint16_t>(m.getKind()), 3, "model kind");
  t.model.hidden.clear();
  for (uint32_t h : m.getHidden()) t.model.hidden.push_back(as_int(h));
  t.model.layers = as_int(m.getLayers());
  t.model.width = as_int(m.getWidth());
  t.model.heads = as_int(m.getHeads());
  t.model.context = as_int(m.getContext());
  t.model.path = m.getPath().cStr();
  if (m.hasAvg()) {  // absent (an older sender): the default globs
    t.model.avg.clear();
    for (auto g : m.getAvg()) t.model.avg.push_back(g.cStr());
  }
  auto d = r.getData();
  t.data.kind = checked_enum<DataKind>(static_cast<uint16_t>(d.getKind()), 2, "data kind");
  t.data.dir = d.getDir().cStr();
  t.data.holdout_every = as_int(d.getHoldoutEvery());
  t.data.eval_examples = as_int(d.getEvalExamples());
  t.data.features = as_int(d.getFeatures());
  t.data.classes = as_int(d.getClasses());
  t.data.examples = as_int(d.getExamples());
  auto in = r.getInner();
  t.inner.lr = in.getLr();
  t.inner.beta1 = in.getBeta1();
  t.inner.beta2 = in.getBeta2();
  t.inner.eps = in.getEps();
  t.inner.weight_decay = in.getWeightDecay();
  t.inner.warmup_steps = in.getWarmupSteps();
  t.inner.total_steps = in.getTotalSteps();
  t.inner.min_lr_ratio = in.getMinLrRatio();
  t.inner.muon = in.getMuon();
  t.inner.muon_momentum = in.getMuonMomentum();
  auto o = r.getOuter();
  t.outer.fragments = as_int(o.getFragments());
  t.outer.sync_every = as_int(o.getSyncEvery());
  t.outer.overlap = as_int(o.getOverlap());
  t.outer.quorum = as_int(o.getQuorum());
  t.outer.grace_gamma = o.getGraceGamma();
  t.outer.grace_cap_steps = o.getGraceCapSteps();
  t.outer.max_staleness = as_int(o.getMaxStaleness());
  t.outer.nesterov.lr = o.getLr();
  t.outer.nesterov.momentum = o.getMomentum();
  t.outer.push_codec = checked_enum<Codec>(static_cast<uint16_t>(o.getPushCodec()), 4, "codec");
  t.outer.push_block = o.getPushBlock();
  t.outer.broadcast_codec = checked_enum<Codec>(static_cast<uint16_t>(o.getBroadcastCodec()), 4, "codec");
  t.outer.blend_alpha = o.getBlendAlpha();
  t.outer.barrier = o.getBarrier();
  t.outer.weighting = checked_enum<Weighting>(static_cast<uint16_t>(o.getWeighting()), 1, "weighting");
  t.outer.force_avg = o.getForceAvg();
  t.outer.force_rda = o.getForceRda();
  t.outer.reconfigure_seconds = o.getReconfigureSeconds();
  t.outer.final_flush = o.getFinalFlush();
  t.outer.carry_progress = o.getCarryProgress();
  t.outer.lr_warmup_rounds = as_int(o.getLrWarmupRounds());
  t.outer.broadcast_block = o.getBroadcastBlock();
  t.outer.sync_every_start = as_int(o.getSyncEveryStart());
  t.outer.sync_ramp_rounds = as_int(o.getSyncRampRounds());
  t.outer.sync_by_speed = o.getSyncBySpeed();
  t.outer.nesterov.every = as_int(o.getMomentumEvery());
  t.outer.push_density = o.getPushDensity();
  t.outer.push_error_feedback = o.getPushErrorFeedback();
  t.outer.eager_updates = o.getEagerUpdates();
  t.outer.stream = as_int(o.getStream());
  auto c = r.getCheckpoint();
  t.checkpoint.dir = c.getDir().cStr();
  t.checkpoint.every_rounds = as_int(c.getEveryRounds());
  t.checkpoint.every_seconds = c.getEverySeconds();
  t.checkpoint.keep = as_int(c.getKeep());
  t.membership.max_learners = as_int(r.getMembership().getMaxLearners());  // absent (an older sender): 0
  t.hardware = checked_enum<Hardware>(static_cast<uint16_t>(r.getHardware()), 1, "hardware");
  t.syncer.shards = std::max(1, as_int(r.getSyncerShards()));
  t.hardware_headroom = r.getHardwareHeadroom();  // absent (an older sender): 1.15
  if (Status st = validate(t); !st.ok()) throw DecodeError{"topology: " + std::string(st.message())};
  return t;
}

// ---- one builder per message

struct Encoder {
  s::Envelope::Builder env;

  void operator()(const Register& m) {
    auto b = env.initRegister();
    b.setLearner(m.learner);
    b.setIncarnation(m.incarnation);
    b.setFingerprint(m.fingerprint);
    b.setToken(bytes_of(m.token));
    put(m.bases, b.initBases(static_cast<unsigned>(m.bases.size())));
    b.setInitialCrc(m.initial_crc);
    b.setSpeed(m.speed);
    b.setBatchSize(m.batch_size);
  }
  void operator()(const Evaluation& m) {
    auto b = env.initEvaluation();
    b.setLearner(m.learner);
    b.setIncarnation(m.incarnation);
    auto vs = b.initVersions(static_cast<unsigned>(m.versions.size()));
    for (unsigned i = 0; i < vs.size(); ++i) vs.set(i, m.versions[i]);
    b.setLoss(m.loss);
    b.setBitsPerByte(m.bits_per_byte);
    b.setAccuracy(m.accuracy);
    b.setCount(m.count);
  }
  void operator()(const MomentsPull& m) {
    auto b = env.initMomentsPull();
    b.setRequest(m.request);
    b.setShard(m.shard);
  }
  void operator()(const Done& m) { env.initDone().setReason(m.reason); }
  void operator()(const Leave& m) {
    auto b = env.initLeave();
    b.setLearner(m.learner);
    b.setIncarnation(m.incarnation);
    b.setReason(m.reason);
  }
  void operator()(const Challenge& m) { env.initChallenge().setNonce(bytes_of(m.nonce)); }
  void operator()(const Hello& m) {
    auto b = env.initHello();
    b.setLearner(m.learner);
    b.setPurpose(static_cast<s::Purpose>(m.purpose));
    b.setProof(bytes_of(m.proof));
    b.setProcess(m.process);
  }
  void operator()(const Moments& m) {
    auto b = env.initMoments();
    b.setRequest(m.request);
    put(m.state, b.initState());
  }
  void operator()(const Welcome& m) {
    auto b = env.initWelcome();
    b.setLearner(m.learner);
    b.setIncarnation(m.incarnation);
    put(m.topology, b.initTopology());
    put(m.fragments, b.initFragments(static_cast<unsigned>(m.fragments.size())));
    b.setHasMoments(m.moments.has_value());
    if (m.moments) put(*m.moments, b.initMoments());
    auto layout = b.initLayout(static_cast<unsigned>(m.layout.size()));
    for (unsigned i = 0; i < layout.size(); ++i) {
      layout[i].setName(m.layout[i].name);
      auto dims = layout[i].initDims(static_cast<unsigned>(m.layout[i].dims.size()));
      for (unsigned d = 0; d < dims.size(); ++d) dims.set(d, m.layout[i].dims[d]);
    }
  }
  void operator()(const Pull& m) {
    auto b = env.initPull();
    b.setFragment(m.fragment);
    b.setRound(m.round);
    b.setLast(m.last);
    b.setVersion(m.version);
  }
  void operator()(const Push& m) {
    auto b = env.initPush();
    b.setLearner(m.learner);
    b.setIncarnation(m.incarnation);
    b.setFragment(m.fragment);
    b.setRound(m.round);
    b.setBaseVersion(m.base_version);
    b.setSteps(m.steps);
    b.setTokens(m.tokens);
    b.setSeconds(m.seconds);
    b.setSince(m.since);
    b.setThrough(m.through);
    put(m.delta, b.initDelta());
  }
  void operator()(const Broadcast& m) {
    auto b = env.initBroadcast();
    b.setFragment(m.fragment);
    b.setVersion(m.version);
    put(m.values, b.initValues());
    b.setDelta(m.delta);
    b.setBaseVersion(m.base_version);
    auto merged = b.initMerged(static_cast<unsigned>(m.merged.size()));
    for (unsigned i = 0; i < merged.size(); ++i) merged.set(i, m.merged[i]);
    auto through = b.initMergedThrough(static_cast<unsigned>(m.merged_through.size()));
    for (unsigned i = 0; i < through.size(); ++i) through.set(i, m.merged_through[i]);
    b.setRepair(m.repair);
  }
  void operator()(const Progress& m) {
    auto b = env.initProgress();
    b.setLearner(m.learner);
    b.setIncarnation(m.incarnation);
    b.setStep(m.step);
    b.setTokens(m.tokens);
    b.setStepSeconds(m.step_seconds);
    b.setLoss(m.loss);
    b.setMachine(m.machine);
    b.setProcessCpuSeconds(m.process_cpu_seconds);
    auto fs = b.initFragments(static_cast<unsigned>(m.fragments.size()));
    for (unsigned i = 0; i < fs.size(); ++i) {
      fs[i].setVersion(m.fragments[i].version);
      fs[i].setSteps(m.fragments[i].steps);
    }
  }
  void operator()(const Reject& m) {
    auto b = env.initReject();
    b.setReason(static_cast<s::RejectReason>(m.reason));
    b.setFragment(m.fragment);
    b.setDetail(m.detail);
  }
};

Message decode_envelope(s::Envelope::Reader env) {
  switch (env.which()) {
    case s::Envelope::REGISTER: {
      auto r = env.getRegister();
      const auto token = r.getToken();
      Register reg{r.getLearner(), r.getIncarnation(), r.getFingerprint(),
                   std::string(token.begin(), token.end()), get(r.getBases()), r.getInitialCrc()};
      reg.speed = r.getSpeed();
      reg.batch_size = r.getBatchSize();
      if (!std::isfinite(reg.speed) || reg.speed < 0 || reg.speed > 1e6)
        throw DecodeError{"register: speed " + std::to_string(reg.speed) + " is not a speed label"};
      return reg;
    }
    case s::Envelope::WELCOME: {
      auto r = env.getWelcome();
      Welcome w;
      w.learner = r.getLearner();
      w.incarnation = r.getIncarnation();
      w.topology = get(r.getTopology());
      w.fragments = get(r.getFragments());
      if (r.getHasMoments()) w.moments = get(r.getMoments());
      for (auto t : r.getLayout()) {
        NamedShape s{t.getName().cStr(), {}};
        for (int64_t d : t.getDims()) s.dims.push_back(d);
        w.layout.push_back(std::move(s));
      }
      return w;
    }
    case s::Envelope::PULL: {
      auto r = env.getPull();
      return Pull{r.getFragment(), r.getRound(), r.getLast(), r.getVersion()};
    }
    case s::Envelope::PUSH: {
      auto r = env.getPush();
      Push p{r.getLearner(), r.getIncarnation(), r.getFragment(), r.getRound(),
             r.getBaseVersion(), r.getSteps(), r.getTokens(), r.getSeconds(), get(r.getDelta())};
      p.since = r.getSince();
      p.through = r.getThrough();
      if (p.since > p.through)
        throw DecodeError{"push: progress since step " + std::to_string(p.since) + " through step " +
                          std::to_string(p.through)};
      return p;
    }
    case s::Envelope::BROADCAST: {
      auto r = env.getBroadcast();
      Broadcast b{r.getFragment(), r.getVersion(), get(r.getValues()), r.getDelta(), r.getBaseVersion(), {}};
      for (uint32_t m : r.getMerged()) b.merged.push_back(m);
      for (uint64_t t : r.getMergedThrough()) b.merged_through.push_back(t);
      if (!b.merged_through.empty() && b.merged_through.size() != b.merged.size())
        throw DecodeError{"broadcast: " + std::to_string(b.merged_through.size()) + " merged steps for " +
                          std::to_string(b.merged.size()) + " merged learners"};
      b.repair = r.getRepair();
      if (b.repair && (b.delta || b.merged.size() != 1 || b.merged_through.size() != 1))
        throw DecodeError{"broadcast: a repair holds whole values for one learner, with its merged steps"};
      return b;
    }
    case s::Envelope::PROGRESS: {
      auto r = env.getProgress();
      Progress p{r.getLearner(), r.getIncarnation(), r.getStep(), r.getTokens(), r.getStepSeconds(), {}};
      for (auto f : r.getFragments()) p.fragments.push_back({f.getVersion(), f.getSteps()});
      p.loss = r.getLoss();
      p.machine = r.getMachine();
      p.process_cpu_seconds = r.getProcessCpuSeconds();
      if (!std::isfinite(p.process_cpu_seconds) || p.process_cpu_seconds < 0)
        throw DecodeError{"progress: the process's CPU seconds are not a finite count"};
      return p;
    }
    case s::Envelope::MOMENTS_PULL:
      return MomentsPull{env.getMomentsPull().getRequest(), env.getMomentsPull().getShard()};
    case s::Envelope::MOMENTS: {
      auto r = env.getMoments();
      return Moments{r.getRequest(), get(r.getState())};
    }
    case s::Envelope::DONE:
      return Done{env.getDone().getReason().cStr()};
    case s::Envelope::CHALLENGE: {
      const auto nonce = env.getChallenge().getNonce();
      return Challenge{std::string(nonce.begin(), nonce.end())};
    }
    case s::Envelope::HELLO: {
      auto r = env.getHello();
      const auto proof = r.getProof();
      return Hello{r.getLearner(), checked_enum<Purpose>(static_cast<uint16_t>(r.getPurpose()), 2, "purpose"),
                   std::string(proof.begin(), proof.end()), r.getProcess()};
    }
    case s::Envelope::EVALUATION: {
      auto r = env.getEvaluation();
      Evaluation e{r.getLearner(), r.getIncarnation(), {}, r.getLoss(), r.getBitsPerByte(), r.getAccuracy(),
                   r.getCount()};
      for (uint64_t v : r.getVersions()) e.versions.push_back(v);
      return e;
    }
    case s::Envelope::LEAVE: {
      auto r = env.getLeave();
      return Leave{r.getLearner(), r.getIncarnation(), r.getReason().cStr()};
    }
    case s::Envelope::REJECT: {
      auto r = env.getReject();
      return Reject{checked_enum<RejectReason>(static_cast<uint16_t>(r.getReason()), 10, "reject reason"),
                    r.getFragment(), r.getDetail().cStr()};
    }
  }
  throw DecodeError{"unknown message kind " + std::to_string(static_cast<int>(env.which()))};
}

}  // namespace

bool operator==(const Evaluation& a, const Evaluation& b) {
  const auto same = [](double x, double y) { return std::memcmp(&x, &y, sizeof x) == 0; };
  return a.learner == b.learner && a.incarnation == b.incarnation && a.versions == b.versions &&
         same(a.loss, b.loss) && same(a.bits_per_byte, b.bits_per_byte) && same(a.accuracy, b.accuracy) &&
         a.count == b.count;
}

const char* reject_reason_name(RejectReason r) {
  switch (r) {
    case RejectReason::kMalformed: return "malformed";
    case RejectReason::kStale: return "stale";
    case RejectReason::kBadShape: return "bad_shape";
    case RejectReason::kNonFinite: return "non_finite";
    case RejectReason::kBadToken: return "bad_token";
    case RejectReason::kUnknownLearner: return "unknown_learner";
    case RejectReason::kUnknownFragment: return "unknown_fragment";
    case RejectReason::kTooLarge: return "too_large";
    case RejectReason::kFingerprintMismatch: return "fingerprint_mismatch";
    case RejectReason::kDuplicateLearner: return "duplicate_learner";
    case RejectReason::kFull: return "full";
  }
  return "unknown";
}

const char* message_name(const Message& m) {
  static constexpr const char* kNames[] = {"register", "welcome", "pull",   "push",         "broadcast",
                                           "progress", "reject",  "moments_pull", "moments", "done",
                                           "challenge", "hello", "evaluation", "leave"};
  return kNames[m.index()];
}

std::vector<uint8_t> encode_message(const Message& message) {
  capnp::MallocMessageBuilder builder;
  std::visit(Encoder{builder.initRoot<s::Envelope>()}, message);
  const size_t body = capnp::computeSerializedSizeInWords(builder) * sizeof(capnp::word);
  std::vector<uint8_t> out(body + kTrailerBytes);
  kj::ArrayOutputStream stream(kj::arrayPtr(out.data(), body));
  capnp::writeMessage(stream, builder);
  const uint32_t crc = crc32c(std::span<const uint8_t>(out.data(), body));
  std::memcpy(out.data() + body, &crc, 4);
  std::memcpy(out.data() + body + 4, &kTrailerMagic, 4);
  return out;
}

Result<Message> decode_message(std::span<const uint8_t> bytes, size_t max_bytes) {
  if (bytes.size() > max_bytes)
    return Status::out_of_range("message of " + std::to_string(bytes.size()) +
                                " bytes exceeds the limit of " + std::to_string(max_bytes));
  if (bytes.size() < 2 * kTrailerBytes || bytes.size() % sizeof(capnp::word) != 0)
    return Status::corruption("message of " + std::to_string(bytes.size()) +
                              " bytes is not a whole number of 8-byte words");
  uint32_t crc, magic;
  std::memcpy(&crc, bytes.data() + bytes.size() - kTrailerBytes, 4);
  std::memcpy(&magic, bytes.data() + bytes.size() - 4, 4);
  if (magic != kTrailerMagic) return Status::corruption("message has no checksum trailer (truncated or padded)");
  bytes = bytes.first(bytes.size() - kTrailerBytes);
  if (crc32c(bytes) != crc) return Status::corruption("checksum mismatch: the message was corrupted on its way");
  // Cap'n Proto reads words in place; copy only when the buffer is misaligned.
  kj::Array<capnp::word> aligned;  // (capnp::word cannot be copied, so no std::vector::resize)
  const capnp::word* words = reinterpret_cast<const capnp::word*>(bytes.data());
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(capnp::word) != 0) {
    aligned = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
    std::memcpy(aligned.begin(), bytes.data(), bytes.size());
    words = aligned.begin();
  }
  const kj::ArrayPtr<const capnp::word> array(words, bytes.size() / sizeof(capnp::word));
  capnp::ReaderOptions options;
  // Each word is read about once; the limit stops pointer loops from
  // amplifying a small message into a huge amount of work.
  options.traversalLimitInWords = 2 * array.size() + 1024;
  try {
    capnp::FlatArrayMessageReader reader(array, options);
    if (reader.getEnd() != array.end())
      return Status::corruption("message has " +
                                std::to_string((array.end() - reader.getEnd()) * sizeof(capnp::word)) +
                                " trailing bytes");
    return decode_envelope(reader.getRoot<s::Envelope>());
  } catch (const DecodeError& e) {
    return Status::corruption("malformed message: " + e.what);
  } catch (const kj::Exception& e) {
    return Status::corruption("malformed message: " + std::string(e.getDescription().cStr()));
  }
}

}  // namespace atl
