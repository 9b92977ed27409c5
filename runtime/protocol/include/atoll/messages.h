// The protocol messages between learners and the syncer (docs/design.md section 4) as
// plain structs, and their Cap'n Proto encoding (schema/wire.capnp).
//
// Actors never touch Cap'n Proto: they build these structs and call
// encode_message(); a receiver calls decode_message(), which checks every
// field it reads and turns a malformed, truncated or oversized message into
// an error instead of an exception or undefined behaviour.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "atoll/codec.h"
#include "atoll/module_layout.h"
#include "atoll/status.h"
#include "atoll/topology.h"

namespace atl {

struct FragmentValues {
  uint32_t fragment = 0;
  uint64_t version = 0;
  Payload values;
  // In a Welcome: the welcomed learner's progress this version holds goes up
  // to this inner step (Push::through); kUnknownMerged: the syncer does not
  // know (it restarted since), and the learner must not carry its progress.
  uint64_t merged_through = kUnknownMerged;
  static constexpr uint64_t kUnknownMerged = ~uint64_t{0};
  friend bool operator==(const FragmentValues&, const FragmentValues&) = default;
};

struct Register {
  uint32_t learner = 0;
  uint64_t incarnation = 0;
  uint64_t fingerprint = 0;
  std::string token;
  std::vector<FragmentValues> bases;  // adopted global copies; empty when fresh
  // CRC32C of the learner's initialization from the topology's seed (0: not
  // given). When it matches the syncer's, a welcome sends a version-0
  // fragment without values (Payload count 0): the learner has them.
  uint32_t initial_crc = 0;
  // The learner's own labels for the report (0: the topology's): a Python
  // learner's speed and batch size are its own, not a topology entry's.
  double speed = 0.0;
  uint32_t batch_size = 0;
  friend bool operator==(const Register&, const Register&) = default;
};

struct OptimizerState {
  int64_t step = 0;
  Payload m, v;
  friend bool operator==(const OptimizerState&, const OptimizerState&) = default;
};

struct Welcome {
  uint32_t learner = 0;
  uint64_t incarnation = 0;
  Topology topology;
  std::vector<FragmentValues> fragments;
  std::optional<OptimizerState> moments;  // from a healthy peer, when there is one
  std::vector<NamedShape> layout;  // answers to a topology request: the run's model layout
  friend bool operator==(const Welcome&, const Welcome&) = default;
};

struct Pull {
  uint32_t fragment = 0;
  uint64_t round = 0;
  bool last = false;  // the run is ending: answer with all progress, then train no more
  // The fragment's version the round merges onto: a learner whose unasked
  // push from that version is on its way lets that push answer.
  uint64_t version = kUnsaid;
  static constexpr uint64_t kUnsaid = UINT64_MAX;
  friend bool operator==(const Pull&, const Pull&) = default;
};

struct Push {
  uint32_t learner = 0;
  uint64_t incarnation = 0;
  uint32_t fragment = 0;
  uint64_t round = 0;          // the Pull answered; 0 when sent unasked
  uint64_t base_version = 0;
  uint64_t steps = 0;          // since adopting base_version
  uint64_t tokens = 0;         // trained in those steps
  double seconds = 0.0;        // device time of those steps (for goodput)
  Payload delta;               // theta - base; dp modes: the gradient of one step
  // Which progress the delta holds: the learner's inner steps (since,
  // through], counted over its incarnation. `since` is the last step a merge
  // credited it with (Broadcast::merged_through), or the step where it last
  // dropped its progress. A push whose `since` is older than what the syncer
  // merged of this learner would merge some progress twice.
  uint64_t since = 0, through = 0;
  friend bool operator==(const Push&, const Push&) = default;
};

// A fragment's new version: its values, or (delta) what to add to the values
// of base_version, which the learner must hold: int codecs send the
// quantized difference to the copy learners hold, so that what quantization
// left out is sent with the next version (error feedback).
struct Broadcast {
  uint32_t fragment = 0;
  uint64_t version = 0;
  Payload values;
  bool delta = false;
  uint64_t base_version = 0;     // with delta
  std::vector<uint32_t> merged;  // learners whose progress this version merged
  // By `merged`: the Push::through of the push merged, so that a learner with
  // several pushes in flight credits the right one. Empty or as long as `merged`.
  std::vector<uint64_t> merged_through = {};
  // A repair: sent to one learner that stayed on an older version (it lost a
  // broadcast), whole values (never a difference) of the current version, and
  // `merged` names only that learner, with what was merged of its progress in
  // all (as a welcome's FragmentValues::merged_through). It can be adopted
  // without the versions between.
  bool repair = false;
  friend bool operator==(const Broadcast&, const Broadcast&) = default;
};

struct FragmentProgress {
  uint64_t version = 0;  // adopted
  uint64_t steps = 0;    // since adopting it
  friend bool operator==(const FragmentProgress&, const FragmentProgress&) = default;
};

struct Progress {
  uint32_t learner = 0;
  uint64_t incarnation = 0;
  uint64_t step = 0;
  uint64_t tokens = 0;
  double step_seconds = 0.0;                // moving average
  std::vector<FragmentProgress> fragments;  // indexed by fragment id
  float loss = 0.0f;                        // moving average of the training loss
  // Where the learner's process runs (machine_id(); 0: not said) and the CPU
  // seconds it has spent: a syncer on the same machine counts it as the run's.
  uint64_t machine = 0;
  double process_cpu_seconds = 0.0;
  friend bool operator==(const Progress&, const Progress&) = default;
};

// Values are part of the wire format: never renumber.
enum class RejectReason : uint8_t {
  kMalformed = 0,
  kStale = 1,
  kBadShape = 2,
  kNonFinite = 3,
  kBadToken = 4,
  kUnknownLearner = 5,
  kUnknownFragment = 6,
  kTooLarge = 7,
  kFingerprintMismatch = 8,
  kDuplicateLearner = 9,
  kFull = 10,  // no open learner slot is free
};
const char* reject_reason_name(RejectReason reason);

// Reject::fragment of a refusal that is not about one fragment.
inline constexpr uint32_t kNoFragment = 0xffffffffu;
// A learner id no learner has: what an actor that has not registered claims to be.
inline constexpr uint32_t kNoLearner = 0xffffffffu;

struct Reject {
  RejectReason reason = RejectReason::kMalformed;
  uint32_t fragment = 0;  // kNoFragment: the refusal is not about one
  std::string detail;
  friend bool operator==(const Reject&, const Reject&) = default;
};

// A syncer in shards keeps the moments of its own fragments: the answer to
// shard s holds those, fragment by fragment in ascending order, each
// fragment's values as gather() lays them out.
struct MomentsPull {
  uint64_t request = 0;
  uint32_t shard = 0;  // of syncer.shards: who asks
  friend bool operator==(const MomentsPull&, const MomentsPull&) = default;
};

struct Moments {
  uint64_t request = 0;
  OptimizerState state;
  friend bool operator==(const Moments&, const Moments&) = default;
};

struct Done {
  std::string reason;
  friend bool operator==(const Done&, const Done&) = default;
};

// The held-out quality of the global model at `versions`, measured by a
// learner with the user's own function (atoll.Evaluator).
// After Done, how long a syncer waits for the evaluations of the final model
// from the learners that evaluated during the run, and such a learner for
// its user's loop to hand one (docs/design.md section 6), in seconds.
inline constexpr double kFinalEvaluationSeconds = 60.0;

struct Evaluation {
  uint32_t learner = 0;
  uint64_t incarnation = 0;
  std::vector<uint64_t> versions;  // per fragment
  double loss = 0.0;               // nats per token
  double bits_per_byte = 0.0;      // NaN: not a byte-level model
  double accuracy = 0.0;           // NaN: none
  uint64_t count = 0;              // tokens or examples evaluated
  // NaN compares unequal: compare the bits, so that a message equals its round trip.
  friend bool operator==(const Evaluation& a, const Evaluation& b);
};

// The door's handshake (atoll/door.h): never seen by the syncer or a learner.
struct Challenge {
  std::string nonce;  // kNonceBytes random bytes
  friend bool operator==(const Challenge&, const Challenge&) = default;
};

// Wire values. kClaim: ask for an open learner slot (the Hello's learner is 0).
enum class Purpose : uint8_t { kJoin = 0, kTopology = 1, kClaim = 2 };

struct Hello {
  uint32_t learner = 0;
  Purpose purpose = Purpose::kJoin;
  std::string proof;  // door_proof() of the challenge's nonce (atoll/cluster_token.h)
  uint64_t process = 0;  // the peer's process, the same across its reconnections
  friend bool operator==(const Hello&, const Hello&) = default;
};

// The learner departs in order: its last progress went ahead as unasked
// pushes; the syncer answers with Done once they are merged.
struct Leave {
  uint32_t learner = 0;
  uint64_t incarnation = 0;
  std::string reason;
  friend bool operator==(const Leave&, const Leave&) = default;
};

using Message = std::variant<Register, Welcome, Pull, Push, Broadcast, Progress, Reject, MomentsPull, Moments, Done,
                             Challenge, Hello, Evaluation, Leave>;

// "register", "welcome", ...
const char* message_name(const Message& message);

// The serialized Cap'n Proto Envelope (a flat array of 8-byte words) followed
// by an 8-byte trailer: the CRC32C of the envelope and the magic "ATL1", so
// that a message corrupted on its way is refused, whichever byte was hit.
std::vector<uint8_t> encode_message(const Message& message);

// Messages larger than this are refused before parsing (256 MiB).
inline constexpr size_t kDefaultMaxMessageBytes = size_t{256} << 20;

// Parses an Envelope. Fails with OutOfRange above max_bytes and with
// Corruption on anything malformed: a missing trailer or a checksum mismatch,
// bad framing, pointers out of bounds, an unknown enum value or union member,
// a topology that does not validate.
Result<Message> decode_message(std::span<const uint8_t> bytes,
                               size_t max_bytes = kDefaultMaxMessageBytes);

}  // namespace atl
