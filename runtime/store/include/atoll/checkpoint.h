// Checkpoints: the syncer's durable state, and the folder that holds them.
//
// File format (little-endian), one frame per file:
//   0   8  magic "ATOLLCKP"
//   8   4  format version (1)
//   12  4  crc32c of the payload
//   16  8  payload length in bytes
//   24  .  payload: a Cap'n Proto Checkpoint (schema/checkpoint.capnp)
// A file whose magic, version, length or checksum is wrong is corrupt and is
// never loaded. Files are written with write_file_atomic() (temporary file,
// fsync, rename, folder fsync), so a crash loses at most the checkpoint being
// written, never an older one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "atoll/status.h"

namespace atl {

struct CheckpointState {
  struct FragmentRecord {
    uint32_t fragment = 0;
    uint64_t version = 0;
    std::vector<float> values;    // global parameters of the fragment
    std::vector<float> momentum;  // outer Nesterov velocity
    friend bool operator==(const FragmentRecord&, const FragmentRecord&) = default;
  };
  struct LearnerRecord {
    uint32_t learner = 0;
    uint64_t incarnation = 0;  // the last one registered
    // Training done so far, so that a syncer restarted in a new process
    // continues the token budget: by earlier incarnations, and by the last
    // one as it last reported (it may come back and report more).
    uint64_t past_steps = 0, past_tokens = 0, steps = 0, tokens = 0;
    // Membership: a restarted syncer holds a member's open slot for the
    // process it registered from, so that no newcomer takes it meanwhile.
    bool member = false;
    uint64_t process = 0;
    friend bool operator==(const LearnerRecord&, const LearnerRecord&) = default;
  };

  // AdamW state over the whole layout (see schema/checkpoint.capnp).
  struct OptimizerRecord {
    int64_t step = 0;
    std::vector<float> m, v;
    friend bool operator==(const OptimizerRecord&, const OptimizerRecord&) = default;
  };

  uint64_t fingerprint = 0;  // layout the values belong to
  uint64_t plan_fingerprint = 0;  // fragment plan the vectors belong to (plan_fingerprint()); 0: not recorded
  int64_t created_unix_ms = 0;
  uint64_t rounds = 0;       // rounds completed over all fragments
  std::vector<FragmentRecord> fragments;
  std::vector<LearnerRecord> learners;
  std::optional<OptimizerRecord> optimizer;
  // The syncer's figures of the run so far, encoded (atoll/syncer_figures.h):
  // the store keeps them, the syncer reads them. Empty: none recorded.
  std::vector<uint8_t> figures;

  friend bool operator==(const CheckpointState&, const CheckpointState&) = default;
};

// A checkpoint as encode_checkpoint() reads it: CheckpointState's records
// with their vectors borrowed from whoever holds them (a syncer's own
// fragments), so that a checkpoint of a large model copies each value once,
// into the file. Valid while the owner leaves those vectors alone.
struct CheckpointView {
  struct FragmentRecord {
    uint32_t fragment = 0;
    uint64_t version = 0;
    std::span<const float> values, momentum;
  };
  struct OptimizerRecord {
    int64_t step = 0;
    std::span<const float> m, v;
  };

  uint64_t fingerprint = 0;
  uint64_t plan_fingerprint = 0;
  int64_t created_unix_ms = 0;
  uint64_t rounds = 0;
  std::vector<FragmentRecord> fragments;
  std::vector<CheckpointState::LearnerRecord> learners;  // small: held
  std::optional<OptimizerRecord> optimizer;
  std::vector<uint8_t> figures;  // small: held
};

// The view of a held state, and a state holding a copy of what a view shows.
CheckpointView view_of(const CheckpointState& state);
CheckpointState copy_of(const CheckpointView& view);

inline constexpr uint32_t kCheckpointFormatVersion = 1;

// The framed file contents, built in place: each vector is copied once.
std::vector<uint8_t> encode_checkpoint(const CheckpointView& view);
std::vector<uint8_t> encode_checkpoint(const CheckpointState& state);
// Checks the frame and the record; names the problem (Corruption) otherwise.
Result<CheckpointState> decode_checkpoint(std::span<const uint8_t> bytes);

// A folder of numbered checkpoint files, checkpoint-<sequence>.atoll, owned by
// one writer at a time: open() takes an advisory lock (flock) on the folder's
// LOCK file and holds it until the store is destroyed, so a second syncer of
// the same run is refused instead of writing over the first one's files.
class CheckpointStore {
 public:
  // Creates the folder if needed, locks it and checks that it can be listed.
  // `keep`: how many of the newest files to keep after each write (>= 2, so a
  // good one survives while the next is written).
  static Result<std::unique_ptr<CheckpointStore>> open(const std::string& dir, int keep = 3);
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  const std::string& dir() const { return dir_; }

  // Writes `state` as the newest checkpoint and removes the oldest beyond `keep`.
  // Returns the file written.
  Result<std::string> write(const CheckpointState& state);
  // The same for bytes from encode_checkpoint(), checked before they are written.
  Result<std::string> write_encoded(std::span<const uint8_t> file);

  // The newest checkpoint that verifies and belongs to `fingerprint`, or none.
  // Every file skipped (corrupt, truncated, another model, a name whose number
  // is out of range) is reported to `warn` with the reason; it is never
  // loaded. Fails only when the folder cannot be listed.
  Result<std::optional<CheckpointState>> load_latest(uint64_t fingerprint,
                                                     const std::function<void(const std::string&)>& warn) const;

  // The model at planned point `point` of the run (a curve of quality), for
  // a syncer shard whose process never holds the whole model: `atoll
  // assemble` evaluates them. In the checkpoint format, written as
  // checkpoints are (point-<point>.atoll, replacing an older one of that
  // point), never pruned.
  Result<std::string> write_point(uint32_t point, std::span<const uint8_t> file);
  // Point `point` if its file is there (none if not); a file that does not
  // verify or belongs to another model is an error that names it.
  Result<std::optional<CheckpointState>> load_point(uint32_t point, uint64_t fingerprint) const;

  // Sequence numbers present, oldest first; names that are not ours are skipped.
  Result<std::vector<uint64_t>> sequences() const;
  std::string path_of(uint64_t sequence) const;

 private:
  CheckpointStore(std::string dir, int keep, int lock_fd);
  Result<std::vector<uint64_t>> scan(std::vector<std::string>* strays) const;

  std::string dir_;
  int keep_;
  int lock_fd_;  // holds the folder's flock
};

}  // namespace atl
