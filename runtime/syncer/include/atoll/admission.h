// Admission: which sender may register as which learner, decided without CAF
// (docs/design.md section 4).
//
// A Register arrives from a Sender: the transport's names for the sending
// actor and for its process, opaque to the syncer. SyncerCore::admit()
// decides from its learner records alone, in this order:
//
//   refuse   no proof of the cluster token (when one is required); a learner
//            id outside the topology; an id bound to a live sender of
//            another process; an incarnation no newer than the one known,
//            sent from another process (a replay); another model
//            (fingerprint); an incarnation no newer than the connected one
//   resync   the bound sender registers its current incarnation again (it
//            missed a broadcast): welcomed again, nothing else changes
//   wait     a retry while the welcome of that incarnation waits for a peer's
//            AdamW moments
//   accept   a new incarnation, or the first: the id is bound to the sender
//            until it goes down
//
// An open slot (membership, atoll/syncer_core.h) reserved for another
// process (claimed by it, or held for a member of it that failed) is refused
// too. A claim (SyncerCore::claim) is an admission to a slot: kAccept with
// the slot in `learner`, or kRefuse with kFull.
#pragma once

#include <cstdint>
#include <string>

#include "atoll/messages.h"

namespace atl {

// Who sent a message, as the transport names it. Both fields are nonzero for
// a real sender; equal senders are the same actor.
struct Sender {
  uint64_t process = 0;  // the sender's process (in one process: all the same)
  uint64_t actor = 0;    // the sender within it
  // Through the door, from another process: no supervisor here restarts it,
  // so the syncer counts its restarts (a new incarnation of a known id).
  bool remote = false;
  friend bool operator==(const Sender&, const Sender&) = default;
};

struct Admission {
  enum class Verdict { kRefuse, kResync, kWait, kAccept };
  Verdict verdict = Verdict::kRefuse;
  RejectReason reason = RejectReason::kMalformed;  // kRefuse
  std::string detail;                              // kRefuse: why, for the Reject and the log
  uint32_t learner = 0;                            // kAccept of a claim: the slot given

  static Admission refuse(RejectReason reason, std::string detail) {
    return {Verdict::kRefuse, reason, std::move(detail), 0};
  }
  bool accepted() const { return verdict == Verdict::kAccept; }
  bool refused() const { return verdict == Verdict::kRefuse; }
};

}  // namespace atl
