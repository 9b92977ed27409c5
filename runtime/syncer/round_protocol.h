// RoundProtocol: when a mode makes a new global version (internal).
//
// SyncerCore admits learners, checks every push and keeps Theta; it hands
// the protocol of the run's mode what it needs to decide when to merge:
//
//   decoupled (make_decoupled_rounds)   per fragment: due, pull, quorum,
//                                       grace, merge, Nesterov; a last round
//                                       per fragment when the run ends
//   dp, elastic_dp (make_synchronous_rounds)
//                                       one step at a time: every learner of
//                                       the group sends its gradient, AdamW
//                                       applies their mean; elastic_dp drops
//                                       a failed learner from the group
//
// Every method runs on the syncer's one thread, between the core's own
// changes; effects go into `fx` in the order they must be carried out.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "atoll/checkpoint.h"
#include "syncer_state.h"

namespace atl {

class RoundProtocol {
 public:
  virtual ~RoundProtocol() = default;

  // A learner was welcomed (new, back, or resynchronized).
  virtual void on_welcome(uint32_t learner, SteadyTime now, SyncerEffects& fx) = 0;
  // A learner reported its progress (the core has stored it in its record).
  virtual void on_progress(uint32_t learner, SteadyTime now, SyncerEffects& fx) = 0;
  // Decoupled: true if `push` answers a pull of a round that has closed. It
  // is counted late and goes no further (checked before staleness).
  virtual bool answers_closed_round(const Push& push) const = 0;
  // Such an answer arrived (it is counted late): how long learners take to answer.
  virtual void on_late_answer(const Push& /*push*/, SteadyTime /*now*/) {}
  // A push that passed every check.
  virtual void on_answer(const Push& push, Answer answer, SteadyTime now, SyncerEffects& fx) = 0;
  // A push from `learner` was refused, or carried progress merged already:
  // it still answers a pull, so a round must not wait for it any longer.
  virtual void on_no_answer(uint32_t learner, uint32_t fragment, SteadyTime now, SyncerEffects& fx) = 0;
  // `learner` went down (the core has marked its record).
  virtual void on_learner_down(uint32_t learner, SteadyTime now, SyncerEffects& fx) = 0;
  // `learner` stopped being a member (it left in order, or was released):
  // rounds stop waiting for it; a leaver's last answers make their fragments due.
  virtual void on_departure(uint32_t learner, SteadyTime now, SyncerEffects& fx) = 0;
  // True while a round holds an answer of `learner` it may still merge, or
  // waits for one: a leaver is told Done only when this is false.
  virtual bool holds_answers_of(uint32_t learner) const = 0;
  // A timer of the protocol's kinds fired (grace, quorum, reconfigure, flush).
  virtual void on_timer(const SyncerEffects::Timer& timer, SteadyTime now, SyncerEffects& fx) = 0;
  // The fragment's global copy was replaced (recovered from a learner's
  // base, or restored): answers and any open round no longer apply. With
  // `fx`, an open round is cancelled and noted; without, forgotten silently.
  virtual void fragment_replaced(uint32_t fragment, SyncerEffects* fx) = 0;

  // The run ends: the model is final once flushed().
  virtual void begin_flush(SteadyTime now, SyncerEffects& fx) = 0;
  virtual bool flushing() const = 0;
  virtual bool flushed() const = 0;

  // dp modes keep AdamW on the syncer: its state for a checkpoint (borrowed), and back.
  virtual std::optional<CheckpointView::OptimizerRecord> optimizer() const { return std::nullopt; }
  // Fails when the state does not fit; NotFound when the mode has no optimizer here.
  virtual Status restore_optimizer(const CheckpointState::OptimizerRecord&) {
    return Status::not_found("no optimizer on the syncer in this mode");
  }
};

std::unique_ptr<RoundProtocol> make_decoupled_rounds(SyncerState& state);
std::unique_ptr<RoundProtocol> make_synchronous_rounds(SyncerState& state);  // dp, elastic_dp

}  // namespace atl
