// LearnerReplica: what a learner's protocol (LearnerSession) needs of its
// replica, whatever holds the parameters.
//
// Three kinds implement it:
//   ModelReplica     atoll's own model, trained on the Job's data
//   ExchangeReplica  a replica trained in a Python loop, read and updated
//                    through a ReplicaExchange at the boundaries that loop reaches
//   CountingReplica  no parameters: versions and progress only, for the
//                    cluster simulator (atoll/simulation.h)
// The first two share LearnerCore (atoll/learner_core.h), which keeps the
// values; all three keep their counts, and follow the protocol's rules, in a
// FragmentLedger (atoll/fragment_ledger.h).
//
// Every method runs on the learner's protocol thread, between steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "atoll/messages.h"
#include "atoll/status.h"
#include "atoll/topology.h"

namespace atl {

class LearnerReplica {
 public:
  struct StepResult {
    float loss = 0.0f;
    int64_t tokens = 0;
    double compute_seconds = 0.0;  // thread CPU time of the step
  };

  // What a learner does about a Reject (its reject policy):
  //   kStop     a bad token or another model: joining again cannot help;
  //             this side of the run ends, saying why
  //   kRestart  its own replica of the refused fragment is not finite: it
  //             diverged, and its supervisor must start it afresh
  //   kResync   the kStaleRefusalsBeforeResync-th stale push while nothing
  //             newer of its fragment arrived (a broadcast was missed), or the
  //             syncer does not know a learner it had welcomed (it
  //             restarted): register again, and the welcome brings what is
  //             missing
  //   kGoOn     the refused fragment may be pushed again (in dp modes, after
  //             a fresh step); a stale push otherwise (the fragment moved
  //             on since the last one, or holds a broadcast ahead): the newer
  //             versions are on their way (a delayed or reordered link), and
  //             the next one carries the progress; no second push from the
  //             same base
  enum class RejectAction { kGoOn, kStop, kRestart, kResync };
  static constexpr int kStaleRefusalsBeforeResync = 3;

  virtual ~LearnerReplica() = default;

  virtual uint32_t id() const = 0;
  virtual uint64_t incarnation() const = 0;
  virtual size_t fragment_count() const = 0;
  // Floats in the model: a Register with bases carries 4 bytes of each.
  virtual size_t parameter_count() const = 0;

  // To syncer shard `shard`: its fragments' bases once it has some.
  virtual Register make_register(std::string_view cluster_token, uint32_t shard) const = 0;
  // That Register goes to shard `shard` now: a push after it reaches the shard after it.
  virtual void registering(uint32_t shard) = 0;
  // Adopts a shard's welcome (LearnerCore::welcome says how). Fails, changing
  // nothing, on a shape or decode error.
  virtual Status welcome(const Welcome& welcome) = 0;
  // Every fragment has a base: every shard welcomed it. It trains from then on.
  virtual bool welcomed() const = 0;
  virtual bool welcomed(uint32_t fragment) const = 0;
  // AdamW state for a restarted peer; Unavailable while it has none to give.
  virtual Result<Moments> moments_for(const MomentsPull& pull) const = 0;
  // Books a finished step of `step_seconds` (emulated) device time.
  virtual void finish_step(const StepResult& result, double step_seconds) = 0;
  // The values of the fragment as of this step boundary can be read.
  virtual bool readable(uint32_t fragment) const = 0;
  // Push answering a pull. REQUIRES: readable(pull.fragment).
  virtual Result<Push> answer(const Pull& pull) = 0;
  // Its unasked push of the pulled fragment's version is on its way, and the
  // syncer takes that as the answer: a second push would cross the same link
  // behind it and be refused as a duplicate. A run's last pull is answered.
  virtual bool push_in_flight(const Pull& pull) const = 0;
  // Progress not yet merged of the fragment, carried over versions included.
  virtual bool has_progress(uint32_t fragment) const = 0;
  // Pushes that fell due, unasked, once per version.
  virtual std::vector<Push> due_pushes() = 0;
  // Adopts a new global version of a fragment; Unavailable: register again.
  virtual Status apply(const Broadcast& broadcast) = 0;
  virtual Progress progress() const = 0;
  // `registered`: welcomed by the shard that refused.
  virtual RejectAction on_reject(const Reject& reject, bool registered) = 0;
  // It must not step: a pushed fragment's next version has not arrived
  // (barrier option, dp modes).
  virtual bool blocked() const = 0;

  virtual uint64_t steps() const = 0;
  virtual uint64_t version(uint32_t fragment) const = 0;
  // Welcomes that offered an older version than the one held, since the start.
  virtual uint64_t regressions_refused() const = 0;
};

}  // namespace atl
