// Across processes (docs/design.md section 10): the syncer in one process, learners in
// others, each learner reaching the syncer over its own connection through
// the door (atoll/door.h), with the same actors and messages as in one
// process.
//
//   syncer process:  Run::start(topology, {.cluster = {.listen = "0.0.0.0:7070", .token = ...}})
//   learner process: auto t = fetch_topology(endpoint, id, cluster, 60);
//                    Run::start(*t, {.cluster = {.join = "host:7070", .learner_ids = {id}, .token = ...}})
//   ... without an id: auto c = claim_slot(endpoint, cluster, 60);  (then as above with c->learner)
//
// The syncer process listens on a door; each connection that proves the
// cluster token (and, with TLS, shows a learner certificate of the cluster's
// CA) gets a stand-in actor that the syncer sees as that learner. A learner
// process keeps one connection per learner, and a stand-in that its learner
// sees as the syncer; it reconnects with backoff when the connection drops
// and gives up after a configured time without it. Keepalives every second
// find a silent peer (a frozen host, a half-open connection) within the
// connection timeout; the syncer then treats the learner as failed, as it
// would a crashed actor. No CAF actor handle is ever exposed to the network.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "atoll/module_layout.h"
#include "atoll/over_door.h"
#include "atoll/run.h"
#include "atoll/status.h"
#include "atoll/topology.h"

namespace atl {

struct Endpoint {
  std::string host;
  uint16_t port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};

// "HOST:PORT" (port 0: any free one, for a listener). Errors say what is wrong.
Result<Endpoint> parse_endpoint(std::string_view text);

// Asks the syncer at `syncer` for the topology of the run, as learner
// `learner` proving the cluster token. Retries with backoff for up to `wait_seconds`
// while the syncer is not there yet; a refusal (bad token, unknown id) is
// returned at once with the syncer's reason.
// `cluster` gives the token and, if set, the TLS files and the emulated link.
// `layout`, if given, receives the model's layout as the syncer has it.
// Status::over when the syncer there is idle after its run (atoll/over_door.h).
Result<Topology> fetch_topology(const Endpoint& syncer, uint32_t learner, const RunOptions::Cluster& cluster,
                                double wait_seconds, std::vector<NamedShape>* layout = nullptr);

// A learner without an id (open membership, docs/design.md section 6): asks
// the syncer at `syncer` for a free open slot, proving the cluster token.
// The slot is reserved for this process for SyncerCore::kLeaseSeconds: start
// the learner (Run::start with cluster.learner_ids = {learner}) before then.
// Refused at once with the syncer's reason ("full": every open slot is
// taken); Unavailable when no syncer answers within wait_seconds; Over when
// the run there is over.
struct SlotClaim {
  uint32_t learner = 0;
  Topology topology;
  std::vector<NamedShape> layout;  // the model's, as the syncer has it
};
Result<SlotClaim> claim_slot(const Endpoint& syncer, const RunOptions::Cluster& cluster, double wait_seconds);

// A syncer whose run is over, idle at `at` (atoll/over_door.h): every learner
// that connects and proves the cluster token (and TLS, if set) is told `why`
// and let go, until the door is destroyed.
Result<std::unique_ptr<OverDoor>> serve_run_over(const Endpoint& at, const RunOptions::Cluster& cluster,
                                                 const std::string& why);

}  // namespace atl
