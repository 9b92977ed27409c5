// `atoll certs DIR`: a CA and certificates for a cluster's TLS.
#include <cstdio>
#include <memory>

#include "atoll/certificates.h"
#include "command.h"

namespace atl::cli {
namespace {

int certs_command(const CertificateRequest& request) {
  auto made = make_certificates(request);
  if (!made.ok()) return fail(made.status());
  std::string names;
  for (const auto& n : request.syncer_names) names += ", " + n;
  std::printf("%s: %s\n  syncer:  %s %s (localhost, 127.0.0.1, ::1%s)\n  learner: %s %s (%s)\n", request.dir.c_str(),
              made->ca_reused ? "reused the CA in ca.pem" : "made a CA (ca.pem, ca.key: keep ca.key safe)",
              made->syncer_certificate.c_str(), made->syncer_key.c_str(), names.c_str(),
              made->learner_certificate.c_str(), made->learner_key.c_str(), kLearnerName);
  return 0;
}

}  // namespace

void add_certs_command(CLI::App& app, int& status) {
  auto request = std::make_shared<CertificateRequest>();
  auto* certs = app.add_subcommand("certs", "Make a CA and certificates for a cluster's TLS (a test cluster; keep ca.key safe)");
  certs->add_option("dir", request->dir, "Folder for ca.pem/.key, syncer.pem/.key, learner.pem/.key")->required();
  certs->add_option("--syncer-name", request->syncer_names,
                    "A DNS name or IP address of the syncer's host, beside localhost (repeatable)");
  certs->add_option("--days", request->days, "Validity of the syncer and learner certificates")
      ->capture_default_str()
      ->check(CLI::Range(1, 3650));
  certs->add_flag("--force", request->force, "Replace existing syncer and learner files (the CA is reused)");
  certs->footer(
      "\nECDSA P-256 keys (mode 600), SHA-256 signatures. An existing ca.pem and ca.key are reused, so\n"
      "running it again with another --syncer-name issues new certificates of the same cluster.\n"
      "The syncer's certificate names localhost, 127.0.0.1, ::1 and every --syncer-name: learners check\n"
      "the host they join (or --tls-name) against it. Learner certificates are named atoll-learner.\n"
      "Example:\n"
      "  atoll certs certs --syncer-name syncer.example.org\n"
      "  atoll syncer --listen 0.0.0.0:7070 --token-file token --tls-cert certs/syncer.pem \\\n"
      "    --tls-key certs/syncer.key --tls-ca certs/ca.pem\n"
      "  atoll learner --join syncer.example.org:7070 --id 0 --token-file token \\\n"
      "    --tls-cert certs/learner.pem --tls-key certs/learner.key --tls-ca certs/ca.pem");
  certs->callback([request, &status] { status = certs_command(*request); });
}

}  // namespace atl::cli
