// The CAF type-ID block: every type and atom that actors exchange.
//
// Between learners and the syncer there is exactly one message type, Packet:
// the bytes of one Cap'n Proto Envelope (atoll/messages.h), so the same bytes
// cross a process boundary unchanged. CAF 0.17 silently drops a message whose
// type was not registered when it goes over the network; the build defines
// CAF_ENABLE_TYPE_ID_CHECKS so that sending an unregistered type fails to
// compile, and register_types() must be called on every actor_system_config.
// Atom texts have at most 10 characters (CAF 0.17).
#pragma once

#include <cstdint>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/type_id.hpp>

namespace atl {

struct Packet {
  std::vector<uint8_t> bytes;  // CAF 0.17 serializes this as one raw block
  friend bool operator==(const Packet&, const Packet&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Packet& x) {
  return f(caf::meta::type_name("atl::Packet"), x.bytes);
}

// The syncer's answer to (snapshot): the global model as it holds it (not as
// broadcast, which a codec may have rounded), with each fragment's version.
struct FinalModel {
  std::vector<float> theta;
  std::vector<uint64_t> versions;
  friend bool operator==(const FinalModel&, const FinalModel&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, FinalModel& x) {
  return f(caf::meta::type_name("atl::FinalModel"), x.theta, x.versions);
}

}  // namespace atl

CAF_BEGIN_TYPE_ID_BLOCK(atoll, caf::first_custom_type_id)
  CAF_ADD_TYPE_ID(atoll, (atl::Packet))
  CAF_ADD_TYPE_ID(atoll, (atl::FinalModel))
  // compute thread -> learner: (step_done, loss, tokens, compute seconds), or
  // (step_failed, what) when the step threw
  CAF_ADD_ATOM(atoll, atl, step_done_atom, "stepdone")
  CAF_ADD_ATOM(atoll, atl, step_failed_atom, "stepfailed")
  // exchange -> learner trained outside atoll: the user's loop handed steps over
  CAF_ADD_ATOM(atoll, atl, replica_step_atom, "replstep")
  // syncer -> itself: (timer, kind, id, round), one of the core's timers
  // (SyncerEffects::Timer: kind as a number) fell due; learner -> itself:
  // (timer, kind, tag), one of its session's (LearnerEffects::Timer)
  CAF_ADD_ATOM(atoll, atl, timer_atom, "timer")
  // periodic housekeeping (metrics, checkpoints)
  CAF_ADD_ATOM(atoll, atl, tick_atom, "tick")
  // syncer -> checkpointer: (save, Packet file) ; (load, fingerprint) -> Packet file or empty;
  // (point, k, Packet file): point k of the curve, of a shard held apart from the others;
  // Run::checkpoint_now -> syncer: (save) -> Packet, a checkpoint of now (empty: checkpoints are off)
  CAF_ADD_ATOM(atoll, atl, save_atom, "save")
  CAF_ADD_ATOM(atoll, atl, load_atom, "load")
  CAF_ADD_ATOM(atoll, atl, point_atom, "point")
  // -> syncer: (snapshot) -> FinalModel, the global model as it holds it
  CAF_ADD_ATOM(atoll, atl, snapshot_atom, "snapshot")
  // supervisor -> itself: (restart, child)
  CAF_ADD_ATOM(atoll, atl, restart_atom, "restart")
  // chaos -> learner: (crash) throws; (stall, seconds) no step for that long;
  // (slow, factor, seconds) steps take factor times as long for that long
  CAF_ADD_ATOM(atoll, atl, crash_atom, "crash")
  CAF_ADD_ATOM(atoll, atl, stall_atom, "stall")
  CAF_ADD_ATOM(atoll, atl, slow_atom, "slow")
  // chaos -> itself: (fault, index) a planned fault is due; (poll) check step triggers
  CAF_ADD_ATOM(atoll, atl, fault_atom, "fault")
  CAF_ADD_ATOM(atoll, atl, poll_atom, "poll")
  // chaos -> itself: (random_fault, learner) a learner's next random failure
  CAF_ADD_ATOM(atoll, atl, random_fault_atom, "randfault")
  // door -> gateway or link (atoll/door.h's events): (door_opened, conn,
  // learner, purpose, peer), (door_frame, conn, Packet), (door_closed, conn,
  // why); gateway or link -> a stand-in: (door_frame, Packet)
  CAF_ADD_ATOM(atoll, atl, door_opened_atom, "dooropened")
  CAF_ADD_ATOM(atoll, atl, door_frame_atom, "doorframe")
  CAF_ADD_ATOM(atoll, atl, door_closed_atom, "doorclosed")
  // -> syncer link: (relink) connect every learner; (relink, learner) that one again
  CAF_ADD_ATOM(atoll, atl, relink_atom, "relink")
  // Run -> syncer: (end, why) the run ends: the last rounds, then Done;
  // (seal) no more waiting for them: the global model is final now
  CAF_ADD_ATOM(atoll, atl, end_atom, "endrun")
  CAF_ADD_ATOM(atoll, atl, seal_atom, "seal")
  // Membership (docs/design.md section 6):
  // -> syncer: (claim) -> Packet, a Welcome naming a free open slot for a
  // learner of the asker's process, or a Reject (full); the gateway asks
  // (claim, process) for a learner process that proved `process` at the door
  CAF_ADD_ATOM(atoll, atl, claim_atom, "claim")
  // -> learner supervisor: (join, speed, batch) -> uint32_t: claim a slot and
  // start a learner in it; (retire, learner): do not restart it again
  CAF_ADD_ATOM(atoll, atl, join_atom, "join")
  CAF_ADD_ATOM(atoll, atl, retire_atom, "retire")
  // -> learner: (leave, reason, drain seconds) depart in order
  CAF_ADD_ATOM(atoll, atl, leave_atom, "leave")
  // chaos -> itself: (evict, learner) a preempted learner's grace is over;
  // (spot, slot) the next random preemption of an open slot's learner;
  // (rejoin, speed, batch) spot capacity is back: a newcomer joins
  CAF_ADD_ATOM(atoll, atl, evict_atom, "evict")
  CAF_ADD_ATOM(atoll, atl, spot_atom, "spot")
  CAF_ADD_ATOM(atoll, atl, rejoin_atom, "rejoin")
CAF_END_TYPE_ID_BLOCK(atoll)

namespace atl {

// Registers the block with a config: needed for anything sent over the network.
inline void register_types(caf::actor_system_config& cfg) { cfg.add_message_types<caf::id_block::atoll>(); }

}  // namespace atl
