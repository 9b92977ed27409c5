// The door (atoll/door.h) on loopback: frames cross intact, a bad Hello is
// refused with the reason, a Hello is worth nothing on another connection,
// limits act before buffering (frame length, handshake deadline, per-address
// cap), silent peers are dropped, and TLS is 1.3 with both certificates and
// names checked. Every wait is bounded.
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "atoll/certificates.h"
#include "atoll/cluster_token.h"
#include "atoll/door.h"
#include "test_support.h"

namespace atl {
namespace {

using Clock = std::chrono::steady_clock;
const std::string kToken = "a cluster token of the test, long enough";

// What a door told, collected for the test thread.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, uint32_t> opened;  // conn -> learner
  std::map<uint64_t, std::vector<std::vector<uint8_t>>> frames;
  std::map<uint64_t, std::string> closed;

  DoorEvents events() {
    return {[this](uint64_t c, uint32_t l, Purpose, uint64_t, const std::string&) { note([&] { opened[c] = l; }); },
            [this](uint64_t c, std::vector<uint8_t> f) { note([&] { frames[c].push_back(std::move(f)); }); },
            [this](uint64_t c, const std::string& why) { note([&] { closed[c] = why; }); }};
  }
  template <class F>
  void note(F f) {
    {
      std::lock_guard lock(mu);
      f();
    }
    cv.notify_all();
  }
  // Waits up to `seconds` for `done()` (called under the lock).
  template <class P>
  bool wait(P done, double seconds = 10) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done(); });
  }
};

DoorOptions options(uint32_t learners = 4) {
  DoorOptions o;
  o.token = kToken;
  o.learners = learners;
  o.handshake_seconds = 2;
  o.timeout_seconds = 2;
  o.heartbeat_seconds = 0.2;
  return o;
}

std::unique_ptr<Door> must(Result<std::unique_ptr<Door>> d) {
  BOOST_REQUIRE_MESSAGE(d.ok(), d.status().to_string());
  return std::move(*d);
}

// A raw TCP client, to be a peer that does not follow the protocol.
struct Raw {
  int fd = -1;
  explicit Raw(uint16_t port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    BOOST_REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Raw() { ::close(fd); }
  void send(const std::vector<uint8_t>& bytes) { (void)::write(fd, bytes.data(), bytes.size()); }
  void frame(const std::vector<uint8_t>& message) {
    const uint32_t n = static_cast<uint32_t>(message.size());
    std::vector<uint8_t> f = {uint8_t(n), uint8_t(n >> 8), uint8_t(n >> 16), uint8_t(n >> 24)};
    f.insert(f.end(), message.begin(), message.end());
    send(f);
  }
  // The next frame that is not a keepalive; nothing when the door closed first.
  std::optional<Message> next() {
    for (;;) {
      uint8_t h[4];
      if (!read_all(h, 4)) return std::nullopt;
      const uint32_t n = h[0] | h[1] << 8 | h[2] << 16 | uint32_t(h[3]) << 24;
      if (n == 0) continue;
      std::vector<uint8_t> body(n);
      if (!read_all(body.data(), n)) return std::nullopt;
      auto m = decode_message(body);
      if (!m.ok()) return std::nullopt;
      return *m;
    }
  }
  bool read_all(uint8_t* p, size_t n) {
    while (n > 0) {
      const ssize_t got = ::read(fd, p, n);
      if (got <= 0) return false;
      p += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }
  // True when the door closed the connection (EOF) within the receive timeout.
  bool closed_by_door() {
    uint8_t b[4096];
    for (;;) {
      const ssize_t got = ::read(fd, b, sizeof b);
      if (got == 0) return true;
      if (got < 0) return false;
    }
  }
};

std::vector<uint8_t> big_message(size_t floats) {
  Done d;
  d.reason.assign(floats * 4, 'x');
  for (size_t i = 0; i < d.reason.size(); ++i) d.reason[i] = static_cast<char>('a' + i % 26);
  return encode_message(d);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(door_test)

BOOST_AUTO_TEST_CASE(frames_cross_both_ways_intact_after_a_good_hello) {
  Inbox server, client;
  auto listener = must(Door::open(options(), server.events()));
  auto port = listener->listen("127.0.0.1", 0);
  BOOST_REQUIRE(port.ok());
  auto connector = must(Door::open(options(), client.events()));
  const uint64_t c = connector->connect("127.0.0.1", *port, 3, Purpose::kJoin, size_t{64} << 20);
  BOOST_REQUIRE(server.wait([&] { return server.opened.size() == 1; }));
  BOOST_REQUIRE(client.wait([&] { return client.opened.count(c) == 1; }));
  const uint64_t s = server.opened.begin()->first;
  BOOST_TEST(server.opened.begin()->second == 3u);

  const auto small = encode_message(Pull{2, 7, false});
  const auto large = big_message(1 << 20);  // 4 MiB: many reads, many writes
  connector->send(c, small);
  connector->send(c, large);
  listener->send(s, large);
  BOOST_REQUIRE(server.wait([&] { return server.frames[s].size() == 2; }));
  BOOST_REQUIRE(client.wait([&] { return client.frames[c].size() == 1; }));
  BOOST_TEST(server.frames[s][0] == small);
  BOOST_TEST(server.frames[s][1] == large);
  BOOST_TEST(client.frames[c][0] == large);

  connector->close(c, "done");
  BOOST_REQUIRE(server.wait([&] { return server.closed.count(s) == 1; }));
  BOOST_TEST(server.closed[s] == "closed by the peer");
  BOOST_TEST(listener->counters().opened.load() == 1u);
  BOOST_TEST(listener->counters().unauthenticated.load() == 0u);
}

BOOST_AUTO_TEST_CASE(a_bad_token_or_an_unknown_id_is_refused_with_the_reason) {
  Inbox server, client;
  auto listener = must(Door::open(options(2), server.events()));
  const uint16_t port = *listener->listen("127.0.0.1", 0);
  DoorOptions wrong = options();
  wrong.token = "another token, just as long as the other one";
  auto stranger = must(Door::open(wrong, client.events()));
  const uint64_t a = stranger->connect("127.0.0.1", port, 0, Purpose::kJoin, 1 << 20);
  auto member = must(Door::open(options(), client.events()));
  const uint64_t b = member->connect("127.0.0.1", port, 5, Purpose::kJoin, 1 << 20);
  BOOST_REQUIRE(client.wait([&] { return client.closed.count(a) && client.closed.count(b); }));
  auto reject = [&](uint64_t conn) {
    BOOST_REQUIRE_EQUAL(client.frames[conn].size(), 1u);
    auto m = decode_message(client.frames[conn][0]);
    BOOST_REQUIRE(m.ok());
    BOOST_REQUIRE(std::holds_alternative<Reject>(*m));
    return std::get<Reject>(*m);
  };
  BOOST_TEST(int(reject(a).reason) == int(RejectReason::kBadToken));
  BOOST_TEST(int(reject(b).reason) == int(RejectReason::kUnknownLearner));
  BOOST_TEST(reject(b).detail == "learner id 5 is not in this topology of 2 learners (ids 0..1)");
  BOOST_TEST(server.opened.empty());
  BOOST_TEST(listener->counters().refused.load() == 2u);
}

BOOST_AUTO_TEST_CASE(a_hello_is_worth_nothing_on_another_connection) {
  Inbox server;
  auto listener = must(Door::open(options(), server.events()));
  const uint16_t port = *listener->listen("127.0.0.1", 0);
  Raw first(port);
  auto challenge = first.next();
  BOOST_REQUIRE(challenge && std::holds_alternative<Challenge>(*challenge));
  const std::string nonce = std::get<Challenge>(*challenge).nonce;
  BOOST_TEST(nonce.size() == kNonceBytes);
  const auto hello = encode_message(Hello{1, Purpose::kJoin, door_proof(kToken, nonce, 1, 0, 42), 42});
  first.frame(hello);
  BOOST_REQUIRE(server.wait([&] { return server.opened.size() == 1; }));

  Raw replay(port);  // someone who recorded the first connection
  auto other = replay.next();
  BOOST_REQUIRE(other && std::holds_alternative<Challenge>(*other));
  BOOST_TEST(std::get<Challenge>(*other).nonce != nonce);
  replay.frame(hello);
  auto answer = replay.next();
  BOOST_REQUIRE(answer && std::holds_alternative<Reject>(*answer));
  BOOST_TEST(int(std::get<Reject>(*answer).reason) == int(RejectReason::kBadToken));
  BOOST_TEST(replay.closed_by_door());
  BOOST_TEST(server.opened.size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_huge_length_is_refused_before_a_byte_of_its_body_is_kept) {
  Inbox server;
  auto listener = must(Door::open(options(), server.events()));
  const uint16_t port = *listener->listen("127.0.0.1", 0);
  {
    Raw r(port);
    (void)r.next();  // the challenge
    r.send({0xff, 0xff, 0xff, 0xff});  // 4 GiB announced before any hello
    BOOST_TEST(r.closed_by_door());
  }
  // After a good hello the limit is the topology's, not 4 GiB either.
  DoorOptions o = options();
  o.max_frame_bytes = 1 << 20;
  auto small = must(Door::open(o, server.events()));
  const uint16_t port2 = *small->listen("127.0.0.1", 0);
  Raw r(port2);
  auto ch = r.next();
  BOOST_REQUIRE(ch && std::holds_alternative<Challenge>(*ch));
  r.frame(encode_message(Hello{0, Purpose::kJoin, door_proof(kToken, std::get<Challenge>(*ch).nonce, 0, 0, 7), 7}));
  const uint32_t n = (1 << 20) + 1;
  r.send({uint8_t(n), uint8_t(n >> 8), uint8_t(n >> 16), uint8_t(n >> 24)});
  BOOST_TEST(r.closed_by_door());
  BOOST_TEST(listener->counters().oversized.load() == 1u);
  BOOST_TEST(small->counters().oversized.load() == 1u);
}

BOOST_AUTO_TEST_CASE(a_peer_that_never_says_hello_is_dropped_and_one_address_cannot_crowd_the_door) {
  Inbox server;
  DoorOptions o = options();
  o.handshake_seconds = 0.5;
  o.max_unauthenticated_per_address = 4;
  testing::LogCapture log;
  auto listener = must(Door::open(o, server.events()));
  const uint16_t port = *listener->listen("127.0.0.1", 0);
  std::vector<std::unique_ptr<Raw>> idle;
  for (int i = 0; i < 10; ++i) idle.push_back(std::make_unique<Raw>(port));
  // Every one is closed: six at once (over the cap), four at the deadline.
  for (auto& r : idle) BOOST_TEST(r->closed_by_door());
  BOOST_TEST(listener->counters().crowded.load() == 6u);
  BOOST_TEST(listener->counters().handshake_failed.load() == 4u);
  BOOST_TEST(listener->counters().unauthenticated.load() == 0u);
  // Said, but once for the lot: the deadline logs as a failed handshake does.
  BOOST_TEST(log.count("handshake with 127.0.0.1:") == 1u);
  BOOST_TEST(log.count("failed: not done within 0.5 s") == 1u);
  BOOST_TEST(log.count("have not said hello yet") == 1u);
  // And the door still admits a member afterwards.
  Inbox client;
  auto connector = must(Door::open(options(), client.events()));
  const uint64_t c = connector->connect("127.0.0.1", port, 1, Purpose::kJoin, 1 << 20);
  BOOST_TEST(client.wait([&] { return client.opened.count(c) == 1; }));
  BOOST_TEST(server.wait([&] { return server.opened.size() == 1; }));
}

BOOST_AUTO_TEST_CASE(a_silent_peer_is_dropped_after_the_timeout_and_keepalives_keep_a_quiet_one) {
  Inbox server, client;
  auto listener = must(Door::open(options(), server.events()));
  const uint16_t port = *listener->listen("127.0.0.1", 0);
  auto connector = must(Door::open(options(), client.events()));
  const uint64_t quiet = connector->connect("127.0.0.1", port, 0, Purpose::kJoin, 1 << 20);
  Raw frozen(port);  // says hello, then nothing, as a stopped process would
  auto ch = frozen.next();
  BOOST_REQUIRE(ch && std::holds_alternative<Challenge>(*ch));
  frozen.frame(encode_message(Hello{1, Purpose::kJoin, door_proof(kToken, std::get<Challenge>(*ch).nonce, 1, 0, 9), 9}));
  BOOST_REQUIRE(server.wait([&] { return server.opened.size() == 2; }));
  uint64_t frozen_id = 0;
  for (auto& [id, learner] : server.opened)
    if (learner == 1) frozen_id = id;
  BOOST_REQUIRE(server.wait([&] { return server.closed.count(frozen_id) == 1; }, 10));
  BOOST_TEST(server.closed[frozen_id] == "silent for 2 s");
  // The connector sends nothing but keepalives, and stays.
  BOOST_TEST(server.closed.size() == 1u);
  BOOST_TEST(client.closed.count(quiet) == 0u);
}

// A door whose socket a peer keeps full, and whose handler takes each frame
// slowly, runs event after event without polling: it must still send its
// keepalives and count what it reads as heard, for busy is not silent.
BOOST_AUTO_TEST_CASE(a_door_kept_busy_by_a_full_socket_still_keeps_its_peer) {
  Inbox server, client;
  DoorEvents slow = server.events();
  slow.frame = [&server](uint64_t c, std::vector<uint8_t> f) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // on the door's thread, as a busy turn is
    server.note([&] { server.frames[c].push_back(std::move(f)); });
  };
  auto listener = must(Door::open(options(), std::move(slow)));
  const uint16_t port = *listener->listen("127.0.0.1", 0);
  auto connector = must(Door::open(options(), client.events()));
  const uint64_t c = connector->connect("127.0.0.1", port, 0, Purpose::kJoin, size_t{1} << 20);
  BOOST_REQUIRE(server.wait([&] { return server.opened.size() == 1; }));
  BOOST_REQUIRE(client.wait([&] { return client.opened.count(c) == 1; }));
  const uint64_t s = server.opened.begin()->first;
  // 15 frames, 3.75 MiB: all in the sockets' buffers at once, 4.5 s of handling, past the 2 s timeout.
  const auto frame = big_message(1 << 16);
  constexpr size_t kFrames = 15;
  for (size_t i = 0; i < kFrames; ++i) connector->send(c, frame);
  BOOST_REQUIRE_MESSAGE(server.wait([&] { return server.frames[s].size() == kFrames || !server.closed.empty(); }, 30),
                        "the server took " << server.frames[s].size() << " frames");
  BOOST_TEST(server.frames[s].size() == kFrames);
  std::lock_guard lock(server.mu);
  BOOST_TEST_MESSAGE("closed by the server: " << (server.closed.empty() ? "none" : server.closed.begin()->second));
  BOOST_TEST(server.closed.empty());
  std::lock_guard client_lock(client.mu);
  BOOST_TEST_MESSAGE("closed by the client: " << (client.closed.empty() ? "none" : client.closed.begin()->second));
  BOOST_TEST(client.closed.empty());
}

// The queue the door and the simulator share: paced at the rate behind what
// the link still sends, then the delay, never out of order.
BOOST_AUTO_TEST_CASE(a_link_queue_paces_then_delays_in_order) {
  LinkQueue link(*parse_link_shape("rate=8mbit,delay=100ms"));
  BOOST_TEST(link.arrival(0.0, 1'000'000) == 1.1, boost::test_tools::tolerance(1e-12));  // 1 s at 8 Mbit/s, then 0.1 s
  BOOST_TEST(link.free_at() == 1.0, boost::test_tools::tolerance(1e-12));
  // Handed over before the first is sent: it waits for it.
  BOOST_TEST(link.arrival(0.5, 500'000) == 1.6, boost::test_tools::tolerance(1e-12));
  // Handed over to an idle link: no wait.
  BOOST_TEST(link.arrival(10.0, 0) == 10.1, boost::test_tools::tolerance(1e-12));
  LinkQueue jittery(*parse_link_shape("delay=10ms,jitter=10ms"), 7);
  double last = 0.0;
  for (int i = 0; i < 1000; ++i) {
    const double at = jittery.arrival(i * 1e-3, 100);
    BOOST_TEST(at >= last);  // in order, as TCP delivers
    BOOST_TEST(at <= i * 1e-3 + 0.02 + 1e-12);
    last = at;
  }
}

BOOST_AUTO_TEST_CASE(an_emulated_link_delays_and_paces_what_is_sent) {
  auto shape = parse_link_shape("rate=8mbit,delay=100ms,jitter=5ms,loss=0");
  BOOST_REQUIRE_MESSAGE(shape.ok(), shape.status().to_string());
  BOOST_TEST(shape->to_string() == "8 Mbit/s, 100 ms, jitter 5 ms");
  BOOST_TEST(!parse_link_shape("rate=fast").ok());
  BOOST_TEST(parse_link_shape("delay=20ms,jiter=1ms").status().message().find("unknown key") != std::string::npos);
  BOOST_TEST(!parse_link_shape("loss=1").ok());
  BOOST_TEST(parse_link_shape("rate=1gbit")->rate_mbit == 1000.0);

  Inbox server, client;
  auto listener = must(Door::open(options(), server.events()));
  const uint16_t port = *listener->listen("127.0.0.1", 0);
  DoorOptions o = options();
  o.link = *shape;
  auto connector = must(Door::open(o, client.events()));
  const uint64_t c = connector->connect("127.0.0.1", port, 0, Purpose::kJoin, 1 << 20);
  BOOST_REQUIRE(client.wait([&] { return client.opened.count(c) == 1; }));
  BOOST_REQUIRE(server.wait([&] { return server.opened.size() == 1; }));
  const auto message = big_message(125000);  // 500 kB: 0.5 s at 8 Mbit/s, then 100 ms of delay
  const auto start = Clock::now();
  connector->send(c, message);
  BOOST_REQUIRE(server.wait([&] { return !server.frames.empty() && !server.frames.begin()->second.empty(); }, 20));
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  BOOST_TEST_MESSAGE("500 kB over 8 Mbit/s + 100 ms took " << took << " s");
  // A lower bound only: the emulation may never deliver early; how late is the machine's business.
  BOOST_TEST(took >= 0.5 + 0.1 - 0.005 - 0.02);
  BOOST_TEST(server.frames.begin()->second[0] == message);
}

// ---- TLS

struct Pki {
  testing::TempDir dir_a, dir_b;  // the keys go when the test does
  CertificateFiles ours, theirs;  // two clusters, two CAs
  Pki() {
    auto a = make_certificates({dir_a.path(), {"syncer.example"}, 2, false});
    BOOST_REQUIRE_MESSAGE(a.ok(), a.status().to_string());
    auto b = make_certificates({dir_b.path(), {}, 2, false});
    BOOST_REQUIRE_MESSAGE(b.ok(), b.status().to_string());
    ours = *a;
    theirs = *b;
  }
  DoorOptions syncer() const {
    DoorOptions o = options();
    o.tls = {ours.syncer_certificate, ours.syncer_key, ours.ca, ""};
    return o;
  }
  DoorOptions learner(const CertificateFiles& f, const std::string& name = "") const {
    DoorOptions o = options();
    o.tls = {f.learner_certificate, f.learner_key, f.ca, name};
    return o;
  }
};

BOOST_AUTO_TEST_CASE(tls_admits_a_member_and_refuses_strangers_during_the_handshake) {
  Pki pki;
  Inbox server, client;
  auto listener = must(Door::open(pki.syncer(), server.events()));
  const uint16_t port = *listener->listen("127.0.0.1", 0);

  auto member = must(Door::open(pki.learner(pki.ours), client.events()));
  const uint64_t ok = member->connect("localhost", port, 2, Purpose::kJoin, 1 << 20);
  BOOST_REQUIRE(client.wait([&] { return client.opened.count(ok) == 1; }));
  BOOST_REQUIRE(server.wait([&] { return server.opened.size() == 1; }));
  member->send(ok, encode_message(Pull{1, 1, false}));
  BOOST_REQUIRE(server.wait([&] { return server.frames.size() == 1; }));

  // Another CA's learner; our learner expecting another name; plain TCP.
  auto stranger = must(Door::open(pki.learner(pki.theirs), client.events()));
  const uint64_t s = stranger->connect("localhost", port, 0, Purpose::kJoin, 1 << 20);
  auto misnamed = must(Door::open(pki.learner(pki.ours, "elsewhere.example"), client.events()));
  const uint64_t m = misnamed->connect("localhost", port, 0, Purpose::kJoin, 1 << 20);
  auto plain = must(Door::open(options(), client.events()));
  const uint64_t p = plain->connect("127.0.0.1", port, 0, Purpose::kJoin, 1 << 20);
  BOOST_REQUIRE(client.wait([&] { return client.closed.count(s) && client.closed.count(m) && client.closed.count(p); }));
  for (uint64_t id : {s, m, p}) {
    BOOST_TEST_MESSAGE("refused: " << client.closed[id]);
    BOOST_TEST(client.opened.count(id) == 0u);  // no Hello ever left
  }
  BOOST_TEST(client.closed[s].find("TLS") != std::string::npos);
  BOOST_TEST(server.opened.size() == 1u);
  BOOST_TEST(listener->counters().handshake_failed.load() >= 2u);

  // A listener that wants learners of another name refuses ours in the handshake.
  DoorOptions picky = pki.syncer();
  picky.tls.peer_name = "someone-else";
  Inbox picky_events;
  auto strict = must(Door::open(picky, picky_events.events()));
  const uint16_t strict_port = *strict->listen("127.0.0.1", 0);
  const uint64_t q = member->connect("localhost", strict_port, 0, Purpose::kJoin, 1 << 20);
  BOOST_REQUIRE(client.wait([&] { return client.closed.count(q) == 1; }));
  BOOST_TEST(picky_events.opened.empty());
  BOOST_TEST(strict->counters().handshake_failed.load() == 1u);

  // The name on the syncer's certificate: syncer.example is one of its SANs.
  auto by_name = must(Door::open(pki.learner(pki.ours, "syncer.example"), client.events()));
  const uint64_t n = by_name->connect("127.0.0.1", port, 3, Purpose::kJoin, 1 << 20);
  BOOST_TEST(client.wait([&] { return client.opened.count(n) == 1; }));
}

// A learner without TLS waits for a challenge a TLS syncer never sends (it
// waits for a TLS hello): whichever deadline comes first, the learner is told
// the likely cause.
BOOST_AUTO_TEST_CASE(a_learner_without_tls_is_told_why_whichever_side_gives_up_first) {
  Pki pki;
  for (const bool learner_first : {true, false}) {
    Inbox server, client;
    DoorOptions syncer = pki.syncer(), plain = options();
    (learner_first ? syncer : plain).handshake_seconds = 30;
    (learner_first ? plain : syncer).handshake_seconds = 0.5;
    auto listener = must(Door::open(syncer, server.events()));
    const uint16_t port = *listener->listen("127.0.0.1", 0);
    auto learner = must(Door::open(plain, client.events()));
    const uint64_t id = learner->connect("127.0.0.1", port, 0, Purpose::kJoin, 1 << 20);
    BOOST_REQUIRE(client.wait([&] { return client.closed.count(id) == 1; }));
    BOOST_TEST_MESSAGE("learner first " << learner_first << ": " << client.closed[id]);
    BOOST_TEST(client.closed[id].find("before its challenge: does it require TLS") != std::string::npos,
               client.closed[id]);
  }
}

BOOST_AUTO_TEST_CASE(tls_is_1_3_only) {
  Pki pki;
  Inbox server;
  auto listener = must(Door::open(pki.syncer(), server.events()));
  const uint16_t port = *listener->listen("127.0.0.1", 0);
  // A client with our own learner certificate that offers TLS 1.2 at most.
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
  BOOST_REQUIRE(SSL_CTX_use_certificate_file(ctx, pki.ours.learner_certificate.c_str(), SSL_FILETYPE_PEM) == 1);
  BOOST_REQUIRE(SSL_CTX_use_PrivateKey_file(ctx, pki.ours.learner_key.c_str(), SSL_FILETYPE_PEM) == 1);
  Raw r(port);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, r.fd);
  BOOST_TEST(SSL_connect(ssl) != 1);
  SSL_free(ssl);
  // The same client allowed TLS 1.3 gets through.
  SSL_CTX_set_max_proto_version(ctx, 0);
  Raw r13(port);
  ssl = SSL_new(ctx);
  SSL_set_fd(ssl, r13.fd);
  BOOST_TEST(SSL_connect(ssl) == 1);
  BOOST_TEST(std::string(SSL_get_version(ssl)) == "TLSv1.3");
  SSL_free(ssl);
  SSL_CTX_free(ctx);
}

BOOST_AUTO_TEST_CASE(tls_files_are_checked_with_errors_that_name_the_file) {
  Pki pki;
  DoorTls t{pki.ours.syncer_certificate, pki.ours.syncer_key, pki.ours.ca, ""};
  BOOST_TEST(check_tls_files(t).ok());
  DoorTls wrong_key = t;
  wrong_key.key = pki.ours.learner_key;
  BOOST_TEST(check_tls_files(wrong_key).message() == pki.ours.learner_key + " is not the key of " + t.certificate);
  DoorTls wrong_ca = t;
  wrong_ca.ca = pki.theirs.ca;
  BOOST_TEST(check_tls_files(wrong_ca).message().find("does not verify against the CA in " + pki.theirs.ca) != std::string::npos);
  DoorTls missing = t;
  missing.ca = "/nonexistent/ca.pem";
  BOOST_TEST(check_tls_files(missing).message().find("/nonexistent/ca.pem") != std::string::npos);
  ::chmod(t.key.c_str(), 0644);
  BOOST_TEST(check_tls_files(t).message().find("can be read by others") != std::string::npos);
  ::chmod(t.key.c_str(), 0600);
  // Door::open refuses the same, with the same words.
  BOOST_TEST(!Door::open([&] { DoorOptions o = options(); o.tls = wrong_key; return o; }(), {}).ok());
  // make_certificates does not overwrite, and reuses the CA.
  auto again = make_certificates({std::filesystem::path(pki.ours.ca).parent_path().string(), {}, 2, false});
  BOOST_TEST(again.status().message().find("exists: pass --force") != std::string::npos);
  auto forced = make_certificates({std::filesystem::path(pki.ours.ca).parent_path().string(), {}, 2, true});
  BOOST_REQUIRE(forced.ok());
  BOOST_TEST(forced->ca_reused);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
