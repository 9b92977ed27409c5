// Across processes (atoll/cluster.h): the actors that stand in for the far
// side of a door (atoll/door.h). No CAF actor handle ever leaves this
// process; only framed atoll messages do.
//
//   syncer process:  gateway: owns the listening door's events; per opened
//                    connection a `remote learner` actor, which the syncer
//                    sees as that learner (it answers and monitors it)
//   learner process: link: owns the connecting door's events; per opened
//                    connection a `remote syncer` actor, which the learner
//                    sees as the syncer
//
// A connection that closes ends its stand-in, so the syncer sees a failed
// learner and a learner a lost syncer, exactly as with actors in one
// process. The gateway and the door outlive the syncer actor: its restarts
// stay invisible to the network.
#include "atoll/cluster.h"

#include <caf/all.hpp>

#include <charconv>
#include <condition_variable>
#include <map>
#include <mutex>

#include "actors.h"
#include "timespan.h"
#include "atoll/atoms.h"
#include "atoll/log.h"

namespace atl {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kBackoffInitial = 0.1, kBackoffMax = 5.0;  // seconds between connection attempts
constexpr size_t kTopologyFrameBytes = size_t{1} << 20;     // a Welcome that carries only the topology
constexpr auto kClaimTimeout = std::chrono::seconds(5);     // the syncer's answer to a claim, at the gateway

// Door events become messages to `target` (set before the door listens or connects).
DoorEvents events_to(std::shared_ptr<caf::actor> target) {
  return {
      [target](uint64_t conn, uint32_t learner, Purpose purpose, uint64_t process, const std::string& peer) {
        caf::anon_send(*target, door_opened_atom_v, conn, learner, static_cast<uint32_t>(purpose), process, peer);
      },
      [target](uint64_t conn, std::vector<uint8_t> bytes) {
        caf::anon_send(*target, door_frame_atom_v, conn, Packet{std::move(bytes)});
      },
      [target](uint64_t conn, const std::string& why) { caf::anon_send(*target, door_closed_atom_v, conn, why); },
  };
}

// ---- the syncer's side

// Stands in for one learner's connection: frames from it go to the current
// syncer (with this actor as the sender, and the peer's process, proven in
// its Hello); packets from the syncer go out through the door.
caf::behavior remote_learner(caf::event_based_actor* self, std::shared_ptr<Door> door, uint64_t conn,
                             uint64_t process, std::shared_ptr<Directory> directory, std::string syncer_name) {
  return {
      [=](door_frame_atom, Packet& p) {
        if (caf::actor syncer = directory->get(syncer_name)) self->send(syncer, std::move(p), process);
        // No syncer right now (it restarts): the learner's register retry and resync cover the loss.
      },
      [=](Packet& p) { door->send(conn, std::move(p.bytes)); },
      [=](door_closed_atom) { self->quit(); },  // normal: the gateway it is linked to goes on
  };
}

struct GatewayState {
  static inline const char* name = "gateway";
  GatewayArgs args;
  struct Peer {
    caf::actor stand_in;
    uint32_t learner = 0;
    std::string address;
  };
  std::map<uint64_t, Peer> peers;  // by connection
};
using GatewayActor = caf::stateful_actor<GatewayState>;

caf::behavior gateway(GatewayActor* self, GatewayArgs args) {
  self->state.args = std::move(args);
  // Without the gateway no learner can reach the syncer: end the run, do not hang.
  self->attach_functor([records = self->state.args.records] {
    if (!records->latch.finished())
      records->fail(Status::unavailable("the gateway stopped: learners can no longer reach the syncer"));
  });
  return {
      [self](door_opened_atom, uint64_t conn, uint32_t learner, uint32_t purpose, uint64_t process,
             const std::string& peer) {
        auto& st = self->state;
        if (static_cast<Purpose>(purpose) == Purpose::kClaim) {  // a learner without an id asks for a slot
          caf::actor syncer = st.args.directory->get(Directory::syncer_name(st.args.shard));
          if (!syncer) {  // it restarts: the claimant asks again
            st.args.door->close(conn, "the syncer is restarting; ask again");
            return;
          }
          auto door = st.args.door;
          self->request(syncer, kClaimTimeout, claim_atom_v, process)
              .then(
                  [door, conn](Packet& answer) {
                    door->send(conn, std::move(answer.bytes));
                    door->close(conn, "claim answered");
                  },
                  [door, conn](caf::error& e) { door->close(conn, "the syncer did not answer the claim: " + to_string(e)); });
          return;
        }
        if (static_cast<Purpose>(purpose) == Purpose::kTopology) {
          Welcome w;
          w.learner = learner;
          w.topology = st.args.topology;
          w.layout = st.args.layout;
          st.args.door->send(conn, encode_message(w));
          st.args.door->close(conn, "topology sent");
          return;
        }
        // Linked: it ends with the gateway (user_shutdown), and its own normal end is no news.
        caf::actor stand_in = self->spawn<caf::linked>(remote_learner, st.args.door, conn, process, st.args.directory,
                                                       Directory::syncer_name(st.args.shard));
        st.peers[conn] = {stand_in, learner, peer};
        log_info("learner " + std::to_string(learner) + " connected from " + peer);
      },
      [self](door_frame_atom, uint64_t conn, Packet& p) {
        auto& st = self->state;
        if (auto it = st.peers.find(conn); it != st.peers.end()) self->send(it->second.stand_in, door_frame_atom_v, std::move(p));
      },
      [self](door_closed_atom, uint64_t conn, const std::string& why) {
        auto& st = self->state;
        const auto it = st.peers.find(conn);
        if (it == st.peers.end()) {
          if (why.starts_with("refused")) ++st.args.records->counters.gateway_refusals;
          return;
        }
        if (!st.args.records->latch.finished())
          log_warn("learner " + std::to_string(it->second.learner) + " at " + it->second.address + ": " + why);
        // The syncer monitors the stand-in: it now counts the learner as failed.
        self->send(it->second.stand_in, door_closed_atom_v);
        st.peers.erase(it);
      },
  };
}

// ---- a learner process's side

// Stands in for the syncer, to one learner of this process.
caf::behavior remote_syncer(caf::event_based_actor* self, std::shared_ptr<Door> door, uint64_t conn, uint32_t learner,
                            uint32_t shard, std::shared_ptr<Directory> directory) {
  const std::string name = Directory::syncer_of(learner, shard);
  directory->put(name, caf::actor_cast<caf::actor>(self));
  self->attach_functor([directory, name, addr = self->address()] { directory->erase(name, addr); });
  return {
      [=](door_frame_atom, Packet& p) {
        if (caf::actor l = directory->get(Directory::learner(learner))) self->send(l, std::move(p));
      },
      [=](Packet& p) { door->send(conn, std::move(p.bytes)); },
      [=](door_closed_atom) { self->quit(); },  // normal: the link it is linked to goes on
  };
}

struct LinkState {
  static inline const char* name = "syncer link";
  SyncerLinkArgs args;
  struct Learner {
    uint64_t conn = 0;  // the connection being made or open (0: none)
    caf::actor stand_in;
    double backoff = kBackoffInitial;
    Clock::time_point lost_since = Clock::now();
    int failures = 0;  // attempts since the last success (only the first is logged)
    std::string why;        // the last connection's end
    bool was_open = false;  // it had opened (a lost syncer, not a failed attempt)
  };
  std::map<uint32_t, Learner> learners;
  std::map<uint64_t, uint32_t> by_conn;
};
using LinkActor = caf::stateful_actor<LinkState>;

void connect(LinkActor* self, uint32_t id) {
  auto& st = self->state;
  auto& l = st.learners[id];
  l.conn = st.args.door->connect(st.args.host, st.args.port, id, Purpose::kJoin, st.args.max_message_bytes);
  st.by_conn[l.conn] = id;
}

caf::behavior syncer_link(LinkActor* self, SyncerLinkArgs args) {
  self->state.args = std::move(args);
  return {
      [self](relink_atom) {  // the first message: every learner of this process connects
        for (uint32_t id : self->state.args.learners)
          if (self->state.learners[id].conn == 0) connect(self, id);
      },
      [self](door_opened_atom, uint64_t conn, uint32_t id, uint32_t, uint64_t, const std::string& peer) {
        auto& st = self->state;
        auto& l = st.learners[id];
        if (l.conn != conn) return;
        l.stand_in = self->spawn<caf::linked>(remote_syncer, st.args.door, conn, id, st.args.shard, st.args.directory);
        st.args.records->readiness.set_syncer_link(id, st.args.shard, true);
        log_info("learner " + std::to_string(id) + ": connected to the " + Directory::syncer_name(st.args.shard) + " at " + peer);
        l.backoff = kBackoffInitial;
        l.failures = 0;
      },
      [self](door_frame_atom, uint64_t conn, Packet& p) {
        auto& st = self->state;
        const auto it = st.by_conn.find(conn);
        if (it == st.by_conn.end()) return;
        auto& l = st.learners[it->second];
        if (l.stand_in) self->send(l.stand_in, door_frame_atom_v, std::move(p));
        else if (caf::actor learner = st.args.directory->get(Directory::learner(it->second)))
          self->send(learner, std::move(p));  // a refusal before the connection opened
      },
      [self](door_closed_atom, uint64_t conn, const std::string& why) {
        auto& st = self->state;
        const auto it = st.by_conn.find(conn);
        if (it == st.by_conn.end()) return;
        const uint32_t id = it->second;
        st.by_conn.erase(it);
        auto& l = st.learners[id];
        if (l.conn != conn) return;
        l.conn = 0;
        const bool was_open = static_cast<bool>(l.stand_in);
        if (l.stand_in) {
          self->send(l.stand_in, door_closed_atom_v);  // its learner sees the syncer go
          l.stand_in = nullptr;
          l.lost_since = Clock::now();
          st.args.records->readiness.set_syncer_link(id, st.args.shard, false);
        }
        if (st.args.records->latch.finished()) return;  // the run is over: the syncer went away in order
        // Decided after the backoff: a syncer that ends the run sends Done and
        // closes, and the Done reaches the learner after this event.
        l.why = why;
        l.was_open = was_open;
        self->delayed_send(self, timespan_of(l.backoff), relink_atom_v, id);
        l.backoff = std::min(kBackoffMax, l.backoff * 2);
      },
      [self](relink_atom, uint32_t id) {
        auto& st = self->state;
        auto& l = st.learners[id];
        if (st.args.records->latch.finished() || l.conn != 0) return;
        const std::string where = st.args.host + ":" + std::to_string(st.args.port);
        const std::string syncer = Directory::syncer_name(st.args.shard);
        if (l.was_open)
          log_warn("learner " + std::to_string(id) + ": lost the " + syncer + " at " + where + " (" + l.why + "); reconnecting");
        else if (l.failures++ == 0)
          log_warn("learner " + std::to_string(id) + ": cannot reach the " + syncer + " at " + where + " (" + l.why +
                   "); retrying with backoff");
        l.was_open = false;
        const double waited = std::chrono::duration<double>(Clock::now() - l.lost_since).count();
        if (waited > st.args.give_up_seconds) {
          st.args.records->fail(Status::unavailable("no " + syncer + " at " + where + " for " +
                                                    std::to_string(static_cast<int>(waited)) + " s (" + l.why + ")"));
          return;
        }
        connect(self, id);
      },
  };
}

}  // namespace

DoorOptions door_options(const RunOptions::Cluster& cluster, uint32_t learners, size_t max_frame_bytes) {
  DoorOptions o;
  o.token = cluster.token;
  o.tls = {cluster.tls_certificate, cluster.tls_key, cluster.tls_ca, cluster.tls_name};
  o.link = cluster.link;
  o.learners = learners;
  o.max_frame_bytes = max_frame_bytes;
  o.heartbeat_seconds = cluster.heartbeat_seconds;
  o.timeout_seconds = cluster.connection_timeout_seconds;
  o.handshake_seconds = cluster.handshake_seconds;
  o.max_unauthenticated_per_address = cluster.max_unauthenticated_per_address;
  return o;
}

Result<DoorService> serve_learners(caf::actor_system& sys, GatewayArgs args, const Endpoint& at,
                                   const RunOptions::Cluster& cluster) {
  auto target = std::make_shared<caf::actor>();
  auto door = Door::open(door_options(cluster, learner_slots(args.topology),
                                      args.max_message_bytes),
                         events_to(target));
  if (!door.ok()) return door.status();
  DoorService s;
  s.door = std::move(*door);
  args.door = s.door;
  s.actor = sys.spawn(gateway, std::move(args));
  *target = s.actor;  // before listen(): no event comes earlier
  auto port = s.door->listen(at.host, at.port);
  if (!port.ok()) {
    caf::anon_send_exit(s.actor, caf::exit_reason::user_shutdown);
    return port.status();
  }
  s.port = *port;
  return s;
}

Result<DoorService> join_syncer(caf::actor_system& sys, SyncerLinkArgs args, const RunOptions::Cluster& cluster,
                                uint32_t learners) {
  auto target = std::make_shared<caf::actor>();
  auto door = Door::open(door_options(cluster, learners, args.max_message_bytes), events_to(target));
  if (!door.ok()) return door.status();
  DoorService s;
  s.door = std::move(*door);
  args.door = s.door;
  s.actor = sys.spawn(syncer_link, std::move(args));
  *target = s.actor;
  caf::anon_send(s.actor, relink_atom_v);  // now that events can reach it: connect
  return s;
}

Result<Endpoint> parse_endpoint(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    return Status::invalid_argument("'" + std::string(text) + "': expected HOST:PORT, e.g. 127.0.0.1:7070");
  Endpoint e;
  e.host = std::string(text.substr(0, colon));
  if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']') e.host = e.host.substr(1, e.host.size() - 2);
  const std::string_view port = text.substr(colon + 1);
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc{} || end != port.data() + port.size() || value > 65535)
    return Status::invalid_argument("'" + std::string(text) + "': the port must be a number from 0 to 65535");
  e.port = static_cast<uint16_t>(value);
  return e;
}

namespace {

// One question to the syncer's door that one frame answers (a topology, a
// slot): a door of its own, without actors, one connection per attempt, its
// answer (or why it closed) handed to this thread by connection, so that a
// late event of an earlier attempt is never taken for this one's. Retries
// with backoff while the syncer is not there; a Reject ends it at once.
Result<Welcome> ask_syncer(const Endpoint& syncer, uint32_t learner, Purpose purpose,
                           const RunOptions::Cluster& cluster, double wait_seconds) {
  struct Answer {
    std::mutex mu;
    std::condition_variable cv;
    std::map<uint64_t, std::vector<uint8_t>> frame;  // the first of each connection
    std::map<uint64_t, std::string> closed;
  };
  auto answer = std::make_shared<Answer>();
  DoorEvents events;
  events.frame = [answer](uint64_t conn, std::vector<uint8_t> bytes) {
    std::lock_guard lock(answer->mu);
    answer->frame.try_emplace(conn, std::move(bytes));
    answer->cv.notify_all();
  };
  events.closed = [answer](uint64_t conn, const std::string& why) {
    std::lock_guard lock(answer->mu);
    answer->closed[conn] = why;
    answer->cv.notify_all();
  };
  auto door = Door::open(door_options(cluster, 0, kTopologyFrameBytes), std::move(events));
  if (!door.ok()) return door.status();
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_seconds));
  const std::string who = purpose == Purpose::kClaim ? "a learner without an id" : "learner " + std::to_string(learner);
  double backoff = kBackoffInitial;
  std::string last_error;
  for (bool first = true;; first = false) {
    if (!first) {
      if (Clock::now() + timespan_of(backoff) > deadline) {
        const std::string why = " at " + syncer.to_string() + " within " +
                                std::to_string(static_cast<int>(wait_seconds)) + " s: " + last_error;
        // Reached but closed in the handshake (TLS, certificates, plain against TLS) until the end: a
        // configuration no restart mends, so refused; unreachable (the door's "cannot connect"): may be back.
        if (last_error.rfind("cannot connect", 0) == 0 || last_error == "no answer")
          return Status::unavailable("no syncer" + why);
        return Status::refused("no handshake with the syncer" + why);
      }
      std::this_thread::sleep_for(timespan_of(backoff));
      backoff = std::min(kBackoffMax, backoff * 2);
    }
    const uint64_t conn = (*door)->connect(syncer.host, syncer.port, learner, purpose, kTopologyFrameBytes);
    std::unique_lock lock(answer->mu);
    // The handshake has its own deadline in the door; this one only bounds a wait that cannot end otherwise.
    answer->cv.wait_for(lock, std::chrono::duration<double>(cluster.handshake_seconds + 5),
                        [&] { return answer->frame.count(conn) || answer->closed.count(conn); });
    const auto got = answer->frame.find(conn);
    if (got == answer->frame.end()) {
      const auto why = answer->closed.find(conn);
      last_error = why == answer->closed.end() ? "no answer" : why->second;
      if (first) log_warn("waiting for the syncer at " + syncer.to_string() + " (" + last_error + ")");
      continue;
    }
    auto msg = decode_message(got->second);
    if (!msg.ok()) return Status::corruption("the syncer's answer: " + msg.status().to_string());
    if (auto* w = std::get_if<Welcome>(&*msg)) return std::move(*w);
    if (auto* r = std::get_if<Reject>(&*msg))
      return Status::refused("the syncer at " + syncer.to_string() + " refused " + who + " (" +
                             reject_reason_name(r->reason) + "): " + r->detail);
    if (auto* d = std::get_if<Done>(&*msg))  // an idle syncer, after its run (atoll/over_door.h)
      return Status::over("the syncer at " + syncer.to_string() + " says " + d->reason);
    return Status::corruption("the syncer answered with a " + std::string(message_name(*msg)));
  }
}

}  // namespace

Result<Topology> fetch_topology(const Endpoint& syncer, uint32_t learner, const RunOptions::Cluster& cluster,
                                double wait_seconds, std::vector<NamedShape>* layout) {
  auto w = ask_syncer(syncer, learner, Purpose::kTopology, cluster, wait_seconds);
  if (!w.ok()) return w.status();
  if (layout) *layout = std::move(w->layout);
  return std::move(w->topology);
}

Result<std::unique_ptr<OverDoor>> serve_run_over(const Endpoint& at, const RunOptions::Cluster& cluster,
                                                 const std::string& why) {
  return OverDoor::open(at.host, at.port, door_options(cluster, 0, DoorOptions{}.max_frame_bytes), why);
}

Result<SlotClaim> claim_slot(const Endpoint& syncer, const RunOptions::Cluster& cluster, double wait_seconds) {
  auto w = ask_syncer(syncer, 0, Purpose::kClaim, cluster, wait_seconds);
  if (!w.ok()) return w.status();
  if (w->learner < w->topology.learners.size() || w->learner >= learner_slots(w->topology))
    return Status::corruption("the syncer gave open slot " + std::to_string(w->learner) + ", which its topology (" +
                              std::to_string(w->topology.learners.size()) + " fixed of " +
                              std::to_string(learner_slots(w->topology)) + " slots) has not");
  return SlotClaim{w->learner, std::move(w->topology), std::move(w->layout)};
}

}  // namespace atl
