// Directory: the current handle of every actor of a run in this process.
//
// Restarts give actors new handles; whoever needs to reach the syncer, the
// checkpointer or a learner asks here instead of holding a handle that may be
// dead. An actor enters itself when it starts and leaves when it stops (only
// if the entry is still its own). Supervised children are entered under their
// Child::name() (atoll/run_event.h). Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include <caf/actor.hpp>

#include "atoll/run_event.h"

namespace atl {

class Directory {
 public:
  void put(const std::string& name, caf::actor handle) {
    std::lock_guard lock(mu_);
    entries_[name] = std::move(handle);
  }
  // Removes `name` only if it still names `handle`.
  void erase(const std::string& name, const caf::actor_addr& handle) {
    std::lock_guard lock(mu_);
    const auto it = entries_.find(name);
    if (it != entries_.end() && it->second.address() == handle) entries_.erase(it);
  }
  caf::actor get(const std::string& name) const {
    std::lock_guard lock(mu_);
    const auto it = entries_.find(name);
    return it == entries_.end() ? caf::actor{} : it->second;
  }

  // Syncer shard `shard` as learner `id` reaches it: in a learner process,
  // the stand-in of its own connection to that shard (atoll/cluster.h); else
  // the shard itself (a process holds the syncer, every shard of it, or one).
  caf::actor syncer_for(uint32_t id, uint32_t shard = 0) const {
    if (caf::actor own = get(syncer_of(id, shard))) return own;
    return get(syncer_name(shard));
  }

  static std::string learner(uint32_t id) { return Child::of_learner(id).name(); }
  static std::string syncer_of(uint32_t id, uint32_t shard = 0) {
    return syncer_name(shard) + " of learner " + std::to_string(id);
  }
  // "syncer", or "syncer shard 1" for a shard but the first: in names and log lines.
  static std::string syncer_name(uint32_t shard) { return Child::of_shard(Child::Role::kSyncer, shard).name(); }
  // "checkpointer", or "checkpointer shard 1": each shard writes its own checkpoints.
  static std::string checkpointer_name(uint32_t shard) {
    return Child::of_shard(Child::Role::kCheckpointer, shard).name();
  }
  static constexpr const char* kSyncer = "syncer";
  static constexpr const char* kCheckpointer = "checkpointer";

 private:
  mutable std::mutex mu_;
  std::map<std::string, caf::actor> entries_;
};

}  // namespace atl
