@0x8c99f928d6e968f3;
# The messages between learners and the syncer (docs/design.md section 4). Every CAF
# message between them carries exactly one serialized Envelope, so the same
# bytes cross a process boundary unchanged. Field numbers are the wire
# contract: add fields at the end, never renumber.
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("atl::schema");

using import "payload.capnp".Payload;
using import "topology.capnp".Topology;
using import "model_file.capnp".TensorShape;

# learner -> syncer: join, or join again after a restart.
struct Register {
  learner @0 :UInt32;       # id in [0, number of learners)
  incarnation @1 :UInt64;   # grows with each restart of this learner id
  fingerprint @2 :UInt64;   # ParamLayout::fingerprint() of the learner's model
  token @3 :Data;           # cluster token (joins from another process)
  bases @4 :List(FragmentValues);  # the global copies this learner adopted (empty when fresh):
                                   # a restarted syncer recovers the newest from them
  initialCrc @5 :UInt32;    # CRC32C of the learner's own initialization from the topology's seed:
                            # when it matches the syncer's, a welcome leaves out version-0 values
  speed @6 :Float64;        # the learner's own speed label for the report (0: the topology's)
  batchSize @7 :UInt32;     # its own batch size for the report (0: the topology's)
}

struct FragmentValues {
  fragment @0 :UInt32;
  version @1 :UInt64;
  values @2 :Payload;
  # In a Welcome: this learner's progress the version holds goes up to this inner step (Push.through);
  # all ones: the syncer does not know (it restarted, or an older syncer).
  mergedThrough @3 :UInt64 = 0xffffffffffffffff;
}

# AdamW state of a healthy peer, handed to a restarted learner.
struct OptimizerState {
  step @0 :Int64;
  m @1 :Payload;
  v @2 :Payload;
}

# syncer -> learner: accepted; everything needed to start training.
struct Welcome {
  learner @0 :UInt32;
  incarnation @1 :UInt64;
  topology @2 :Topology;
  fragments @3 :List(FragmentValues);   # every fragment's current version and values; a version-0
                                        # fragment without values: the seed's initialization
  hasMoments @4 :Bool;
  moments @5 :OptimizerState;
  layout @6 :List(TensorShape);  # an answer to a topology request: the run's model layout, so that a
                                 # learner whose module differs can say how
}

# syncer -> learners: "send me your progress on this fragment".
struct Pull {
  fragment @0 :UInt32;
  round @1 :UInt64;
  last @2 :Bool;            # the run is ending: answer with all progress, then train no more
  version @3 :UInt64 = 0xffffffffffffffff;  # the version the round merges onto (default: not said)
}

# learner -> syncer: progress on one fragment since the version it adopted.
struct Push {
  learner @0 :UInt32;
  incarnation @1 :UInt64;
  fragment @2 :UInt32;
  round @3 :UInt64;         # the Pull this answers; 0 when sent unasked
  baseVersion @4 :UInt64;   # the adopted version the progress is measured from
  steps @5 :UInt64;         # inner steps since adopting baseVersion
  tokens @6 :UInt64;        # tokens trained in those steps
  delta @7 :Payload;        # encode(theta - base): minus the outer gradient
  seconds @8 :Float64;      # device time of those steps (for goodput)
  since @9 :UInt64;         # the delta holds the learner's progress over its inner steps (since, through]:
  through @10 :UInt64;      # since = the last step a merge credited it with (or where it dropped progress)
}

# syncer -> learners: a fragment's new global version.
struct Broadcast {
  fragment @0 :UInt32;
  version @1 :UInt64;
  values @2 :Payload;       # the fragment's values, or with `delta` what to add to version baseVersion's
  delta @3 :Bool;           # values are a difference (int codecs: quantized, with error feedback)
  baseVersion @4 :UInt64;   # with `delta`: the version the difference applies to
  merged @5 :List(UInt32);  # learners whose progress this version merged
  mergedThrough @6 :List(UInt64);  # by `merged`: the `through` of the push merged (empty from older syncers)
  repair @7 :Bool;          # to one learner that missed a version: whole values, `mergedThrough` its total
}

struct FragmentProgress {
  version @0 :UInt64;       # version adopted
  steps @1 :UInt64;         # inner steps since adopting it
}

# learner -> syncer, after every inner step: cheap, feeds "due" and the grace window.
struct Progress {
  learner @0 :UInt32;
  incarnation @1 :UInt64;
  step @2 :UInt64;          # local inner steps since this incarnation started
  tokens @3 :UInt64;        # tokens trained by this incarnation
  stepSeconds @4 :Float64;  # moving average of the time of one inner step
  fragments @5 :List(FragmentProgress);   # indexed by fragment id
  loss @6 :Float32;         # moving average of the training loss
  machine @7 :UInt64;       # the learner process's machine (a hash of its boot id; 0: not said)
  processCpuSeconds @8 :Float64;  # that process's CPU time so far
}

enum RejectReason {
  malformed @0;
  stale @1;
  badShape @2;
  nonFinite @3;
  badToken @4;
  unknownLearner @5;
  unknownFragment @6;
  tooLarge @7;
  fingerprintMismatch @8;
  duplicateLearner @9;
  full @10;                 # no open learner slot is free (membership.max_learners)
}

# syncer -> learner: a push or registration was refused.
struct Reject {
  reason @0 :RejectReason;
  fragment @1 :UInt32;
  detail @2 :Text;
}

# syncer -> a healthy learner: "send me your AdamW moments" (for a restarted peer).
struct MomentsPull {
  request @0 :UInt64;
  shard @1 :UInt32;  # the asking shard of a syncer in shards: the moments of its fragments only
}

# learner -> syncer: the answer to a MomentsPull.
struct Moments {
  request @0 :UInt64;
  state @1 :OptimizerState;
}

# syncer -> learners: the run is over (its token budget is reached): stop
# training; a learner in its own process exits.
struct Done {
  reason @0 :Text;
}

# The door (atoll/door.h), syncer -> peer, the first frame of a connection:
# a nonce the peer's Hello must prove, so that no Hello can be replayed.
struct Challenge {
  nonce @0 :Data;           # 32 random bytes, fresh for each connection
}

# The door, peer -> syncer, the answer to the Challenge: who the peer is,
# what it wants, and HMAC-SHA256(cluster token, nonce | learner | purpose | process).
struct Hello {
  learner @0 :UInt32;
  purpose @1 :Purpose;
  proof @2 :Data;
  process @3 :UInt64;       # names the peer's process across its reconnections
}

enum Purpose {
  join @0;                  # frames both ways until either side closes
  topology @1;              # one Welcome that carries the topology, then close
  claim @2;                 # ask for an open learner slot: one Welcome naming it (with the
                            # topology), or a Reject (full), then close; the Hello's learner is 0
}

# learner -> syncer: the held-out quality of the global model as this learner
# holds it (its adopted versions), measured by the user's own function
# (atoll.Evaluator): the syncer cannot run a model it does not know.
struct Evaluation {
  learner @0 :UInt32;
  incarnation @1 :UInt64;
  versions @2 :List(UInt64);  # per fragment, the versions evaluated
  loss @3 :Float64;           # mean held-out loss, nats per token
  bitsPerByte @4 :Float64;    # NaN: not a byte-level model
  accuracy @5 :Float64;       # NaN: none
  count @6 :UInt64;           # tokens (or examples) evaluated
}

# learner -> syncer: this learner departs in order (SIGTERM, a preemption
# notice, Learner.leave()). Its last progress went ahead as unasked pushes;
# the syncer merges them, then answers with Done. A departure, not a failure.
struct Leave {
  learner @0 :UInt32;
  incarnation @1 :UInt64;
  reason @2 :Text;          # for the log and the event tape
}

struct Envelope {
  union {
    register @0 :Register;
    welcome @1 :Welcome;
    pull @2 :Pull;
    push @3 :Push;
    broadcast @4 :Broadcast;
    progress @5 :Progress;
    reject @6 :Reject;
    momentsPull @7 :MomentsPull;
    moments @8 :Moments;
    done @9 :Done;
    challenge @10 :Challenge;
    hello @11 :Hello;
    evaluation @12 :Evaluation;
    leave @13 :Leave;
  }
}
