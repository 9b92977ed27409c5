// The network flags `atoll syncer` and `atoll learner` share: the token, TLS
// and an emulated link.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "atoll/run.h"

namespace atl::cli {

struct ClusterFlags {
  std::string token_file;
  std::string tls_cert, tls_key, tls_ca, tls_name, link;
  double timeout = 5;  // seconds of silence before the peer counts as lost
  double handshake_timeout = RunOptions::Cluster{}.handshake_seconds;  // the syncer's --handshake-timeout
};

// --token-file, --timeout, --tls-cert/--tls-key/--tls-ca/--tls-name, --link (and, for the
// syncer, --handshake-timeout); `peer` is who the other side is ("learner", "syncer"), for the help.
void add_cluster_flags(CLI::App* command, ClusterFlags& flags, const char* peer);

// The token (from --token-file or $ATOLL_TOKEN), all three TLS files or none
// (checked now: readable, the key of the certificate, signed by the CA, valid
// today, not at the first handshake), and the link, into `cluster`.
Status apply_cluster_flags(const ClusterFlags& flags, RunOptions::Cluster& cluster);

}  // namespace atl::cli
