#include "web_config.h"

#include <crypt.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include "yaml_support.h"

#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

namespace gym::exporter {

namespace {

bool is_bcrypt(const std::string& hash) {
  return hash.size() == 60 &&
         (hash.rfind("$2a$", 0) == 0 || hash.rfind("$2b$", 0) == 0 || hash.rfind("$2y$", 0) == 0);
}

}  // namespace

bool verify_password(const std::string& password, const std::string& hash) {
  if (!is_bcrypt(hash)) return false;
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

WebConfigResult parse_web_config(const std::string& yaml, const std::string& name) {
  WebConfigResult r;
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    r.errors.push_back(where(name, e.mark) + "invalid YAML: " + e.msg);
    return r;
  }
  if (root.IsNull()) return r;
  if (!root.IsMap()) {
    r.errors.push_back(where(name, root.Mark()) + "the web configuration must be a mapping");
    return r;
  }
  WebConfig& c = r.config;
  auto string = [&](const YAML::Node& n, const std::string& key, std::string& out) {
    if (!n.IsScalar()) {
      r.errors.push_back(where(name, n.Mark()) + key + " must be a string");
      return false;
    }
    out = n.Scalar();
    return true;
  };
  YAML::Mark tls_mark;
  for (const auto& kv : root) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
    const YAML::Node& v = kv.second;
    if (key == "tls_server_config") {
      tls_mark = kv.first.Mark();
      if (v.IsNull()) continue;
      if (!v.IsMap()) {
        r.errors.push_back(where(name, v.Mark()) + "tls_server_config must be a mapping");
        continue;
      }
      c.tls = true;
      for (const auto& t : v) {
        const std::string k = t.first.IsScalar() ? t.first.Scalar() : "?";
        if (k == "cert_file")
          string(t.second, k, c.cert_file);
        else if (k == "key_file")
          string(t.second, k, c.key_file);
        else if (k == "client_ca_file")
          string(t.second, k, c.client_ca_file);
        else if (k == "client_auth_type") {
          if (string(t.second, k, c.client_auth_type) && c.client_auth_type != "NoClientCert" &&
              c.client_auth_type != "RequireAndVerifyClientCert" &&
              c.client_auth_type != "VerifyClientCertIfGiven")
            r.errors.push_back(where(name, t.second.Mark()) + "client_auth_type '" +
                               c.client_auth_type +
                               "' is not supported: use NoClientCert, VerifyClientCertIfGiven "
                               "or RequireAndVerifyClientCert");
        } else if (k == "min_version") {
          if (string(t.second, k, c.min_version) && c.min_version != "TLS10" &&
              c.min_version != "TLS11" && c.min_version != "TLS12" && c.min_version != "TLS13")
            r.errors.push_back(where(name, t.second.Mark()) + "min_version '" + c.min_version +
                               "' must be TLS10, TLS11, TLS12 or TLS13");
        } else {
          r.errors.push_back(where(name, t.first.Mark()) + "unknown key 'tls_server_config." + k +
                             "'");
        }
      }
    } else if (key == "basic_auth_users") {
      if (v.IsNull()) continue;
      if (!v.IsMap()) {
        r.errors.push_back(where(name, v.Mark()) + "basic_auth_users must be a mapping");
        continue;
      }
      for (const auto& u : v) {
        std::string user, hash;
        if (!string(u.first, "a basic_auth_users name", user)) continue;
        if (!string(u.second, "the hash of " + user, hash)) continue;
        if (user.empty() || user.find(':') != std::string::npos) {
          r.errors.push_back(where(name, u.first.Mark()) + "user name '" + user +
                             "' must be non-empty and hold no ':'");
          continue;
        }
        if (!is_bcrypt(hash)) {
          r.errors.push_back(where(name, u.second.Mark()) + "the password of '" + user +
                             "' must be a bcrypt hash ($2a$, $2b$ or $2y$)");
          continue;
        }
        c.basic_auth_users[user] = hash;
      }
    } else {
      r.errors.push_back(where(name, kv.first.Mark()) + "unknown key '" + key +
                         "' (known: basic_auth_users, tls_server_config)");
    }
  }
  if (c.tls) {
    const std::string at = where(name, tls_mark);
    if (c.cert_file.empty() || c.key_file.empty())
      r.errors.push_back(at + "tls_server_config needs cert_file and key_file");
    for (const std::string* f : {&c.cert_file, &c.key_file, &c.client_ca_file})
      if (!f->empty() && ::access(f->c_str(), R_OK) != 0)
        r.errors.push_back(at + "cannot read " + *f);
    if (c.client_auth_type != "NoClientCert" && c.client_ca_file.empty())
      r.errors.push_back(at + "client_auth_type " + c.client_auth_type + " needs client_ca_file");
  }
  return r;
}

WebConfigResult load_web_config_file(const std::string& path) {
  std::optional<std::string> text = read_text_file(path);
  if (!text) {
    WebConfigResult r;
    r.errors.push_back(path + ": cannot read the web configuration file");
    return r;
  }
  return parse_web_config(*text, path);
}

}  // namespace gym::exporter
