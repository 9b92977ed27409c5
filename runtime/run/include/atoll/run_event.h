// RunEvent: one thing that happened to a run, typed; its file form is one
// line of the event tape (JSON lines), the same fields as ever, so old tapes
// still replay:
//   {"t":12.345,"event":"inject","kind":"kill","hit":1,"learner":2,"recover_after":5,"plan":"p.toml:9"}
//   {"t":12.346,"event":"recovered","what":"restart","child":"learner 2","incarnation":2}
//   {"t":17.401,"event":"recovered","what":"registration","learner":2,"incarnation":2,"seconds":5.06}
//   {"t":17.650,"event":"recovered","what":"first_merge","learner":2,"incarnation":2,"seconds":0.25}
//   {"t":17.402,"event":"reintegrated","learner":2,"incarnation":2,"seconds":5.1}
//   {"t":30.000,"event":"gave_up","child":"learner 3"}
//   {"t":31.000,"event":"version_decreased","fragment":4,"from":12,"to":11}
//   {"t":32.000,"event":"failed","why":"a learner process was refused: bad token"}
//   {"t":40.000,"event":"joined","learner":4,"incarnation":1,"speed":1,"batch_size":8}
//   {"t":90.000,"event":"departed","learner":4,"incarnation":1,"orderly":1,"reason":"SIGTERM"}
// `t` is seconds since the run started. A number that is not finite is left
// out (JSON has no NaN); a reader takes the field's default.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "atoll/fault_kind.h"
#include "atoll/status.h"

namespace atl {

// A supervised child of a run, by role: the key of its restart count and of
// its place in the actor directory ("learner 3", "syncer", and for a
// sharded syncer in one process "syncer shard 1", "checkpointer shard 1").
struct Child {
  enum class Role : uint8_t {
    kLearner, kSyncer, kCheckpointer, kRootSupervisor, kSyncerSupervisor, kLearnerSupervisor, kOther };
  Role role = Role::kOther;
  uint32_t learner = 0;  // kLearner
  std::string other;     // kOther: its name ("chaos injector")
  uint32_t shard = 0;    // kSyncer, kCheckpointer, kSyncerSupervisor: of syncer.shards

  static Child of_learner(uint32_t id) { return {Role::kLearner, id, {}}; }
  static Child of_shard(Role role, uint32_t shard) { return {role, 0, {}, shard}; }
  static Child named(std::string_view name);  // the inverse of name()
  std::string name() const;
  // The syncer's side of a run: if it is given up, the run cannot go on.
  bool holds_syncer() const { return role == Role::kSyncer || role == Role::kCheckpointer ||
                                     role == Role::kSyncerSupervisor || role == Role::kRootSupervisor; }
  friend bool operator==(const Child&, const Child&) = default;
};

constexpr double kUnknownSeconds = std::numeric_limits<double>::quiet_NaN();

namespace event {

// A fault the injector (or Run::kill_learner) tried: `hit` if its target was
// running (join: if a slot was free; `learner` is the slot it was given).
struct Injected {
  FaultKind kind = FaultKind::kKill;
  bool hit = false;
  int64_t learner = -1;       // -1: not a learner's fault, or every link
  double recover_after = 0.0; // seconds; 0: none
  double duration = 0.0;      // seconds; 0: none
  double factor = 1.0;        // slow
  double seconds = 0.0;       // delay, reorder
  double probability = 1.0;
  double speed = 0.0;         // join: the newcomer's speed (0: its slot's default)
  uint32_t batch_size = 0;    // join: its batch size (0: its slot's default)
  uint32_t shard = 0;         // kill_syncer, kill_checkpointer: which of syncer.shards
  std::string plan;           // where the plan says so ("plan.toml:12", "random"); "" none
  std::string by;             // who, outside a plan ("Run::kill_learner"); "" none
};
// A supervisor started a failed child again.
struct Restarted { Child child; uint64_t incarnation = 0; };
// A supervisor gave up on a child after too many failures.
struct GaveUp { Child child; };
// The syncer registered a learner back after a failure; seconds since the
// failure was seen (NaN: it was not, e.g. while the syncer was down).
struct Registered { uint32_t learner = 0; uint64_t incarnation = 0; double seconds = kUnknownSeconds; };
// The syncer merged a returned learner's first progress; seconds since its welcome.
struct FirstMerge { uint32_t learner = 0; uint64_t incarnation = 0; double seconds = kUnknownSeconds; };
// A restarted learner adopted its welcome; seconds from its start.
struct Reintegrated { uint32_t learner = 0; uint64_t incarnation = 0; double seconds = kUnknownSeconds; };
// A published global version went down (not while a restarted syncer recovers).
struct VersionDecreased { uint32_t fragment = 0; uint64_t from = 0, to = 0; };
// The run cannot go on (a learner process refused for a bad token, ...).
struct Failed { std::string why; };
// A learner became a member of the run (docs/design.md section 6): it was
// welcomed into an open slot, or back into a fixed one it had departed from.
// Its own speed and batch size (0: not given).
struct Joined { uint32_t learner = 0; uint64_t incarnation = 0; double speed = 0.0; uint32_t batch_size = 0; };
// A member left the run: in order (it said so; its last progress is merged,
// not a failure), or released (it failed and did not come back in time).
struct Departed { uint32_t learner = 0; uint64_t incarnation = 0; bool orderly = true; std::string reason; };

}  // namespace event

using RunEvent = std::variant<event::Injected, event::Restarted, event::GaveUp, event::Registered,
                              event::FirstMerge, event::Reintegrated, event::VersionDecreased, event::Failed,
                              event::Joined, event::Departed>;

struct TimedEvent {
  double t = 0.0;  // seconds since the run started
  RunEvent event;
};

// The learner an event is about; -1: none.
int64_t learner_of(const RunEvent& e);
// A short kind for people and plots: "fault kill", "restart", "registration",
// "first_merge", "reintegrated", "gave up", "version decreased", "failed",
// "joined", "departed".
std::string kind_of(const RunEvent& e);

// One tape line, without the newline.
std::string encode_event_line(const TimedEvent& e);
// The same fields as text for people and CSV cells: "inject kind=kill hit=1 learner=2".
std::string event_text(const RunEvent& e);
// The one reader of tape lines. nullopt: a well-formed line of an event this
// build does not know (a newer tape); an error names the column.
Result<std::optional<TimedEvent>> decode_event_line(std::string_view line);

}  // namespace atl
