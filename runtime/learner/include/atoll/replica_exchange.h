// ReplicaExchange: the hand-off between a learner actor and a replica that is
// trained outside atoll (a Python loop on any device: atoll.Learner).
//
// Such a learner's parameters live in the user's tensors, and its steps are
// the user's. atoll keeps the protocol: the learner actor and its LearnerCore
// decide what to push, adopt and answer, exactly as for atoll's own learners
// (atoll/learner_core.h). The exchange is where the two meet, at the training
// thread's step boundaries, without the training thread ever waiting for the
// network or for the actor:
//
//   training thread, after each optimizer step:
//     1. request()   what to do now: updates to apply to the replica (global
//                    versions adopted, in order), optimizer moments to load
//                    (a restarted learner's peer moments), and which
//                    fragments (and whether the optimizer's moments) to read
//     2.             apply the updates, then read what was asked (host copies)
//     3. hand(step)  the step's tokens and loss, and what was read
//   learner actor, woken by the notify callback:
//     steps()        every step handed since, in order (copying values lent
//                    with them, off the training thread): it books each, then
//                    answers pulls and pushes due fragments from the values read
//     post(...)      updates and moments for the replica, composed per fragment
//     want(...)      what to read at the next boundary
//
// An update is affine, values <- scale * values + offset (scale 0: values <-
// offset), so that any number of them compose into one per fragment and stay
// right however many steps later the training thread applies them: carrying
// progress onto a new version is `+ (global - reference)`, adopting it
// outright is `<- global`.
//
// The two threads race, and the exchange settles it. Every posted update is
// numbered; a request takes every update posted so far. So steps() hands the
// actor a fragment's values only if no update of that fragment was posted
// after the request that read them (else they predate an adoption the core
// has made, and the fragment is read again at a later boundary), and lets
// the actor book a step only if it trained on values that include the
// incarnation's first welcome (else the welcome overwrote what it trained).
//
// Thread-safety: every method may be called from any thread; request() and
// hand() from one training thread at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "atoll/fragments.h"
#include "atoll/messages.h"
#include "atoll/param_layout.h"

namespace atl {

// values <- scale * values + offset, over one fragment's vector (atoll/fragments.h).
// scale 0 assigns (a non-finite replica is healed by it).
struct FragmentUpdate {
  uint32_t fragment = 0;
  float scale = 0.0f;
  std::vector<float> offset;
};

// An Adam-style optimizer's state in layout order, fp32: first and second
// moments and the step count.
struct OptimizerMoments {
  int64_t step = 0;
  std::vector<float> m, v;
};

// What the training thread does at its next step boundary.
struct ReplicaRequest {
  std::vector<FragmentUpdate> updates;     // apply first, in this order
  std::optional<OptimizerMoments> moments;  // then put into the optimizer
  std::vector<uint32_t> reads;             // then read these fragments, ascending
  bool read_moments = false;               // and the optimizer's moments
  // The run is ending and pulled this learner's last progress: read every
  // fragment, hand the step frozen, and train no more.
  bool freeze = false;
  // This request's number: a later hand() may give its reads (ReplicaStep::read_at).
  uint64_t sequence = 0;
};

// One step of the training thread, handed to the actor.
struct ReplicaStep {
  double loss = 0.0;   // the user's training loss of the step (NaN: not given)
  int64_t tokens = 0;  // trained in the step
  double seconds = 0;  // wall time since the previous boundary (set by hand())
  std::vector<uint32_t> fragments;          // the reads, ascending
  std::vector<std::vector<float>> values;   // each read fragment's vector
  std::optional<OptimizerMoments> moments;  // when asked, and the optimizer has them
  std::optional<Evaluation> evaluation;     // a held-out evaluation to report (learner fields set by the actor)
  // The replica changes no more (the run's end, or the user leaves): what
  // was read stays readable, so that late pulls are answered from it. A
  // frozen step with 0 tokens books no step.
  bool frozen = false;
  // The request whose reads these values are (its sequence), when they were
  // read at an earlier boundary than this step's: a device's copy overlapped
  // the next step, and its values come one boundary late. Unset: this
  // boundary's request, as usual.
  std::optional<uint64_t> read_at;
  // The read fragments' values back to back in the training thread's own
  // memory, lent instead of copied into `values` on its time: steps() copies
  // them, on the actor's thread. The memory must stay unchanged until
  // released() says so for this step's number (what hand() returns).
  std::span<const float> lent;
  // The optimizer's moments lent the same way: m then v back to back (2 x
  // the model's values), at step moments_step; steps() copies them into
  // `moments`.
  std::span<const float> moments_lent;
  int64_t moments_step = 0;
  // The moments asked for were copied at this boundary and come with a later
  // step (a device copies them while it trains): the pull waits for them.
  bool moments_coming = false;
  // Set by steps(): its tokens trained on the global model (after the
  // welcome); and the request asked for moments, whether or not it has them.
  bool counts = false;
  bool moments_asked = false;

  // Set by hand(): the updates the training thread had applied before this
  // step trained (the previous request), and before it read (this one, or
  // read_at's).
  uint64_t trained_after = 0, read_after = 0;
};

// The learner as the training thread sees it.
struct ReplicaState {
  bool welcomed = false;        // adopted a global model at least once
  bool over = false;            // the run is over for this learner: train no more
  std::string why;              // why it is over: the run's end, a refusal, a lost syncer
  bool failed = false;          // over because something went wrong (a refusal, a lost syncer)
  bool refused = false;         // failed because the syncer refused this learner (token, id, model)
  bool stopping = false;        // the run is ending: this learner's last progress was asked for
  uint64_t incarnation = 0;     // of the learner actor now
  std::vector<uint64_t> versions;  // per fragment, the global version adopted
  uint64_t steps = 0, tokens = 0;  // booked by the actor (steps after the first welcome)
  // The run is over and the syncer takes one more evaluation, of the final
  // model, from this learner (it evaluated during the run): hand() it, with
  // frozen set. Cleared once it went, or its time was up.
  bool final_evaluation_wanted = false;
};

class ReplicaExchange {
 public:
  // The replica's layout and the run's fragments of it (plan_fragments()).
  ReplicaExchange(ParamLayout layout, std::vector<Fragment> fragments, double speed_label = 0.0,
                  uint32_t batch_label = 0);

  const ParamLayout& layout() const { return layout_; }
  const std::vector<Fragment>& fragments() const { return fragments_; }
  // The learner's own labels for the report (0: the topology's).
  double speed_label() const { return speed_label_; }
  uint32_t batch_label() const { return batch_label_; }

  // ---- the training thread

  // What to apply and read at this boundary. Takes the updates and moments
  // (the next request has only newer ones).
  ReplicaRequest request();
  // The step, with what request() asked to read. Never blocks on the actor.
  // Returns the step's number (1, 2, ...).
  uint64_t hand(ReplicaStep step);
  // Whether the values lent with step `number` are copied (or dropped) and
  // their memory free again; waits up to `seconds` for it.
  bool released(uint64_t number, double seconds = 0) const;
  ReplicaState state() const;
  // Waits until welcomed or over, or `seconds` pass; returns state().welcomed.
  bool wait_welcome(double seconds) const;
  // The global model as this learner adopted it (its bases), layout order,
  // and its versions: what an evaluator measures. Empty until welcomed.
  std::vector<float> global(std::vector<uint64_t>* versions = nullptr) const;

  // ---- the learner actor

  // Called, without the lock, after each hand(); `owner` (an actor's id) may
  // clear it when it ends, so that nothing outlives what it points to.
  void set_notify(std::function<void()> notify, uint64_t owner = 0);
  void clear_notify(uint64_t owner);
  std::deque<ReplicaStep> steps();
  // Adds updates (composed with those not yet taken) and moments to load.
  void post(std::vector<FragmentUpdate> updates, std::optional<OptimizerMoments> moments);
  // What the next request() reads (replaces the previous wish).
  void want(std::set<uint32_t> fragments, bool moments);
  // The run is ending: the next request() freezes the replica (every fragment read).
  void set_stopping();
  // A new learner actor (a restart): what the previous one posted no longer
  // holds; its welcome will set the replica again.
  void begin_incarnation(uint64_t incarnation);
  // The learner adopted `version` of a fragment, whose global values are `values`.
  void set_adopted(uint32_t fragment, uint64_t version, std::span<const float> values);
  // The first welcome of this incarnation was posted: steps trained before
  // its values were applied do not count.
  void set_welcomed();
  void set_booked(uint64_t steps, uint64_t tokens);
  // The run is over for this learner; the first reason is kept.
  void set_over(const std::string& why, bool failed, bool refused = false);
  void set_final_evaluation_wanted(bool wanted);

 private:
  using Clock = std::chrono::steady_clock;

  const ParamLayout layout_;
  const std::vector<Fragment> fragments_;
  const double speed_label_;
  const uint32_t batch_label_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::function<void()> notify_;
  uint64_t notify_owner_ = 0;
  std::map<uint32_t, FragmentUpdate> updates_;  // composed, by fragment
  std::vector<uint32_t> update_order_;          // fragments in the order first posted
  uint64_t posted_ = 0;                         // updates posted so far (their numbers)
  std::vector<uint64_t> last_posted_;           // by fragment: the number of its newest update
  uint64_t welcome_posted_ = UINT64_MAX;        // the number of the incarnation's first welcome's updates
  uint64_t taken_ = 0, taken_before_ = 0;       // posted_ at the last request, and at the one before it
  bool moments_asked_ = false;                  // the last request asked for moments
  std::optional<OptimizerMoments> moments_in_;
  std::set<uint32_t> wanted_;
  bool want_moments_ = false;
  std::deque<ReplicaStep> steps_;
  uint64_t handed_ = 0;    // steps handed so far (their numbers)
  uint64_t released_ = 0;  // every step up to this number holds no lent memory any more
  bool copying_ = false;   // steps() is copying lent memory out of the lock: nothing is released meanwhile
  ReplicaState state_;
  std::vector<float> global_;
  Clock::time_point last_boundary_ = Clock::now();
};

}  // namespace atl
