// --web.config.file: TLS and basic authentication in the format of
// Prometheus' exporter-toolkit, so that users reuse the files they have:
//
//   tls_server_config:
//     cert_file: server.crt
//     key_file: server.key
//     client_auth_type: RequireAndVerifyClientCert   # or NoClientCert, VerifyClientCertIfGiven
//     client_ca_file: ca.crt
//     min_version: TLS12                              # TLS10, TLS11, TLS12, TLS13
//   basic_auth_users:
//     prometheus: $2y$10$...                         # bcrypt hashes
//
// Thread-safety: plain values; verify_password is reentrant.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace gym::exporter {

struct WebConfig {
  bool tls = false;
  std::string cert_file;
  std::string key_file;
  std::string client_auth_type = "NoClientCert";
  std::string client_ca_file;
  std::string min_version = "TLS12";
  std::map<std::string, std::string> basic_auth_users;  // user -> bcrypt hash
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
bool verify_password(const std::string& password, const std::string& hash);

}  // namespace gym::exporter
