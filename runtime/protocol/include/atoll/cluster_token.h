// The cluster token: the shared secret that lets a learner in another process
// join the syncer (docs/design.md section 10).
//
// The token never crosses the network and is never printed. A learner proves
// it knows the token by sending, in its Register, the HMAC-SHA256 of what it
// registers as (learner id, incarnation, model fingerprint) keyed with the
// token. A proof only ever admits the registration it was made for.
//
// Across processes, a connection is admitted before any Register crosses
// it: the syncer's door sends a fresh nonce (Challenge) and the peer answers
// with door_proof() of it (Hello). So a Hello or a Register recorded on one
// connection is worth nothing on another, even right after a syncer restart.
//
// What this does not do: hide the traffic or stop someone on the path from
// altering it. That is TLS's part (atoll/door.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "atoll/status.h"

namespace atl {

inline constexpr size_t kMinTokenBytes = 16;
inline constexpr const char* kTokenEnv = "ATOLL_TOKEN";

// The token from `file` (trailing whitespace dropped), or with an empty
// `file` from $ATOLL_TOKEN. Errors name the source: a missing or unreadable
// file, an unset variable, a token shorter than kMinTokenBytes.
Result<std::string> load_cluster_token(const std::string& file);

// A fresh token: 32 bytes from the system's random source, as 64 hex digits.
std::string make_cluster_token();

// HMAC-SHA256(token, "atoll-join" | learner | incarnation | fingerprint), 32 bytes.
std::string join_proof(std::string_view token, uint32_t learner, uint64_t incarnation, uint64_t fingerprint);

// True if `proof` is join_proof() of the same values (constant-time compare).
bool check_join_proof(std::string_view token, std::string_view proof, uint32_t learner, uint64_t incarnation,
                      uint64_t fingerprint);

inline constexpr size_t kNonceBytes = 32;

// kNonceBytes from the system's random source: a door's Challenge.
std::string make_nonce();

// HMAC-SHA256(token, "atoll-door" | nonce | learner | purpose | process),
// 32 bytes: a Hello's proof for the connection that issued `nonce`.
std::string door_proof(std::string_view token, std::string_view nonce, uint32_t learner, uint8_t purpose,
                       uint64_t process);

// True if `proof` is door_proof() of the same values and the nonce has the
// right size (constant-time compare).
bool check_door_proof(std::string_view token, std::string_view proof, std::string_view nonce, uint32_t learner,
                      uint8_t purpose, uint64_t process);

}  // namespace atl
