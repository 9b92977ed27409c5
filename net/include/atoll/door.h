// The door: the only way atoll's processes reach each other (docs/design.md section 10).
//
// A Door owns every socket of its process and serves them from one thread
// with an event loop (Cap'n Proto's kj async I/O, and kj-tls for TLS). It
// listens (the syncer's side), connects (a learner's side), or both. Only
// frames cross it; no CAF actor handle ever does:
//
//   frame       u32 length (little-endian), then that many bytes: one encoded
//               atoll message (atoll/messages.h, with its CRC). Length 0 is a
//               keepalive.
//   connection  [TLS 1.3: each side shows a certificate of the cluster's CA,
//                and the name on it is checked]
//               listener -> Challenge{nonce, fresh for this connection}
//               connector -> Hello{learner, purpose, door_proof(token, nonce, ...)}
//               then frames both ways until either side closes. A refused
//               peer gets one Reject that says why, then the door closes.
//
// Limits come before buffering. A frame's length is checked against the
// connection's limit before a byte of its body is kept: kHandshakeFrameBytes
// until the Hello is accepted, max_frame_bytes after. A connection whose TLS
// handshake and Hello have not finished within handshake_seconds is closed,
// and one address holds at most max_unauthenticated_per_address such
// connections at a time. A connection that receives nothing (not even a
// keepalive) for timeout_seconds is closed: a frozen host, a half-open
// connection.
//
// Threads: events run on the door's thread, in order for each connection;
// they must not block and must not call back into the Door. Everything else
// may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "atoll/link_shape.h"
#include "atoll/messages.h"
#include "atoll/status.h"

namespace atl {

// TLS for a door: on once a certificate is given, and then not optional:
// plain TCP to a TLS door fails its handshake.
struct DoorTls {
  std::string certificate;  // PEM file: this process's certificate (chain)
  std::string key;          // PEM file: its private key
  std::string ca;           // PEM file: the CA every peer's certificate must be signed by
  // The name the peer's certificate must carry. Connecting: the syncer's
  // (one of its DNS SANs, or an IP SAN); empty means the host joined.
  // Listening: every learner's common name; empty means kLearnerName.
  std::string peer_name;
  bool on() const { return !certificate.empty(); }
};

// The name `atoll certs` gives learner certificates, and what a listening
// door requires of them by default.
inline constexpr const char* kLearnerName = "atoll-learner";

// The largest frame a peer may send before its Hello is accepted.
inline constexpr size_t kHandshakeFrameBytes = 4096;

struct DoorOptions {
  std::string token;  // the cluster token (atoll/cluster_token.h); required
  DoorTls tls;
  LinkShape link;
  uint32_t learners = 0;                    // listening: Hello ids must be below this
  size_t max_frame_bytes = size_t{64} << 20;  // after the Hello
  double handshake_seconds = 10.0;          // TLS and Hello, from the connection's start
  int max_unauthenticated_per_address = 16;
  // Connecting: this process's name in every Hello, so that the syncer
  // knows its reconnections for the same process (0: this_process()).
  uint64_t process = 0;
  double heartbeat_seconds = 1.0;  // a keepalive goes out when nothing else did for this long
  double timeout_seconds = 5.0;    // a connection that receives nothing this long is closed
};

struct DoorEvents {
  // A connection passed its handshake. Listening: a peer's Hello was good;
  // connecting: the Hello went out. `process` is the peer's (listening) or
  // ours (connecting); `peer` its address (and, over TLS, its certificate's name).
  std::function<void(uint64_t conn, uint32_t learner, Purpose purpose, uint64_t process, const std::string& peer)> opened;
  // A whole frame of an opened connection, unread by the door.
  std::function<void(uint64_t conn, std::vector<uint8_t> message)> frame;
  // Closed by either side or the door, once per connection, opened or not;
  // `why` says which ("closed by the peer", "silent for 5 s", "refused: ...");
  // it starts with "cannot connect" exactly when the network failed before a
  // TCP connection was made (a refused port, an unknown host).
  std::function<void(uint64_t conn, const std::string& why)> closed;
};

// What the door turned away, for reports and tests.
struct DoorCounters {
  std::atomic<uint64_t> accepted{0};        // connections the listener took
  std::atomic<uint64_t> opened{0};          // of those, with a good Hello
  std::atomic<uint64_t> refused{0};         // a bad Hello: token, id, message
  std::atomic<uint64_t> crowded{0};         // over the per-address cap, closed at once
  std::atomic<uint64_t> oversized{0};       // a frame longer than the limit
  std::atomic<uint64_t> handshake_failed{0};  // TLS refused, or no Hello in time
  std::atomic<uint64_t> timed_out{0};       // opened, then silent
  std::atomic<uint64_t> unauthenticated{0}; // connections without a good Hello now
};

class Door {
 public:
  // Loads the TLS files (errors name the file) and starts the door's thread.
  static Result<std::unique_ptr<Door>> open(DoorOptions options, DoorEvents events);
  // Closes every connection without events and joins the thread.
  ~Door();
  Door(const Door&) = delete;
  Door& operator=(const Door&) = delete;

  // Listens on host:port (port 0: any free one) and returns the port bound.
  Result<uint16_t> listen(const std::string& host, uint16_t port);
  // Connects to host:port as `learner` with `purpose`; what follows comes as
  // events of the connection id returned (a refusal as a Reject frame,
  // then closed). `max_frame_bytes` bounds the frames it may receive.
  uint64_t connect(const std::string& host, uint16_t port, uint32_t learner, Purpose purpose,
                   size_t max_frame_bytes);
  // Queues `message` on `conn` (dropped if it is closed).
  void send(uint64_t conn, std::vector<uint8_t> message);
  // Closes `conn` once what is queued has gone out.
  void close(uint64_t conn, const std::string& why);
  // Closes every connection once what is queued has gone out, and waits for
  // that up to `seconds`: the end of a process, after its last send.
  void drain(double seconds);

  const DoorCounters& counters() const;
  const DoorOptions& options() const;

 private:
  struct Impl;
  explicit Door(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// This process's name at the door: random, drawn once, the same for every
// door it opens, so that a slot claimed through one door (atoll/cluster.h)
// is taken by the learner that registers through another.
uint64_t this_process();

}  // namespace atl
