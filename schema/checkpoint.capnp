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
  figures @8 :Data;           # a SyncerFigures message, the syncer's to read; empty: none recorded
}

# The syncer's figures of the run so far (runtime/syncer/include/atoll/syncer_figures.h):
# what its report counts, so that a syncer restarted in a new process goes
# on counting, and `atoll assemble` reports a run whose shards ran in
# processes of their own. Times are seconds since startedUnixMs.
struct SyncerFigures {
  startedUnixMs @0 :Int64;     # the run's start, as this syncer counts its seconds
  seconds @1 :Float64;         # since then, when written
  tokens @2 :UInt64;           # trained by every learner, all incarnations
  allocatedSeconds @3 :Float64;
  cpuSeconds @4 :Float64;      # the syncer thread's, in the process that wrote it
  counts @5 :List(Count);      # the plain counts (kSyncerCounts), by name
  rounds @6 :UInt64;
  rejected @7 :UInt64;
  quorumSum @8 :Float64;
  graceWaitSum @9 :Float64;
  roundSecondsSum @10 :Float64;
  adoptedBroadcasts @11 :UInt64;
  adoptedSecondsSum @12 :Float64;
  adoptedSecondsMax @13 :Float64;
  goodSeconds @14 :Float64;
  firstWelcome @15 :Float64;   # -1: none yet
  finalSeconds @16 :Float64;   # -1: not final
  bytesReceived @17 :UInt64;
  bytesSent @18 :UInt64;
  roundEnds @19 :List(RoundEnd);
  recoverySeconds @20 :List(Float64);
  evaluations @21 :List(EvaluationFigures);
  learners @22 :List(LearnerFigures);  # by id
}

struct Count {
  name @0 :Text;
  value @1 :UInt64;
}

struct RoundEnd {
  seconds @0 :Float64;
  fragment @1 :UInt32;
}

struct EvaluationFigures {
  seconds @0 :Float64;
  tokens @1 :UInt64;
  learner @2 :UInt32;
  versionsMin @3 :UInt64;
  versionsSum @4 :UInt64;
  loss @5 :Float64;
  bitsPerByte @6 :Float64;
  accuracy @7 :Float64;
  count @8 :UInt64;
  final @9 :Bool;
}

# What the report and a continuing syncer read of a learner's record.
struct LearnerFigures {
  connected @0 :Bool;
  incarnation @1 :UInt64;
  registrations @2 :UInt64;
  steps @3 :UInt64;
  tokens @4 :UInt64;
  pastSteps @5 :UInt64;
  pastTokens @6 :UInt64;
  stepSeconds @7 :Float64;
  loss @8 :Float64;
  failures @9 :UInt64;
  merged @10 :UInt64;
  speed @11 :Float64;
  batchSize @12 :UInt32;
  member @13 :Bool;
  qualified @14 :Bool;
  memberSeconds @15 :Float64;
  memberSince @16 :Float64;
  departures @17 :UInt64;
}
