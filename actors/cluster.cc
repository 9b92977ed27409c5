// Across processes: the gateway a syncer process publishes, the link a
// learner process keeps to it, and the topology query (atoll/cluster.h).
// The only TU that includes CAF's io module.
#include "atoll/cluster.h"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <algorithm>
#include <charconv>
#include <set>
#include <thread>

#include "actors.h"
#include "atoll/atoms.h"
#include "atoll/cluster_token.h"
#include "atoll/log.h"

namespace atl {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr double kBackoffInitial = 0.1, kBackoffMax = 5.0;  // seconds between connection attempts
constexpr auto kConnectTimeout = 10s;

caf::timespan span(double seconds) {
  return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(seconds));
}

// ---- gateway: the published door of a syncer process

struct GatewayState {
  static inline const char* name = "gateway";
  GatewayArgs args;
  // Nodes that proved the token (a topology query or a register). Only they
  // reach the syncer, so only they ever learn its handle.
  std::set<caf::node_id> admitted;
};
using GatewayActor = caf::stateful_actor<GatewayState>;

void refuse_at_door(GatewayActor* self, const std::string& why) {
  ++self->state.args.board->gateway_refusals;
  const auto& sender = self->current_sender();
  log_warn("gateway: refused " + (sender ? caf::to_string(sender->node()) : std::string("an unknown sender")) +
           ": " + why);
}

Packet topology_answer(GatewayActor* self, const Packet& query) {
  const auto& st = self->state;
  auto msg = decode_message(query.bytes, 1 << 16);
  const Register* r = msg.ok() ? std::get_if<Register>(&*msg) : nullptr;
  if (!r) {
    refuse_at_door(self, "a topology query that is not a register");
    return Packet{encode_message(Reject{RejectReason::kMalformed, 0, "a topology query must be a register"})};
  }
  // The token first: a stranger learns nothing about the run.
  if (st.args.cluster_token.empty() || !check_join_proof(st.args.cluster_token, r->token, r->learner, 0, 0)) {
    refuse_at_door(self, "learner " + std::to_string(r->learner) + ": bad or missing cluster token");
    return Packet{encode_message(Reject{RejectReason::kBadToken, 0, "the cluster token does not match"})};
  }
  self->state.admitted.insert(self->current_sender()->node());
  const size_t m = st.args.topology.learners.size();
  if (r->learner >= m) {
    const std::string why = "learner id " + std::to_string(r->learner) + " is not in this topology of " +
                            std::to_string(m) + " learners (ids 0.." + std::to_string(m - 1) + ")";
    refuse_at_door(self, why);
    return Packet{encode_message(Reject{RejectReason::kUnknownLearner, 0, why})};
  }
  Welcome w;
  w.learner = r->learner;
  w.topology = st.args.topology;
  return Packet{encode_message(w)};
}

caf::behavior gateway(GatewayActor* self, GatewayArgs args) {
  self->state.args = std::move(args);
  // Without the gateway no learner can reach the syncer: end the run, do not hang.
  self->attach_functor([board = self->state.args.board] {
    if (!board->finished()) board->fail("the gateway stopped: learners can no longer reach the syncer");
  });
  // CAF lets any connected node send an exit message to an actor it knows,
  // and everyone knows the published gateway: only this process may stop it.
  // (exit_reason::kill cannot be trapped; see the README.)
  self->set_exit_handler([self](caf::exit_msg& em) {
    if (em.source.node() == self->node()) self->quit(em.reason);
    else refuse_at_door(self, "an exit message from another node");
  });
  return {
      [self](Packet& p) {
        auto& st = self->state;
        if (p.bytes.size() > st.args.max_message_bytes) {
          refuse_at_door(self, "a packet of " + std::to_string(p.bytes.size()) + " bytes (the limit is " +
                                   std::to_string(st.args.max_message_bytes) + ")");
          return;
        }
        if (!self->current_sender()) return;
        if (const auto node = self->current_sender()->node(); !st.admitted.count(node)) {
          auto msg = decode_message(p.bytes, st.args.max_message_bytes);
          const Register* r = msg.ok() ? std::get_if<Register>(&*msg) : nullptr;
          if (!r || !check_join_proof(st.args.cluster_token, r->token, r->learner, r->incarnation, r->fingerprint)) {
            refuse_at_door(self, !msg.ok() ? msg.status().to_string()
                                 : r       ? "learner " + std::to_string(r->learner) + ": bad or missing cluster token"
                                           : std::string("a ") + message_name(*msg) + " before joining");
            if (r)
              self->send(caf::actor_cast<caf::actor>(self->current_sender()),
                         Packet{encode_message(Reject{RejectReason::kBadToken, 0, "the cluster token does not match"})});
            return;
          }
          st.admitted.insert(node);
        }
        // Delegation keeps the learner as the sender: the syncer answers and
        // monitors it directly. No syncer right now (it restarts): the
        // learner's register retry and resync cover the loss.
        if (caf::actor syncer = st.args.directory->get(Directory::kSyncer)) (void)self->delegate(syncer, std::move(p));
      },
      [self](topology_atom, const Packet& query) -> Packet { return topology_answer(self, query); },
  };
}

// ---- syncer link: a learner process's connection to the gateway

struct LinkState {
  static inline const char* name = "syncer link";
  SyncerLinkArgs args;
  caf::actor gateway;
  double backoff = kBackoffInitial;
  Clock::time_point lost_since = Clock::now();
  bool connecting = false;
  int failures = 0;  // attempts since the last success (only the first is logged)
};
using LinkActor = caf::stateful_actor<LinkState>;

void retry_later(LinkActor* self) {
  auto& st = self->state;
  const double waited = std::chrono::duration<double>(Clock::now() - st.lost_since).count();
  if (waited > st.args.give_up_seconds) {
    st.args.board->fail("no syncer at " + st.args.host + ":" + std::to_string(st.args.port) + " for " +
                        std::to_string(static_cast<int>(waited)) + " s");
    self->quit();
    return;
  }
  self->delayed_send(self, span(st.backoff), relink_atom_v);
  st.backoff = std::min(kBackoffMax, st.backoff * 2);
}

void connect(LinkActor* self) {
  auto& st = self->state;
  if (st.gateway || st.connecting) return;
  st.connecting = true;
  auto& sys = self->system();
  const caf::io::middleman_actor connector =
      st.args.tls ? sys.openssl_manager().actor_handle() : sys.middleman().actor_handle();
  self->request(connector, kConnectTimeout, caf::connect_atom_v, st.args.host, st.args.port)
      .then(
          [self](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            auto& link = self->state;
            link.connecting = false;
            if (!ptr) return retry_later(self);
            link.gateway = caf::actor_cast<caf::actor>(ptr);
            self->monitor(link.gateway);
            link.args.directory->put(Directory::kSyncer, link.gateway);
            log_info("connected to the syncer at " + link.args.host + ":" + std::to_string(link.args.port));
            link.backoff = kBackoffInitial;
            link.failures = 0;
          },
          [self](caf::error& e) {
            auto& link = self->state;
            link.connecting = false;
            if (link.failures++ == 0)
              log_warn("cannot reach the syncer at " + link.args.host + ":" + std::to_string(link.args.port) + " (" +
                       self->system().render(e) + "); retrying with backoff");
            retry_later(self);
          });
}

caf::behavior syncer_link(LinkActor* self, SyncerLinkArgs args) {
  self->state.args = std::move(args);
  self->set_down_handler([self](const caf::down_msg& dm) {
    auto& st = self->state;
    if (dm.source != st.gateway.address()) return;
    st.args.directory->erase(Directory::kSyncer, st.gateway.address());
    st.gateway = nullptr;
    if (st.args.board->finished()) return self->quit();  // the run is over: the syncer went away in order
    log_warn("lost the syncer at " + st.args.host + ":" + std::to_string(st.args.port) + " (" +
             self->system().render(dm.reason) + "); reconnecting");
    st.lost_since = Clock::now();
    retry_later(self);
  });
  connect(self);
  return {
      [self](relink_atom) { connect(self); },
  };
}

struct ClientConfig : caf::actor_system_config {
  explicit ClientConfig(const RunOptions::Cluster& cluster) {
    register_types(*this);
    set("scheduler.max-threads", 1);
    enable_network(*this, cluster);
  }
};

}  // namespace

void enable_network(caf::actor_system_config& cfg, const RunOptions::Cluster& cluster) {
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval", span(cluster.heartbeat_seconds));
  // Over TLS, CAF 0.17.6's connection timeout drops healthy connections
  // within 0.1-0.3 s (measured with a 5 s timeout), so it stays off there:
  // a frozen peer is then found only when TCP gives up.
  if (!cluster.tls()) cfg.set("middleman.connection-timeout", span(cluster.connection_timeout_seconds));
  if (cluster.tls()) {
    cfg.load<caf::openssl::manager>();
    cfg.openssl_certificate = cluster.tls_certificate;
    cfg.openssl_key = cluster.tls_key;
    cfg.openssl_cafile = cluster.tls_ca;  // set: peers must present a certificate it signed
  }
}

caf::actor spawn_gateway(caf::actor_system& sys, GatewayArgs args) { return sys.spawn(gateway, std::move(args)); }

Result<uint16_t> publish_gateway(caf::actor_system& sys, const caf::actor& gateway, const std::string& host,
                                 uint16_t port, bool tls) {
  const char* at = host.empty() ? nullptr : host.c_str();
  auto bound = tls ? caf::openssl::publish(gateway, port, at, true) : sys.middleman().publish(gateway, port, at, true);
  if (!bound) return Status::unavailable("cannot listen on " + host + ":" + std::to_string(port) + ": " + sys.render(bound.error()));
  return *bound;
}

caf::actor spawn_syncer_link(caf::actor_system& sys, SyncerLinkArgs args) {
  return sys.spawn(syncer_link, std::move(args));
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

Result<Topology> fetch_topology(const Endpoint& syncer, uint32_t learner, const RunOptions::Cluster& cluster,
                                double wait_seconds) {
  const std::string& token = cluster.token;
  ClientConfig cfg(cluster);
  caf::actor_system sys{cfg};
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_seconds));
  double backoff = kBackoffInitial;
  std::string last_error;
  for (bool first = true;; first = false) {
    if (!first) {
      if (Clock::now() + span(backoff) > deadline)
        return Status::unavailable("no syncer at " + syncer.to_string() + " within " +
                                   std::to_string(static_cast<int>(wait_seconds)) + " s: " + last_error);
      std::this_thread::sleep_for(span(backoff));
      backoff = std::min(kBackoffMax, backoff * 2);
    }
    // Through the middleman actor, with a timeout: remote_actor() would wait
    // forever on a peer that accepts the connection and never answers.
    caf::scoped_actor self{sys};
    const caf::io::middleman_actor connector =
        cluster.tls() ? sys.openssl_manager().actor_handle() : sys.middleman().actor_handle();
    caf::actor gateway;
    self->request(connector, kConnectTimeout, caf::connect_atom_v, syncer.host, syncer.port)
        .receive(
            [&](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
              gateway = caf::actor_cast<caf::actor>(ptr);
              if (!gateway) last_error = "nothing is published on that port";
            },
            [&](caf::error& e) { last_error = sys.render(e); });
    if (!gateway) {
      if (first) log_warn("waiting for the syncer at " + syncer.to_string() + " (" + last_error + ")");
      continue;
    }
    std::optional<Result<Topology>> answer;
    const Register query{learner, 0, 0, join_proof(token, learner, 0, 0), {}};
    self->request(gateway, kConnectTimeout, topology_atom_v, Packet{encode_message(query)})
        .receive(
            [&](Packet& p) {
              auto msg = decode_message(p.bytes);
              if (!msg.ok()) answer = Result<Topology>(Status::corruption("the syncer's answer: " + msg.status().to_string()));
              else if (auto* w = std::get_if<Welcome>(&*msg)) answer = Result<Topology>(w->topology);
              else if (auto* r = std::get_if<Reject>(&*msg))
                answer = Result<Topology>(Status::invalid_argument("the syncer at " + syncer.to_string() + " refused learner " +
                                                                   std::to_string(learner) + " (" +
                                                                   reject_reason_name(r->reason) + "): " + r->detail));
              else answer = Result<Topology>(Status::corruption("the syncer answered with a " + std::string(message_name(*msg))));
            },
            [&](caf::error& e) { last_error = sys.render(e); });
    if (answer) return std::move(*answer);
  }
}

}  // namespace atl
