// The checkpointer: writes the syncer's checkpoints (fsync, crash-safe, the
// newest `keep`) and reads the newest valid one back for a restarted syncer.
// Detached: fsync must not stall the scheduler. The files are CheckpointStore's
// (atoll/checkpoint.h); this actor only moves bytes between it and the syncer.
#include <caf/all.hpp>

#include "actors.h"
#include "atoll/atoms.h"
#include "atoll/log.h"

namespace atl {
namespace {

caf::behavior checkpointer(caf::event_based_actor* self, std::shared_ptr<CheckpointStore> store,
                           std::shared_ptr<Directory> directory, std::shared_ptr<RunRecords> records,
                           std::string name) {
  self->attach_functor([directory, name, addr = self->address()] { directory->erase(name, addr); });
  return {
      [store, records, name](save_atom, Packet& file) {
        auto written = store->write_encoded(file.bytes);
        if (!written.ok()) {
          log_error(name + ": " + written.status().to_string());
          return;
        }
        ++records->counters.checkpoints;
        log_info(name + ": wrote " + *written);
      },
      [store, name](point_atom, uint32_t point, Packet& file) {  // a point of the curve (a shard held apart)
        auto written = store->write_point(point, file.bytes);
        if (!written.ok()) log_error(name + ": point " + std::to_string(point) + " of the curve: " + written.status().to_string());
        else log_info(name + ": wrote " + *written);
      },
      [store, name](load_atom, uint64_t fingerprint) -> Packet {
        auto latest = store->load_latest(fingerprint, [&name](const std::string& w) { log_warn(name + ": " + w); });
        if (!latest.ok()) {
          log_warn(name + ": " + latest.status().to_string());
          return {};
        }
        return *latest ? Packet{encode_checkpoint(**latest)} : Packet{};
      },
  };
}

}  // namespace

caf::actor spawn_checkpointer(caf::actor_system& sys, std::shared_ptr<CheckpointStore> store,
                              std::shared_ptr<Directory> directory, std::shared_ptr<RunRecords> records,
                              uint32_t shard) {
  // Entered here, not when its thread first runs: the syncer started right
  // after it must find it, or a fresh process would not restore.
  const std::string name = Directory::checkpointer_name(shard);
  auto handle = sys.spawn<caf::detached>(checkpointer, std::move(store), directory, std::move(records), name);
  directory->put(name, handle);
  return handle;
}

}  // namespace atl
