#include "cluster_flags.h"

#include "atoll/certificates.h"
#include "atoll/cluster_token.h"
#include "command.h"

namespace atl::cli {

void add_cluster_flags(CLI::App* command, ClusterFlags& f, const char* peer) {
  const bool syncer_side = std::string(peer) == "learner";
  command->add_option("--token-file", f.token_file, "File holding the cluster token (default: $ATOLL_TOKEN)");
  command->add_option("--timeout", f.timeout,
                      syncer_side ? "Seconds of silence (no heartbeat) before a learner counts as failed"
                                  : "Seconds of silence (no heartbeat) before the syncer counts as lost")
      ->capture_default_str()
      ->check(kPositiveSeconds);
  if (syncer_side)
    command->add_option("--handshake-timeout", f.handshake_timeout,
                        "Seconds a new connection has to finish its handshake (TLS, then the cluster token's proof) "
                        "before the syncer closes it; until then it counts toward a per-address cap of 16")
        ->capture_default_str()
        ->check(kPositiveSeconds);
  command->add_option("--tls-cert", f.tls_cert,
                      syncer_side ? "TLS 1.3: this process's certificate (PEM; `atoll certs` makes one); with --tls-key "
                                    "and --tls-ca. Then every learner must show a certificate of the same CA"
                                  : "TLS 1.3: this process's certificate (PEM; learner.pem of `atoll certs`); with "
                                    "--tls-key and --tls-ca");
  command->add_option("--tls-key", f.tls_key, "TLS: this process's private key (PEM, mode 600)");
  command->add_option("--tls-ca", f.tls_ca,
                      syncer_side ? "TLS: the CA that signed every learner's certificate (PEM)"
                                  : "TLS: the CA that signed the syncer's certificate (PEM)");
  auto* name = command->add_option("--tls-name", f.tls_name,
                                   syncer_side ? "TLS: the common name learner certificates must carry"
                                               : "TLS: the name the syncer's certificate must carry (default: the "
                                                 "host of --join)");
  if (syncer_side) name->default_str(kLearnerName);
  command->add_option("--link", f.link,
                      "Emulate a wide-area link on what this process sends, e.g. "
                      "rate=100mbit,delay=20ms,jitter=1ms,loss=0.001");
}

Status apply_cluster_flags(const ClusterFlags& f, RunOptions::Cluster& cluster) {
  auto token = load_cluster_token(f.token_file);
  if (!token.ok()) return token.status();
  cluster.token = *token;
  cluster.connection_timeout_seconds = f.timeout;
  cluster.handshake_seconds = f.handshake_timeout;
  if (!f.link.empty()) {
    auto shape = parse_link_shape(f.link);
    if (!shape.ok()) return shape.status().with_context("--link");
    cluster.link = *shape;
  }
  const int given = !f.tls_cert.empty() + !f.tls_key.empty() + !f.tls_ca.empty();
  if (given == 0) {
    if (!f.tls_name.empty()) return Status::invalid_argument("--tls-name needs --tls-cert, --tls-key and --tls-ca");
    return {};
  }
  if (given != 3) return Status::invalid_argument("TLS needs all of --tls-cert, --tls-key and --tls-ca");
  cluster.tls_certificate = f.tls_cert;
  cluster.tls_key = f.tls_key;
  cluster.tls_ca = f.tls_ca;
  cluster.tls_name = f.tls_name;
  return check_tls_files({f.tls_cert, f.tls_key, f.tls_ca, f.tls_name});
}

}  // namespace atl::cli
