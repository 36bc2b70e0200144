#include "web_config.h"

#include <crypt.h>

#include <strings.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>
#include <atomic>

#include <algorithm>
#include <cstring>
#include <memory>

#include "yaml_reader.h"

namespace gym::exporter {

namespace {

bool is_bcrypt(const std::string& hash) {
  return hash.size() == 60 &&
         (hash.rfind("$2a$", 0) == 0 || hash.rfind("$2b$", 0) == 0 || hash.rfind("$2y$", 0) == 0);
}

}  // namespace

namespace {
std::atomic<uint64_t> g_verifications{0};
}  // namespace

uint64_t password_verifications() {
  return g_verifications.load(std::memory_order_relaxed);
}

bool verify_password(const std::string& password, const std::string& hash) {
  if (!is_bcrypt(hash)) return false;
  g_verifications.fetch_add(1, std::memory_order_relaxed);
  auto data = std::make_unique<crypt_data>();
  std::memset(data.get(), 0, sizeof(crypt_data));
  const char* out = crypt_r(password.c_str(), hash.c_str(), data.get());
  if (out == nullptr || out[0] == '*') return false;
  // Compare the whole string without stopping at the first difference.
  if (std::strlen(out) != hash.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < hash.size(); ++i) diff |= static_cast<unsigned char>(out[i] ^ hash[i]);
  return diff == 0;
}

bool PasswordCache::check(const std::string& user, const std::string& password,
                          const std::string& hash) {
  std::string key = user;
  key.append(1, '\0').append(hash).append(1, '\0').append(password);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = outcomes_.find(key); it != outcomes_.end()) return it->second;
  }
  const bool ok = verify_(password, hash);  // slow: outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  if (outcomes_.size() >= kEntries) outcomes_.clear();
  outcomes_.emplace(std::move(key), ok);
  return ok;
}

const char* const kDefaultCipherSuites =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

std::optional<std::string> openssl_cipher(const std::string& go_name) {
  // crypto/tls's names (with its aliases) and OpenSSL's for the same suite.
  static const std::map<std::string, std::string> kNames = {
      {"TLS_RSA_WITH_AES_128_CBC_SHA", "AES128-SHA"},
      {"TLS_RSA_WITH_AES_256_CBC_SHA", "AES256-SHA"},
      {"TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"},
      {"TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384"},
      {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "ECDHE-ECDSA-AES128-SHA"},
      {"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "ECDHE-ECDSA-AES256-SHA"},
      {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"},
      {"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA-AES256-SHA"},
      {"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"},
      {"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"},
      {"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"},
      {"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"},
      {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"},
      {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "ECDHE-ECDSA-CHACHA20-POLY1305"},
      {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"},
      {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "ECDHE-RSA-CHACHA20-POLY1305"},
      {"TLS_AES_128_GCM_SHA256", ""},
      {"TLS_AES_256_GCM_SHA384", ""},
      {"TLS_CHACHA20_POLY1305_SHA256", ""}};
  auto it = kNames.find(go_name);
  if (it == kNames.end()) return std::nullopt;
  return it->second;
}

namespace {

void read_cipher_suites(YamlReader& rd, const YAML::Node& n, WebConfig& c) {
  if (!n.IsSequence() || n.size() == 0) {
    rd.error(n, "cipher_suites must be a list of Go's cipher suite names");
    return;
  }
  for (const auto& item : n) {
    std::string name;
    if (!rd.string(item, "cipher_suites[]", name)) continue;
    const std::optional<std::string> openssl = openssl_cipher(name);
    if (!openssl)
      rd.error(item, "cipher suite '" + name +
                         "' is not one of Go's (crypto/tls names, as "
                         "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)");
    else if (!openssl->empty())
      c.cipher_suites.push_back(*openssl);
  }
}

bool one_of(const std::string& v, std::initializer_list<const char*> allowed) {
  for (const char* a : allowed)
    if (v == a) return true;
  return false;
}

void read_tls(YamlReader& rd, const YAML::Node& v, WebConfig& c) {
  if (v.IsNull()) return;
  c.tls = v.IsMap();
  auto str = [&](const char* key, std::string& out) {
    return [&rd, key, &out](const YAML::Node& n) { return rd.string(n, key, out); };
  };
  rd.mapping(
      v, "tls_server_config",
      {{"cert_file", str("cert_file", c.cert_file)},
       {"key_file", str("key_file", c.key_file)},
       {"client_ca_file", str("client_ca_file", c.client_ca_file)},
       {"client_auth_type",
        [&](const YAML::Node& n) {
          if (rd.string(n, "client_auth_type", c.client_auth_type) &&
              !one_of(c.client_auth_type,
                      {"NoClientCert", "RequireAndVerifyClientCert", "VerifyClientCertIfGiven"}))
            rd.error(n, "client_auth_type '" + c.client_auth_type +
                            "' is not supported: use NoClientCert, VerifyClientCertIfGiven "
                            "or RequireAndVerifyClientCert");
        }},
       {"min_version",
        [&](const YAML::Node& n) {
          if (rd.string(n, "min_version", c.min_version) &&
              !one_of(c.min_version, {"TLS10", "TLS11", "TLS12", "TLS13"}))
            rd.error(n, "min_version '" + c.min_version + "' must be TLS10, TLS11, TLS12 or TLS13");
        }},
       {"max_version",
        [&](const YAML::Node& n) {
          if (rd.string(n, "max_version", c.max_version) &&
              !one_of(c.max_version, {"TLS10", "TLS11", "TLS12", "TLS13"}))
            rd.error(n, "max_version '" + c.max_version + "' must be TLS10, TLS11, TLS12 or TLS13");
          else if (!c.max_version.empty() && c.max_version < c.min_version)
            rd.error(n, "max_version " + c.max_version + " is below min_version " + c.min_version);
        }},
       {"cipher_suites", [&](const YAML::Node& n) { read_cipher_suites(rd, n, c); }},
       {"prefer_server_cipher_suites", [&](const YAML::Node& n) {
          rd.boolean(n, "prefer_server_cipher_suites", c.prefer_server_cipher_suites);
        }}});
}

// The headers exporter-toolkit allows in http_server_config.headers.
const char* const kAllowedHeaders[] = {"Strict-Transport-Security", "X-Content-Type-Options",
                                       "X-Frame-Options", "X-XSS-Protection",
                                       "Content-Security-Policy"};

void read_http(YamlReader& rd, const YAML::Node& v, WebConfig& c) {
  if (v.IsNull()) return;
  rd.mapping(
      v, "http_server_config",
      {{"http2",
        [&](const YAML::Node& n) {
          bool ignored = false;  // the exporter speaks HTTP/1.1 only
          rd.boolean(n, "http2", ignored);
        }},
       {"headers", [&](const YAML::Node& n) {
          if (n.IsNull()) return;
          if (!n.IsMap()) {
            rd.error(n, "http_server_config.headers must be a mapping");
            return;
          }
          for (const auto& h : n) {
            std::string name, value;
            if (!rd.string(h.first, "a header name", name) ||
                !rd.string(h.second, "the value of header " + name, value))
              continue;
            const auto* allowed =
                std::find_if(std::begin(kAllowedHeaders), std::end(kAllowedHeaders),
                             [&](const char* a) { return strcasecmp(a, name.c_str()) == 0; });
            if (allowed == std::end(kAllowedHeaders)) {
              rd.error(h.first, "header '" + name +
                                    "' cannot be set: only Strict-Transport-Security, "
                                    "X-Content-Type-Options, X-Frame-Options, "
                                    "X-XSS-Protection and Content-Security-Policy");
              continue;
            }
            if (value.empty() || value.find_first_of("\r\n") != std::string::npos) {
              rd.error(h.second, "the value of header " + name + " must be one non-empty line");
              continue;
            }
            c.headers[*allowed] = value;
          }
        }}});
}

void read_users(YamlReader& rd, const YAML::Node& v, WebConfig& c) {
  if (v.IsNull()) return;
  if (!v.IsMap()) {
    rd.error(v, "basic_auth_users must be a mapping");
    return;
  }
  for (const auto& u : v) {
    std::string user, hash;
    if (!rd.string(u.first, "a basic_auth_users name", user)) continue;
    if (!rd.string(u.second, "the hash of " + user, hash)) continue;
    if (user.empty() || user.find(':') != std::string::npos) {
      rd.error(u.first, "user name '" + user + "' must be non-empty and hold no ':'");
      continue;
    }
    if (!is_bcrypt(hash)) {
      rd.error(u.second,
               "the password of '" + user + "' must be a bcrypt hash ($2a$, $2b$ or $2y$)");
      continue;
    }
    c.basic_auth_users[user] = hash;
  }
}

// What needs the whole file: TLS needs a certificate and its key, readable.
void check_tls(YamlReader& rd, const YAML::Node& root, const WebConfig& c) {
  if (!c.tls) return;
  const YAML::Node at = root["tls_server_config"];
  if (c.cert_file.empty() || c.key_file.empty())
    rd.error(at, "tls_server_config needs cert_file and key_file");
  for (const std::string* f : {&c.cert_file, &c.key_file, &c.client_ca_file})
    if (!f->empty() && ::access(f->c_str(), R_OK) != 0) rd.error(at, "cannot read " + *f);
  if (c.client_auth_type != "NoClientCert" && c.client_ca_file.empty())
    rd.error(at, "client_auth_type " + c.client_auth_type + " needs client_ca_file");
}

WebConfigResult parse_web_node(YamlReader& rd, std::optional<YAML::Node> root) {
  WebConfigResult r;
  if (!root) return r;
  WebConfig& c = r.config;
  if (!root->IsNull() && !root->IsMap()) {
    rd.error(*root, "the web configuration must be a mapping");
    return r;
  }
  rd.mapping(*root, "",
             {{"tls_server_config", [&](const YAML::Node& v) { read_tls(rd, v, c); }},
              {"basic_auth_users", [&](const YAML::Node& v) { read_users(rd, v, c); }},
              {"http_server_config", [&](const YAML::Node& v) { read_http(rd, v, c); }}});
  check_tls(rd, *root, c);
  return r;
}

}  // namespace

WebConfigResult parse_web_config(const std::string& yaml, const std::string& name) {
  std::vector<std::string> errors;
  YamlReader rd(name, errors);
  WebConfigResult r = parse_web_node(rd, rd.load(yaml));
  r.errors = std::move(errors);
  return r;
}

WebConfigResult load_web_config_file(const std::string& path) {
  std::vector<std::string> errors;
  YamlReader rd(path, errors);
  WebConfigResult r = parse_web_node(rd, rd.load_file(path, "web configuration file"));
  r.errors = std::move(errors);
  return r;
}

}  // namespace gym::exporter
