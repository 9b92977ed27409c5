#include "atoll/cluster_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace atl {

Result<std::string> load_cluster_token(const std::string& file) {
  std::string token, source;
  if (file.empty()) {
    const char* env = std::getenv(kTokenEnv);
    if (!env || !*env)
      return Status::invalid_argument(std::string("no cluster token: set $") + kTokenEnv + " or pass --token-file");
    token = env;
    source = std::string("$") + kTokenEnv;
  } else {
    std::ifstream in(file, std::ios::binary);
    if (!in) return Status::not_found(file + ": cannot read the cluster token: " + std::strerror(errno));
    std::ostringstream text;
    text << in.rdbuf();
    token = text.str();
    source = file;
  }
  while (!token.empty() && std::strchr(" \t\r\n", token.back())) token.pop_back();
  if (token.size() < kMinTokenBytes)
    return Status::invalid_argument(source + ": the cluster token has " + std::to_string(token.size()) +
                                    " bytes; at least " + std::to_string(kMinTokenBytes) + " are needed");
  return token;
}

std::string make_cluster_token() {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1) std::abort();  // no randomness: nothing safe to return
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : raw) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  return hex;
}

std::string join_proof(std::string_view token, uint32_t learner, uint64_t incarnation, uint64_t fingerprint) {
  // Fixed-width little-endian fields after a domain label: no two inputs collide.
  unsigned char data[10 + 4 + 8 + 8];
  std::memcpy(data, "atoll-join", 10);
  for (int i = 0; i < 4; ++i) data[10 + i] = static_cast<unsigned char>(learner >> (8 * i));
  for (int i = 0; i < 8; ++i) data[14 + i] = static_cast<unsigned char>(incarnation >> (8 * i));
  for (int i = 0; i < 8; ++i) data[22 + i] = static_cast<unsigned char>(fingerprint >> (8 * i));
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), data, sizeof data, mac, &length);
  return std::string(reinterpret_cast<const char*>(mac), length);
}

bool check_join_proof(std::string_view token, std::string_view proof, uint32_t learner, uint64_t incarnation,
                      uint64_t fingerprint) {
  const std::string expected = join_proof(token, learner, incarnation, fingerprint);
  return proof.size() == expected.size() && CRYPTO_memcmp(proof.data(), expected.data(), proof.size()) == 0;
}

std::string make_nonce() {
  unsigned char raw[kNonceBytes];
  if (RAND_bytes(raw, sizeof raw) != 1) std::abort();  // no randomness: nothing safe to return
  return std::string(reinterpret_cast<const char*>(raw), sizeof raw);
}

std::string door_proof(std::string_view token, std::string_view nonce, uint32_t learner, uint8_t purpose,
                       uint64_t process) {
  std::string data = "atoll-door";  // a label of its own: a join proof never passes as a door proof
  data.append(nonce);
  for (int i = 0; i < 4; ++i) data += static_cast<char>(learner >> (8 * i));
  data += static_cast<char>(purpose);
  for (int i = 0; i < 8; ++i) data += static_cast<char>(process >> (8 * i));
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), mac, &length);
  return std::string(reinterpret_cast<const char*>(mac), length);
}

bool check_door_proof(std::string_view token, std::string_view proof, std::string_view nonce, uint32_t learner,
                      uint8_t purpose, uint64_t process) {
  if (nonce.size() != kNonceBytes) return false;
  const std::string expected = door_proof(token, nonce, learner, purpose, process);
  return proof.size() == expected.size() && CRYPTO_memcmp(proof.data(), expected.data(), proof.size()) == 0;
}

}  // namespace atl
