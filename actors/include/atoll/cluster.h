// Across processes (DESIGN section 10): the syncer in one process, learners in
// others, over CAF's middleman (TCP), with the same actors and messages as in
// one process.
//
//   syncer process:  Run::start(topology, {.cluster = {.listen = "0.0.0.0:7070", .token = ...}})
//   learner process: auto t = fetch_topology(endpoint, id, cluster, 60);
//                    Run::start(*t, {.cluster = {.join = "host:7070", .learner_ids = {id}, .token = ...}})
//
// The syncer process publishes a gateway actor on its port. The gateway
// answers topology queries from learners that prove the cluster token
// (atoll/cluster_token.h) and hands every packet to the current syncer, so
// the syncer's restarts stay invisible to the network. A learner process
// keeps one link to the gateway: it reconnects with backoff when the
// connection drops and gives up after a configured time without it.
// Heartbeats every second find a silent peer (a frozen host, a half-open
// connection) within the connection timeout; the syncer then treats the
// learner as failed, as it would a crashed actor.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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
// `cluster` gives the token and, if set, the TLS files.
Result<Topology> fetch_topology(const Endpoint& syncer, uint32_t learner, const RunOptions::Cluster& cluster,
                                double wait_seconds);

}  // namespace atl
