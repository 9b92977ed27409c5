// Certificates for a cluster's TLS (atoll/door.h): checking the files a
// process is given, and making a small CA with its certificates for a test
// cluster (`atoll certs DIR`).
#pragma once

#include <string>
#include <vector>

#include "atoll/door.h"
#include "atoll/status.h"

namespace atl {

// Checks what a TLS handshake would otherwise find out late and vaguely:
// every file is readable PEM, the key belongs to the certificate, the
// certificate is signed by the CA and valid today. Errors name the file.
Status check_tls_files(const DoorTls& tls);

struct CertificateRequest {
  std::string dir;                          // created if missing (mode 0700)
  std::vector<std::string> syncer_names;    // DNS names (or IP addresses) of the syncer host, beside localhost
  int days = 365;                           // validity of the syncer and learner certificates
  bool force = false;                       // replace existing syncer and learner files
};

struct CertificateFiles {
  std::string ca, syncer_certificate, syncer_key, learner_certificate, learner_key;
  bool ca_reused = false;  // DIR already held ca.pem and ca.key
};

// In `dir`: ca.pem and ca.key (made, or reused when both exist),
// syncer.pem/.key (SANs: localhost, 127.0.0.1, ::1 and syncer_names, each
// address also as a DNS name, which is how kj checks it; for servers) and learner.pem/.key (named kLearnerName; for clients). ECDSA
// P-256, SHA-256; keys are written mode 0600. Existing syncer or learner
// files are an error without `force`.
Result<CertificateFiles> make_certificates(const CertificateRequest& request);

}  // namespace atl
