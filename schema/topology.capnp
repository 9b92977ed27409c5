@0xbefa690a62dfb269;
# Topology: every knob of a run, as it travels to a learner in a Welcome and is
# stored in checkpoints. It mirrors atl::Topology
# (runtime/config/include/atoll/topology.h), which owns the defaults and their
# documentation; a Topology on the wire always has every field written.
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("atl::schema");

using import "payload.capnp".Codec;

enum Mode {
  decoupled @0;   # Decoupled DiLoCo
  dp @1;          # synchronous data-parallel
  elasticDp @2;   # data-parallel that shrinks to the live learners
}

enum ModelKind {
  mlp @0;
  transformer @1;
  torchscript @2;
  external @3;      # trained by Python learners (atoll.Learner); the syncer reads its model file
}

enum DataKind {
  mnist @0;
  text @1;
  synthetic @2;
}

enum Weighting {
  tokens @0;
  uniform @1;
}

struct LearnerSpec {
  speed @0 :Float64;
  batchSize @1 :UInt32;
}

struct ModelSpec {
  kind @0 :ModelKind;
  hidden @1 :List(UInt32);
  layers @2 :UInt32;
  width @3 :UInt32;
  heads @4 :UInt32;
  context @5 :UInt32;
  path @6 :Text;          # torchscript: the module file
  avg @7 :List(Text);     # torchscript: globs of the tensors merged by weighted mean
}

struct DataSpec {
  kind @0 :DataKind;
  dir @1 :Text;
  holdoutEvery @2 :UInt32;
  evalExamples @3 :UInt32;
  features @4 :UInt32;
  classes @5 :UInt32;
  examples @6 :UInt32;
}

struct InnerSpec {
  lr @0 :Float32;
  beta1 @1 :Float32;
  beta2 @2 :Float32;
  eps @3 :Float32;
  weightDecay @4 :Float32;
  warmupSteps @5 :Int64;
  totalSteps @6 :Int64;
  minLrRatio @7 :Float32;
  muon @8 :Bool;                     # the body's matrices take Muon's step
  muonMomentum @9 :Float32 = 0.95;
}

struct OuterSpec {
  fragments @0 :UInt32;
  syncEvery @1 :UInt32;
  overlap @2 :UInt32;
  quorum @3 :UInt32;
  graceGamma @4 :Float64;
  graceCapSteps @5 :Float64;
  maxStaleness @6 :UInt32;
  lr @7 :Float32;
  momentum @8 :Float32;
  pushCodec @9 :Codec;
  pushBlock @10 :UInt32;
  broadcastCodec @11 :Codec;
  blendAlpha @12 :Float32;
  barrier @13 :Bool;
  weighting @14 :Weighting;
  forceAvg @15 :Bool;
  reconfigureSeconds @16 :Float64;
  finalFlush @17 :Bool;
  carryProgress @18 :Bool;
  lrWarmupRounds @19 :UInt32;
  broadcastBlock @20 :UInt32;
  syncEveryStart @21 :UInt32;
  syncRampRounds @22 :UInt32;
  syncBySpeed @23 :Bool;
  momentumEvery @24 :UInt32 = 1;  # delayed Nesterov's N
  pushDensity @25 :Float32 = 1.0;
  pushErrorFeedback @26 :Bool;
  eagerUpdates @27 :Bool;
  forceRda @28 :Bool;
  stream @29 :UInt32 = 1;  # fragments due together, sent back to back
}

struct CheckpointSpec {
  dir @0 :Text;
  everyRounds @1 :UInt32;
  everySeconds @2 :Float64;
  keep @3 :UInt32;
}

struct MembershipSpec {
  maxLearners @0 :UInt32;   # slots in all; 0: the number of learners (no open slots)
}

struct Topology {
  mode @0 :Mode;
  seed @1 :UInt64;
  tokens @2 :UInt64;
  seconds @3 :Float64;
  learners @4 :List(LearnerSpec);
  model @5 :ModelSpec;
  data @6 :DataSpec;
  inner @7 :InnerSpec;
  outer @8 :OuterSpec;
  checkpoint @9 :CheckpointSpec;
  membership @10 :MembershipSpec;
  hardware @11 :Hardware;
  syncerShards @12 :UInt32;   # 0 (an older sender): 1
  hardwareHeadroom @13 :Float64 = 1.15;   # dedicated: a step's wall time over its compute
}

enum Hardware {
  shared @0;      # a step takes the wall time it gets
  dedicated @1;   # each learner owns a fixed share of its process's compute
}
