// The door (atoll/door.h): sockets, TLS and frames on one kj event loop.
#include "atoll/door.h"

#include <kj/async-io.h>
#include <kj/compat/tls.h>
#include <kj/debug.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "atoll/certificates.h"
#include "atoll/cluster_token.h"
#include "atoll/event_loop_thread.h"
#include "atoll/file.h"
#include "atoll/huge_pages.h"
#include "atoll/log.h"

namespace atl {
namespace {

constexpr size_t kChunkBytes = size_t{64} << 10;  // reads, and what the emulated link sends at a time
constexpr double kTickSeconds = 0.1;              // deadlines and keepalives are checked this often

// Connection ids are unique in the process, not just in one door: whoever
// listens to two doors never mixes them up.
std::atomic<uint64_t> next_connection{1};

kj::Duration duration(double seconds) {
  return static_cast<int64_t>(std::max(0.0, seconds) * 1e9) * kj::NANOSECONDS;
}
double seconds(kj::Duration d) { return static_cast<double>(d / kj::NANOSECONDS) * 1e-9; }

std::string describe(const kj::Exception& e) { return kj_reason(e); }

std::string without_port(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

// TLS 1.3 and nothing older. kj 0.9 names versions only up to 1.2, but it
// adds SSL_OP_NO_TLSv1_2 for any minimum above it (later kj calls it TLS_1_3).
constexpr kj::TlsVersion kTls13 = static_cast<kj::TlsVersion>(static_cast<int>(kj::TlsVersion::TLS_1_2) + 1);

}  // namespace

// ---- the event loop's side

struct Door::Impl {
  DoorOptions opt;
  DoorEvents ev;
  std::optional<kj::TlsCertificate> tls_cert, tls_ca;
  std::optional<kj::TlsPrivateKey> tls_key;
  DoorCounters counters;


  struct Out {
    kj::TimePoint release;
    std::vector<uint8_t> bytes;  // the header and the body's piece (unshaped: a small frame, or a header, or a body)
  };

  struct Conn {
    uint64_t id = 0;
    bool listening = false;  // accepted here (it sends the Challenge)
    std::string address;     // the peer's address without its port ("" when connecting)
    std::string peer;        // for messages
    bool authenticated = false;
    bool counted = false;    // in the per-address count of unauthenticated connections
    bool closing = false;
    bool reached = false;    // connecting: the TCP connection was made (a later failure is no network's)
    bool heard = false;      // a frame header (keepalives included) came in
    uint32_t learner = 0;
    Purpose purpose = Purpose::kJoin;
    uint64_t process = 0;    // the peer's (listening) or ours (connecting)
    std::string nonce;       // listening: the Challenge sent
    size_t max_frame_bytes = kHandshakeFrameBytes;  // after the handshake
    kj::TimePoint started, last_in, last_out;
    LinkQueue link;          // the emulated link out, in seconds since `started`
    uint8_t header[4] = {};
    std::vector<uint8_t> body;
    std::deque<Out> out;
    bool pumping = false;
    kj::Own<kj::AsyncIoStream> stream;
    // Last, so that they are destroyed (cancelled) before what they use.
    kj::Promise<void> reading = nullptr, writing = nullptr, starting = nullptr;
    Conn(kj::TimePoint now, const LinkShape& shape, uint64_t seed)
        : started(now), last_in(now), last_out(now), link(shape, seed) {}
  };

  // Everything that lives on the door's thread. (kj's ErrorHandler has a
  // non-virtual destructor by design; Loop is never deleted through it.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-virtual-dtor"
  struct Loop final : kj::TaskSet::ErrorHandler {
    Impl& impl;
    kj::AsyncIoContext& io;  // the event loop thread's
    kj::Timer& timer;
    kj::Own<kj::TlsContext> tls;
    std::map<uint64_t, std::unique_ptr<Conn>> conns;
    std::map<std::string, int> unauthenticated;  // by address
    std::vector<kj::Own<kj::ConnectionReceiver>> receivers;
    std::mt19937_64 rng{std::random_device{}()};
    kj::TaskSet tasks;
    kj::Promise<void> ticking = nullptr;

    Loop(Impl& i, kj::AsyncIoContext& context)
        : impl(i), io(context), timer(io.provider->getTimer()), tasks(*this) {
      if (impl.opt.tls.on()) {
        kj::TlsContext::Options o;
        o.useSystemTrustStore = false;
        o.verifyClients = true;  // listening: a peer without a certificate of the CA fails the handshake
        o.trustedCertificates = kj::arrayPtr(&*impl.tls_ca, 1);
        o.minVersion = kTls13;
        kj::TlsKeypair pair{*impl.tls_key, *impl.tls_cert};
        o.defaultKeypair = pair;
        o.timer = timer;
        o.acceptTimeout = duration(impl.opt.handshake_seconds);
        tls = kj::heap<kj::TlsContext>(kj::mv(o));
      }
      ticking = tick().eagerlyEvaluate([](kj::Exception&& e) { log_error("door: housekeeping stopped: " + describe(e)); });
    }

    void taskFailed(kj::Exception&& e) override { log_warn("door: " + describe(e)); }

    // -- listening

    uint16_t listen(kj::Own<kj::NetworkAddress> address) {
      auto receiver = address->listen();
      const uint16_t port = static_cast<uint16_t>(receiver->getPort());
      tasks.add(accept_loop(*receiver));
      receivers.push_back(kj::mv(receiver));
      return port;
    }

    kj::Promise<void> accept_loop(kj::ConnectionReceiver& receiver) {
      return receiver.acceptAuthenticated().then(
          [this, &receiver](kj::AuthenticatedStream s) {
            accepted(kj::mv(s));
            return accept_loop(receiver);
          },
          [this, &receiver](kj::Exception&& e) {
            // Out of file descriptors, say: wait a little rather than spin.
            log_warn("door: accept failed: " + describe(e));
            return timer.afterDelay(100 * kj::MILLISECONDS).then([this, &receiver] { return accept_loop(receiver); });
          });
    }

    void accepted(kj::AuthenticatedStream s) {
      ++impl.counters.accepted;
      auto c = std::make_unique<Conn>(timer.now(), impl.opt.link, rng());
      c->id = next_connection++;
      c->listening = true;
      std::string remote = "an unknown address";
      if (auto* net = dynamic_cast<kj::NetworkPeerIdentity*>(s.peerIdentity.get()))
        remote = net->getAddress().toString().cStr();
      c->peer = remote;
      c->address = without_port(remote);
      int& count = unauthenticated[c->address];
      if (count >= impl.opt.max_unauthenticated_per_address) {
        ++impl.counters.crowded;
        // Logged once per crowd, not once per connection: a flood must not flood the log.
        if (impl.counters.crowded.load() % 100 == 1)
          log_warn("door: refused a connection from " + c->address + ": " + std::to_string(count) +
                   " connections from there have not said hello yet (the limit)");
        return;  // the stream is dropped: closed
      }
      ++count;
      ++impl.counters.unauthenticated;
      c->counted = true;
      Conn& conn = *c;
      conns.emplace(conn.id, std::move(c));
      if (!tls) {
        conn.stream = kj::mv(s.stream);
        return challenge(conn);
      }
      conn.starting = tls->wrapServer(kj::mv(s))
                          .then([this, &conn](kj::AuthenticatedStream secured) {
                            auto& id = kj::downcast<kj::TlsPeerIdentity>(*secured.peerIdentity);
                            const std::string& want =
                                impl.opt.tls.peer_name.empty() ? std::string(kLearnerName) : impl.opt.tls.peer_name;
                            // kj 0.9 checks a server's SANs but leaves a client's name to us (its
                            // matchesHostname() is declared, not built): the common name it is.
                            const std::string name = id.hasCertificate() ? id.getCommonName().cStr() : "";
                            if (name != want) {
                              ++impl.counters.handshake_failed;
                              log_warn("door: refused " + conn.peer + ": its certificate names '" + name +
                                       "', not '" + want + "'");
                              return finish(conn, "refused: its certificate is not for '" + want + "'");
                            }
                            conn.peer += " (" + name + ")";
                            conn.stream = kj::mv(secured.stream);
                            challenge(conn);
                          })
                          .eagerlyEvaluate([this, &conn](kj::Exception&& e) {
                            handshake_failed(conn, describe(e));
                          });
    }

    // A connection that did not finish its handshake, by an error or by the
    // deadline (kj's TLS accept timeout and our tick race for it): counted and
    // logged the same either way, but not once per connection of a flood.
    void handshake_failed(Conn& c, const std::string& why) {
      const std::string what = tls && !c.stream ? "TLS handshake" : "handshake";
      if (++impl.counters.handshake_failed % 100 == 1) log_warn("door: " + what + " with " + c.peer + " failed: " + why);
      finish(c, what + " failed: " + why);
    }

    // A syncer that requires TLS waits for a TLS hello that a learner without
    // TLS never sends, while the learner waits for its challenge: silence on
    // both sides until a deadline, whichever side's comes first.
    std::string unfinished_why(const Conn& c) const {
      std::string why = "not done within " + fmt_seconds(impl.opt.handshake_seconds);
      if (!c.listening && c.stream && !c.heard && !tls)
        why += ", not a byte from " + c.peer + " before its challenge: does it require TLS (--tls-cert, --tls-key, --tls-ca)?";
      return why;
    }

    void challenge(Conn& c) {
      c.nonce = make_nonce();
      queue(c, encode_message(Challenge{c.nonce}));
      start_reading(c);
    }

    // A listening connection's first frame: the Hello.
    void hello(Conn& c, std::vector<uint8_t> bytes) {
      auto msg = decode_message(bytes, kHandshakeFrameBytes);
      const Hello* h = msg.ok() ? std::get_if<Hello>(&*msg) : nullptr;
      // The token first: a stranger learns nothing about the run.
      if (!h)
        return refuse(c, RejectReason::kMalformed,
                      "expected a hello, found " + (msg.ok() ? std::string("a ") + message_name(*msg) : msg.status().to_string()));
      if (!check_door_proof(impl.opt.token, h->proof, c.nonce, h->learner, static_cast<uint8_t>(h->purpose), h->process))
        return refuse(c, RejectReason::kBadToken, "the cluster token does not match");
      // A claim asks the syncer for an id: it names none (0).
      if (h->purpose == Purpose::kClaim ? h->learner != 0 : h->learner >= impl.opt.learners)
        return refuse(c, RejectReason::kUnknownLearner,
                      "learner id " + std::to_string(h->learner) + " is not in this topology of " +
                          std::to_string(impl.opt.learners) + " learners (ids 0.." +
                          std::to_string(impl.opt.learners ? impl.opt.learners - 1 : 0) + ")");
      c.learner = h->learner;
      c.purpose = h->purpose;
      c.process = h->process;
      c.max_frame_bytes = impl.opt.max_frame_bytes;
      authenticated(c);
    }

    void refuse(Conn& c, RejectReason reason, const std::string& why) {
      // Logged, but not once per connection of a flood.
      if (++impl.counters.refused % 100 == 1) log_warn("door: refused " + c.peer + ": " + why);
      queue(c, encode_message(Reject{reason, 0, why}));
      close_after_flush(c, "refused: " + why);
    }

    void authenticated(Conn& c) {
      c.authenticated = true;
      uncount(c);
      if (c.listening) ++impl.counters.opened;
      if (impl.ev.opened) impl.ev.opened(c.id, c.learner, c.purpose, c.process, c.peer);
    }

    void uncount(Conn& c) {
      if (!c.counted) return;
      c.counted = false;
      --impl.counters.unauthenticated;
      if (auto it = unauthenticated.find(c.address); it != unauthenticated.end() && --it->second <= 0)
        unauthenticated.erase(it);
    }

    // -- connecting

    void connect(uint64_t id, const std::string& host, uint16_t port, uint32_t learner, Purpose purpose,
                 size_t max_frame_bytes) {
      auto c = std::make_unique<Conn>(timer.now(), impl.opt.link, rng());
      c->id = id;
      c->learner = learner;
      c->purpose = purpose;
      c->max_frame_bytes = max_frame_bytes;
      c->peer = host + ":" + std::to_string(port);
      Conn& conn = *c;
      conns.emplace(id, std::move(c));
      const std::string name = impl.opt.tls.peer_name.empty() ? host : impl.opt.tls.peer_name;
      conn.starting =
          io.provider->getNetwork()
              .parseAddress(host, port)
              .then([](kj::Own<kj::NetworkAddress> a) { return a->connectAuthenticated().attach(kj::mv(a)); })
              .then([this, &conn, name](kj::AuthenticatedStream s) -> kj::Promise<kj::AuthenticatedStream> {
                conn.reached = true;
                if (!tls) return kj::mv(s);
                return tls->wrapClient(kj::mv(s), name);
              })
              .then([this, &conn](kj::AuthenticatedStream s) {
                conn.stream = kj::mv(s.stream);
                conn.last_in = timer.now();
                start_reading(conn);
              })
              .eagerlyEvaluate([this, &conn](kj::Exception&& e) {
                // "cannot connect" only when the network failed: a caller may wait for that to mend.
                finish(conn, (conn.reached ? "TLS handshake failed: " : "cannot connect: ") + describe(e));
              });
    }

    // A connecting connection's first frame: the Challenge.
    void answer(Conn& c, std::vector<uint8_t> bytes) {
      auto msg = decode_message(bytes, kHandshakeFrameBytes);
      if (msg.ok())
        if (const Challenge* ch = std::get_if<Challenge>(&*msg)) {
          c.max_frame_bytes = std::max(c.max_frame_bytes, kHandshakeFrameBytes);
          c.process = impl.opt.process;
          queue(c, encode_message(Hello{c.learner, c.purpose,
                                        door_proof(impl.opt.token, ch->nonce, c.learner, static_cast<uint8_t>(c.purpose),
                                                   c.process),
                                        c.process}));
          return authenticated(c);
        }
      // A refusal before the challenge (a syncer that is ending, say): pass it on.
      if (msg.ok() && std::holds_alternative<Reject>(*msg)) {
        if (impl.ev.frame) impl.ev.frame(c.id, std::move(bytes));
        return finish(c, "refused");
      }
      finish(c, "expected a challenge from " + c.peer + ", found " +
                    (msg.ok() ? std::string("a ") + message_name(*msg) : msg.status().to_string()) +
                    ": is it an atoll syncer of this version?");
    }

    // -- frames in

    // Reading is one chain per connection (a promise must not replace itself).
    void start_reading(Conn& c) {
      c.reading = read_frames(c).eagerlyEvaluate([this, &c](kj::Exception&& e) {
        if (e.getType() != kj::Exception::Type::DISCONNECTED) return finish(c, "read failed: " + describe(e));
        if (c.listening || c.authenticated) return finish(c, "closed by the peer");
        finish(c, "closed by " + c.peer + " before its challenge" +
                      (tls ? std::string() : std::string(": does it require TLS (--tls-cert, --tls-key, --tls-ca)?")));
      });
    }

    kj::Promise<void> read_frames(Conn& c) {
      return caught_up().then([this, &c] { return c.stream->read(c.header, 4); }).then([this, &c] {
        return header_read(c);
      });
    }

    // kj's clock stands still while events run back to back, and they do
    // while a peer keeps the socket full: a 200 MB frame read chunk after
    // chunk, or frames a slow handler takes one by one. Then no tick runs, no
    // keepalive leaves, and the peer, hearing nothing, closes a connection
    // that was busy, not silent. Once the clock is a tick behind, the loop
    // polls (a timer fires only there) before reading on.
    kj::Promise<void> caught_up() {
      if (kj::systemPreciseMonotonicClock().now() - timer.now() < duration(kTickSeconds)) return kj::READY_NOW;
      return timer.afterDelay(0 * kj::NANOSECONDS);
    }

    kj::Promise<void> header_read(Conn& c) {
      c.last_in = timer.now();
      c.heard = true;
      const uint32_t length = static_cast<uint32_t>(c.header[0]) | static_cast<uint32_t>(c.header[1]) << 8 |
                              static_cast<uint32_t>(c.header[2]) << 16 | static_cast<uint32_t>(c.header[3]) << 24;
      if (length == 0) return read_frames(c);  // a keepalive
      const size_t limit = c.authenticated ? c.max_frame_bytes : kHandshakeFrameBytes;
      if (length > limit) {
        const std::string why = "a frame of " + std::to_string(length) + " bytes announced; the limit is " +
                                std::to_string(limit) + (c.authenticated ? "" : " before a hello");
        if (++impl.counters.oversized % 100 == 1) log_warn("door: closed " + c.peer + ": " + why);
        finish(c, why);
        return kj::READY_NOW;
      }
      // Only now, and never more than the limit; a large body is first
      // touched 2 MiB at a time (fresh 4 KiB pages cost ~1 s per 200 MB on
      // some virtual machines, all of it inside one event).
      reserve_huge(c.body, length);
      c.body.assign(length, 0);
      return read_body(c, 0);
    }

    kj::Promise<void> read_body(Conn& c, size_t got) {
      const size_t want = std::min(kChunkBytes, c.body.size() - got);
      return caught_up()
          .then([&c, got, want] { return c.stream->tryRead(c.body.data() + got, 1, want); })
          .then([this, &c, got](size_t n) -> kj::Promise<void> {
        if (n == 0) {
          finish(c, "closed by the peer in the middle of a frame");
          return kj::READY_NOW;
        }
        c.last_in = timer.now();
        if (got + n < c.body.size()) return read_body(c, got + n);
        std::vector<uint8_t> bytes = std::move(c.body);
        c.body = {};
        if (c.closing) return kj::READY_NOW;
        if (c.authenticated) {
          if (impl.ev.frame) impl.ev.frame(c.id, std::move(bytes));
        } else if (c.listening) {
          hello(c, std::move(bytes));
        } else {
          answer(c, std::move(bytes));
        }
        if (c.closing) return kj::READY_NOW;
        return read_frames(c);
      });
    }

    // -- frames out, through the emulated link when there is one

    void queue(Conn& c, std::vector<uint8_t> message) {
      if (c.closing || !c.stream) return;
      const auto now = timer.now();
      c.last_out = now;
      const uint32_t n = static_cast<uint32_t>(message.size());
      const uint8_t header[4] = {static_cast<uint8_t>(n), static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n >> 16),
                                 static_cast<uint8_t>(n >> 24)};
      const LinkShape& link = impl.opt.link;
      if (!link.active() && message.size() > kChunkBytes) {
        c.out.push_back({now, std::vector<uint8_t>(header, header + 4)});
        c.out.push_back({now, std::move(message)});  // not copied: a welcome may be hundreds of MB
      } else if (!link.active()) {
        message.insert(message.begin(), header, header + 4);
        c.out.push_back({now, std::move(message)});
      } else {
        // Pieces of kChunkBytes, each leaving when the link has sent the one before.
        std::vector<uint8_t> frame(header, header + 4);
        frame.insert(frame.end(), message.begin(), message.end());
        for (size_t at = 0; at < frame.size(); at += kChunkBytes) {
          const size_t size = std::min(kChunkBytes, frame.size() - at);
          c.out.push_back({arrival(c, size), std::vector<uint8_t>(frame.begin() + at, frame.begin() + at + size)});
        }
      }
      if (!c.pumping) {
        c.pumping = true;
        c.writing = pump(c).eagerlyEvaluate([this, &c](kj::Exception&& e) { finish(c, "write failed: " + describe(e)); });
      }
    }

    // When `bytes` sent now on `c`'s emulated link reach the peer.
    kj::TimePoint arrival(Conn& c, size_t bytes) {
      return c.started + duration(c.link.arrival(seconds(timer.now() - c.started), bytes));
    }

    kj::Promise<void> pump(Conn& c) {
      if (c.out.empty()) {
        c.pumping = false;
        return kj::READY_NOW;
      }
      kj::Promise<void> wait = c.out.front().release > timer.now() ? timer.atTime(c.out.front().release)
                                                                   : kj::Promise<void>(kj::READY_NOW);
      return wait.then([&c] { return c.stream->write(c.out.front().bytes.data(), c.out.front().bytes.size()); })
          .then([this, &c] {
            c.out.pop_front();
            return pump(c);
          });
    }

    void close_after_flush(Conn& c, const std::string& why) {
      if (c.closing) return;
      if (c.out.empty()) return finish(c, why);
      // Nothing more is read or queued; what is queued goes out, then the connection goes.
      c.closing = true;
      c.writing = c.writing.then([this, &c, why] { release(c, why); })
                      .eagerlyEvaluate([this, &c, why](kj::Exception&&) { release(c, why); });
    }

    // Ends `c` now: the event, then its removal once the current callback is over
    // (a promise may not destroy itself).
    void finish(Conn& c, const std::string& why) {
      if (c.closing) return;
      c.closing = true;
      release(c, why);
    }

    void release(Conn& c, const std::string& why) {
      uncount(c);
      const uint64_t id = c.id;
      if (impl.ev.closed) impl.ev.closed(id, why);
      tasks.add(kj::evalLater([this, id] { conns.erase(id); }));
    }

    Conn* find(uint64_t id) {
      const auto it = conns.find(id);
      return it == conns.end() ? nullptr : it->second.get();
    }

    // -- deadlines and keepalives

    kj::Promise<void> tick() {
      return timer.afterDelay(duration(kTickSeconds)).then([this] {
        const auto now = timer.now();
        std::vector<std::pair<Conn*, std::string>> ending;
        std::vector<Conn*> unfinished;
        for (auto& [id, c] : conns) {
          if (c->closing) continue;
          if (!c->authenticated) {
            if (seconds(now - c->started) > impl.opt.handshake_seconds) unfinished.push_back(c.get());
            continue;
          }
          if (seconds(now - c->last_in) > impl.opt.timeout_seconds) {
            ++impl.counters.timed_out;
            ending.emplace_back(c.get(), "silent for " + fmt_seconds(impl.opt.timeout_seconds));
          } else if (c->out.empty() && seconds(now - c->last_out) >= impl.opt.heartbeat_seconds) {
            queue(*c, {});
          }
        }
        for (Conn* c : unfinished) handshake_failed(*c, unfinished_why(*c));
        for (auto& [c, why] : ending) {
          log_warn("door: closed " + c->peer + ": " + why);
          finish(*c, why);
        }
        return tick();
      });
    }
  };

#pragma GCC diagnostic pop

  Loop* loop = nullptr;  // on the door's thread only
  // Last: destroyed first, it ends the loop while the rest is still there.
  std::unique_ptr<EventLoopThread> thread;

  // Runs `f` on the door's thread and waits for it. Inside an event (on the thread itself) it runs at once.
  template <class F>
  void run(F&& f) {
    if (thread->on_loop()) return f();
    try {
      thread->executor().executeSync(std::forward<F>(f));
    } catch (const kj::Exception& e) {
      log_warn("door: " + describe(e));
    }
  }
};

Door::Door(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Door>> Door::open(DoorOptions options, DoorEvents events) {
  if (options.token.empty()) return Status::invalid_argument("a door needs the cluster token");
  auto impl = std::make_unique<Impl>();
  if (options.tls.on()) {
    if (Status s = check_tls_files(options.tls); !s.ok()) return s;
    auto cert = read_text(options.tls.certificate);
    auto key = read_text(options.tls.key);
    auto ca = read_text(options.tls.ca);
    for (const auto* r : {&cert, &key, &ca})
      if (!r->ok()) return r->status();
    try {
      impl->tls_cert.emplace(kj::StringPtr(cert->c_str()));
      impl->tls_key.emplace(kj::StringPtr(key->c_str()));
      impl->tls_ca.emplace(kj::StringPtr(ca->c_str()));
    } catch (const kj::Exception& e) {
      return Status::invalid_argument("TLS files: " + describe(e));
    }
  }
  impl->opt = std::move(options);
  impl->ev = std::move(events);
  if (impl->opt.process == 0) impl->opt.process = this_process();

  Impl* raw = impl.get();
  auto thread = EventLoopThread::start("door", [raw](kj::AsyncIoContext& io, const std::function<void()>& serve) {
    Impl::Loop loop(*raw, io);
    raw->loop = &loop;
    serve();
    raw->loop = nullptr;
    loop.conns.clear();  // no events: whoever listened is going away
  });
  if (!thread.ok()) return thread.status().with_context("the door could not start");
  impl->thread = std::move(*thread);
  return std::unique_ptr<Door>(new Door(std::move(impl)));
}

Door::~Door() { impl_->thread.reset(); }

Result<uint16_t> Door::listen(const std::string& host, uint16_t port) {
  uint16_t bound = 0;
  std::string error;
  const std::string where = host.empty() ? "*" : host;
  try {
    impl_->thread->executor().executeSync([&]() -> kj::Promise<void> {
      return impl_->loop->io.provider->getNetwork()
          .parseAddress(where, port)
          .then([&](kj::Own<kj::NetworkAddress> a) { bound = impl_->loop->listen(kj::mv(a)); });
    });
  } catch (const kj::Exception& e) {
    error = describe(e);
  }
  if (!error.empty()) return Status::unavailable("cannot listen on " + where + ":" + std::to_string(port) + ": " + error);
  return bound;
}

uint64_t Door::connect(const std::string& host, uint16_t port, uint32_t learner, Purpose purpose,
                       size_t max_frame_bytes) {
  const uint64_t id = next_connection++;
  impl_->run([&] { impl_->loop->connect(id, host, port, learner, purpose, max_frame_bytes); });
  return id;
}

void Door::send(uint64_t conn, std::vector<uint8_t> message) {
  impl_->run([&] {
    if (Impl::Conn* c = impl_->loop->find(conn); c && c->authenticated) impl_->loop->queue(*c, std::move(message));
  });
}

void Door::close(uint64_t conn, const std::string& why) {
  impl_->run([&] {
    if (Impl::Conn* c = impl_->loop->find(conn)) impl_->loop->close_after_flush(*c, why);
  });
}

void Door::drain(double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  bool empty = false;
  impl_->run([&] {
    std::vector<Impl::Conn*> all;
    for (auto& [id, c] : impl_->loop->conns) all.push_back(c.get());
    for (auto* c : all) impl_->loop->close_after_flush(*c, "this process ends");
  });
  while (!empty && std::chrono::steady_clock::now() < deadline) {
    impl_->run([&] { empty = impl_->loop->conns.empty(); });
    if (!empty) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

const DoorCounters& Door::counters() const { return impl_->counters; }
const DoorOptions& Door::options() const { return impl_->opt; }

uint64_t this_process() {
  static const uint64_t id = [] {
    uint64_t x = 0;
    while (x == 0) {
      const std::string random = make_nonce();
      std::memcpy(&x, random.data(), sizeof x);
    }
    return x;
  }();
  return id;
}

}  // namespace atl
