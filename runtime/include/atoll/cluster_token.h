// The cluster token: the shared secret that lets a learner in another process
// join the syncer (DESIGN section 10).
//
// The token never crosses the network and is never printed. A learner proves
// it knows the token by sending, in its Register, the HMAC-SHA256 of what it
// registers as (learner id, incarnation, model fingerprint) keyed with the
// token. A proof only ever admits the registration it was made for. The
// syncer refuses that registration replayed from another process once it
// has seen it; a syncer that just restarted has not, until the learner
// registers again (there is no per-connection nonce yet).
//
// What this does not do: hide the traffic or stop someone on the path from
// altering it. That needs TLS (see the README's "Across machines").
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

}  // namespace atl
