@0xa95490c1ac97a332;
# A durable snapshot of the syncer's state, written by the checkpointer. On
# disk it sits inside a checksummed frame (see runtime/store/include/atoll/checkpoint.h);
# this is the record inside. Field numbers are the format: never renumber.
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("atl::schema");

struct FragmentRecord {
  fragment @0 :UInt32;
  version @1 :UInt64;
  values @2 :Data;      # global parameters, fp32 little-endian
  momentum @3 :Data;    # outer Nesterov velocity, fp32 little-endian
}

struct LearnerRecord {
  learner @0 :UInt32;
  incarnation @1 :UInt64;   # the last one registered
  pastSteps @2 :UInt64;     # trained by earlier incarnations
  pastTokens @3 :UInt64;
  steps @4 :UInt64;         # trained by that incarnation, as last reported
  tokens @5 :UInt64;
  member @6 :Bool;          # a member of the run (membership): an open slot is held for it
  process @7 :UInt64;       # the process it registered from (a restarted syncer holds its slot for it)
}

# AdamW state, fp32 little-endian. dp: the syncer's optimizer on Theta.
# Decoupled: the moments of the learner that had trained the most, which a
# learner is welcomed with after a whole restart when no peer is up.
struct OptimizerRecord {
  step @0 :Int64;
  m @1 :Data;
  v @2 :Data;
}

struct Checkpoint {
  formatVersion @0 :UInt32;   # 1
  fingerprint @1 :UInt64;     # layout of the model the values belong to
  createdUnixMs @2 :Int64;
  rounds @3 :UInt64;          # rounds completed over all fragments
  fragments @4 :List(FragmentRecord);
  learners @5 :List(LearnerRecord);
  optimizer @6 :OptimizerRecord;  # absent: none (checkpoint.moments = false, or none yet)
  planFingerprint @7 :UInt64;  # the fragment plan the vectors belong to (fragments.h); 0: not recorded
}
