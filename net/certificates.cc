// Certificates for a cluster's TLS (atoll/certificates.h), with OpenSSL 3.
#include "atoll/certificates.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <arpa/inet.h>
#include <sys/stat.h>

#include <filesystem>
#include <memory>

#include "atoll/file.h"

namespace atl {
namespace {

namespace fs = std::filesystem;

struct Free {
  void operator()(X509* p) const { X509_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_STORE* p) const { X509_STORE_free(p); }
  void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
};
template <class T>
using Ptr = std::unique_ptr<T, Free>;

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

Result<Ptr<X509>> load_certificate(const std::string& path) {
  auto text = read_text(path, 1 << 20);
  if (!text.ok()) return text.status();
  Ptr<BIO> bio(BIO_new_mem_buf(text->data(), static_cast<int>(text->size())));
  Ptr<X509> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return Status::invalid_argument(path + ": not a PEM certificate (" + openssl_error() + ")");
  return cert;
}

Result<Ptr<EVP_PKEY>> load_key(const std::string& path) {
  auto text = read_text(path, 1 << 20);
  if (!text.ok()) return text.status();
  Ptr<BIO> bio(BIO_new_mem_buf(text->data(), static_cast<int>(text->size())));
  Ptr<EVP_PKEY> key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) return Status::invalid_argument(path + ": not an unencrypted PEM private key (" + openssl_error() + ")");
  return key;
}

Ptr<EVP_PKEY> new_key() { return Ptr<EVP_PKEY>(EVP_EC_gen("P-256")); }

bool add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  Ptr<X509_EXTENSION> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  return ext && X509_add_ext(cert, ext.get(), -1) == 1;
}

// A certificate for `key` named `name`, signed by issuer_key (self-signed when issuer is null).
Result<Ptr<X509>> issue(EVP_PKEY* key, const std::string& name, int days, X509* issuer, EVP_PKEY* issuer_key,
                        const std::vector<std::pair<int, std::string>>& extensions) {
  Ptr<X509> cert(X509_new());
  Ptr<BIGNUM> serial(BN_new());
  if (!cert || !serial || X509_set_version(cert.get(), 2) != 1 || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())))
    return Status::io_error("cannot make a certificate: " + openssl_error());
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);  // an hour of clock skew between hosts
  X509_time_adj_ex(X509_getm_notAfter(cert.get()), days, 0, nullptr);
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("atoll"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : subject);
  X509_set_pubkey(cert.get(), key);
  for (const auto& [nid, value] : extensions)
    if (!add_extension(cert.get(), issuer ? issuer : cert.get(), nid, value.c_str()))
      return Status::invalid_argument("cannot add " + std::string(OBJ_nid2sn(nid)) + " = " + value + ": " + openssl_error());
  if (X509_sign(cert.get(), issuer_key ? issuer_key : key, EVP_sha256()) == 0)
    return Status::io_error("cannot sign a certificate: " + openssl_error());
  return cert;
}

Status write_pem(const std::string& path, X509* cert, EVP_PKEY* key) {
  Ptr<BIO> bio(BIO_new(BIO_s_mem()));
  const int ok = cert ? PEM_write_bio_X509(bio.get(), cert)
                      : PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  if (ok != 1) return Status::io_error(path + ": " + openssl_error());
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  // A key is never readable by others, not even for a moment: the temporary file gets the mode first.
  const mode_t old = umask(key ? 077 : 022);
  Status s = write_file_atomic(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data), static_cast<size_t>(size)));
  umask(old);
  return s;
}

bool is_ip(const std::string& name) {
  unsigned char buf[16];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

}  // namespace

Status check_tls_files(const DoorTls& tls) {
  if (tls.certificate.empty() || tls.key.empty() || tls.ca.empty())
    return Status::invalid_argument("TLS needs a certificate, its key and the CA (--tls-cert, --tls-key, --tls-ca)");
  auto cert = load_certificate(tls.certificate);
  if (!cert.ok()) return cert.status();
  auto key = load_key(tls.key);
  if (!key.ok()) return key.status();
  auto ca = load_certificate(tls.ca);
  if (!ca.ok()) return ca.status();
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return Status::invalid_argument(tls.key + " is not the key of " + tls.certificate);
  }
  Ptr<X509_STORE> store(X509_STORE_new());
  Ptr<X509_STORE_CTX> ctx(X509_STORE_CTX_new());
  X509_STORE_add_cert(store.get(), ca->get());
  X509_STORE_CTX_init(ctx.get(), store.get(), cert->get(), nullptr);
  if (X509_verify_cert(ctx.get()) != 1) {
    const int err = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return Status::invalid_argument(tls.certificate + " does not verify against the CA in " + tls.ca + ": " +
                                    X509_verify_cert_error_string(err));
  }
  struct stat st{};
  if (::stat(tls.key.c_str(), &st) == 0 && (st.st_mode & 077) != 0)
    return Status::invalid_argument(tls.key + " can be read by others (mode " +
                                    std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) +
                                    std::to_string(st.st_mode & 7) + "): chmod 600 it");
  return {};
}

Result<CertificateFiles> make_certificates(const CertificateRequest& r) {
  if (r.days < 1 || r.days > 3650) return Status::invalid_argument("--days must be from 1 to 3650");
  std::error_code ec;
  fs::create_directories(r.dir, ec);
  if (ec) return Status::io_error("cannot create " + r.dir + ": " + ec.message());
  fs::permissions(r.dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  CertificateFiles out;
  const fs::path d(r.dir);
  out.ca = (d / "ca.pem").string();
  const std::string ca_key_path = (d / "ca.key").string();
  out.syncer_certificate = (d / "syncer.pem").string();
  out.syncer_key = (d / "syncer.key").string();
  out.learner_certificate = (d / "learner.pem").string();
  out.learner_key = (d / "learner.key").string();
  if (!r.force)
    for (const auto& p : {out.syncer_certificate, out.syncer_key, out.learner_certificate, out.learner_key})
      if (fs::exists(p)) return Status::invalid_argument(p + " exists: pass --force to replace the syncer and learner files");

  Ptr<X509> ca;
  Ptr<EVP_PKEY> ca_key;
  if (fs::exists(out.ca) && fs::exists(ca_key_path)) {
    auto c = load_certificate(out.ca);
    if (!c.ok()) return c.status();
    auto k = load_key(ca_key_path);
    if (!k.ok()) return k.status();
    if (X509_check_private_key(c->get(), k->get()) != 1) return Status::invalid_argument(ca_key_path + " is not the key of " + out.ca);
    ca = std::move(*c);
    ca_key = std::move(*k);
    out.ca_reused = true;
  } else if (fs::exists(out.ca) || fs::exists(ca_key_path)) {
    return Status::invalid_argument(r.dir + " holds one of ca.pem and ca.key but not the other: remove it or choose another folder");
  } else {
    ca_key = new_key();
    if (!ca_key) return Status::io_error("cannot make a key: " + openssl_error());
    auto c = issue(ca_key.get(), "atoll cluster CA", 3650, nullptr, nullptr,
                   {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                    {NID_key_usage, "critical,keyCertSign,cRLSign"},
                    {NID_subject_key_identifier, "hash"}});
    if (!c.ok()) return c.status();
    ca = std::move(*c);
    if (Status s = write_pem(ca_key_path, nullptr, ca_key.get()); !s.ok()) return s;
    if (Status s = write_pem(out.ca, ca.get(), nullptr); !s.ok()) return s;
  }

  // An address is also written as a DNS name: kj 0.9 checks the syncer's
  // certificate against the host joined as a host name, never as an IP SAN.
  std::string sans = "DNS:localhost,IP:127.0.0.1,DNS:127.0.0.1,IP:::1,DNS:::1";
  for (const auto& n : r.syncer_names) {
    if (n.empty() || n.find_first_of(",= \t") != std::string::npos)
      return Status::invalid_argument("syncer name '" + n + "': expected a host name or an IP address");
    sans += (is_ip(n) ? ",IP:" + n + ",DNS:" : ",DNS:") + n;
  }
  struct Leaf {
    std::string name, usage, sans, cert_path, key_path;
  };
  const Leaf leaves[] = {
      {"atoll-syncer", "serverAuth", sans, out.syncer_certificate, out.syncer_key},
      {kLearnerName, "clientAuth", std::string("DNS:") + kLearnerName, out.learner_certificate, out.learner_key},
  };
  for (const Leaf& leaf : leaves) {
    Ptr<EVP_PKEY> key = new_key();
    if (!key) return Status::io_error("cannot make a key: " + openssl_error());
    auto cert = issue(key.get(), leaf.name, r.days, ca.get(), ca_key.get(),
                      {{NID_basic_constraints, "critical,CA:FALSE"},
                       {NID_key_usage, "critical,digitalSignature"},
                       {NID_ext_key_usage, leaf.usage},
                       {NID_subject_alt_name, leaf.sans},
                       {NID_authority_key_identifier, "keyid"}});
    if (!cert.ok()) return cert.status();
    if (Status s = write_pem(leaf.key_path, nullptr, key.get()); !s.ok()) return s;
    if (Status s = write_pem(leaf.cert_path, cert->get(), nullptr); !s.ok()) return s;
  }
  return out;
}

}  // namespace atl
