// --web.config.file: TLS and basic authentication in the format of
// Prometheus' exporter-toolkit, so that users reuse the files they have:
//
//   tls_server_config:
//     cert_file: server.crt
//     key_file: server.key
//     client_auth_type: RequireAndVerifyClientCert   # or NoClientCert, VerifyClientCertIfGiven
//     client_ca_file: ca.crt
//     min_version: TLS12                              # TLS10, TLS11, TLS12, TLS13
//     max_version: TLS13                              # the same; default: the newest
//     cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, ...]   # Go's names
//     prefer_server_cipher_suites: true               # the server's order wins
//   basic_auth_users:
//     prometheus: $2y$10$...                         # bcrypt hashes
//   http_server_config:
//     headers:                                        # added to every reply
//       Strict-Transport-Security: max-age=31536000
//     http2: false                                    # accepted: HTTP/1.1 only
//
// cipher_suites takes Go's names (crypto/tls), for TLS 1.0-1.2 as in Go;
// TLS 1.3's three are accepted and change nothing (Go does not configure
// them either). Without it, the TLS 1.2 suites are ECDHE with AES-GCM or
// ChaCha20-Poly1305 only (no CBC suite, no static RSA), in the server's
// order unless prefer_server_cipher_suites is false.
//
// Thread-safety: plain values; verify_password is reentrant; PasswordCache
// is thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace gym::exporter {

struct WebConfig {
  bool tls = false;
  std::string cert_file;
  std::string key_file;
  std::string client_auth_type = "NoClientCert";
  std::string client_ca_file;
  std::string min_version = "TLS12";
  std::string max_version;                 // empty: the newest
  std::vector<std::string> cipher_suites;  // OpenSSL's names; empty: the default list
  bool prefer_server_cipher_suites = true;
  std::map<std::string, std::string> basic_auth_users;  // user -> bcrypt hash
  std::map<std::string, std::string> headers;           // http_server_config.headers
  bool operator==(const WebConfig&) const = default;
};

struct WebConfigResult {
  WebConfig config;
  std::vector<std::string> errors;  // each with file, line and column
  bool ok() const { return errors.empty(); }
};

WebConfigResult load_web_config_file(const std::string& path);
WebConfigResult parse_web_config(const std::string& yaml, const std::string& name);

// Whether `password` matches the bcrypt `hash` ($2a$, $2b$ or $2y$).
// The TLS 1.2 suites served without cipher_suites, in OpenSSL's names and in
// the server's order of preference.
extern const char* const kDefaultCipherSuites;
// OpenSSL's name of Go's TLS 1.0-1.2 suite `go_name` ("" for TLS 1.3's,
// which are not configured), or nullopt for a name Go does not have.
std::optional<std::string> openssl_cipher(const std::string& go_name);

bool verify_password(const std::string& password, const std::string& hash);
// How many bcrypt checks verify_password has made in this process.
uint64_t password_verifications();

// Checked credentials, remembered as exporter-toolkit remembers them: bcrypt
// costs tens of milliseconds, which every authenticated request would pay.
// The outcome of checking (user, password) against a hash is kept under all
// three, so a changed hash (a reload) is checked again. At most kEntries
// outcomes are kept: the cache is emptied when full, so that guessing cannot
// grow it. Thread-safe.
class PasswordCache {
 public:
  using Verify = bool (*)(const std::string& password, const std::string& hash);
  static constexpr size_t kEntries = 256;
  explicit PasswordCache(Verify verify = &verify_password) : verify_(verify) {}
  bool check(const std::string& user, const std::string& password, const std::string& hash);

 private:
  Verify verify_;
  std::mutex mu_;
  std::unordered_map<std::string, bool> outcomes_;
};

}  // namespace gym::exporter
