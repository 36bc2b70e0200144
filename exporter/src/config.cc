#include "config.h"

#include <yaml-cpp/yaml.h>

#include "collector.h"
#include "yaml_reader.h"

#include <sys/stat.h>
#include <sys/un.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>

namespace gym::exporter {

bool Config::same_reader(const Config& o) const {
  return registry_dir == o.registry_dir && trusted_uids == o.trusted_uids &&
         retired_series_ttl_seconds == o.retired_series_ttl_seconds && max_series == o.max_series;
}

namespace {

void read_registry(YamlReader& rd, const YAML::Node& n, Config& c) {
  rd.mapping(n, "registry",
             {{"dir", [&](const YAML::Node& v) { rd.string(v, "registry.dir", c.registry_dir); }},
              {"retired_series_ttl_seconds",
               [&](const YAML::Node& v) {
                 rd.number(v, "registry.retired_series_ttl_seconds", c.retired_series_ttl_seconds,
                           1);
               }},
              {"max_series",
               [&](const YAML::Node& v) {
                 rd.integer(v, "registry.max_series", c.max_series, 1, 100000000);
               }},
              {"trusted_uids", [&](const YAML::Node& v) {
                 if (!v.IsSequence()) {
                   rd.error(v, "registry.trusted_uids must be a list of user ids");
                   return;
                 }
                 for (const auto& uid : v) {
                   int u = -1;
                   rd.integer(uid, "registry.trusted_uids[]", u, 0, 0x7fffffff);
                   if (u >= 0) c.trusted_uids.push_back(u);
                 }
               }}});
}

// One address, or a list of them.
void read_listen_addresses(YamlReader& rd, const YAML::Node& v, Config& c) {
  std::vector<std::string> out;
  if (v.IsSequence()) {
    for (const auto& item : v) {
      std::string a;
      if (rd.string(item, "web.listen_address[]", a)) out.push_back(a);
    }
  } else if (std::string a; rd.string(v, "web.listen_address", a)) {
    out.push_back(a);
  }
  if (out.empty())
    rd.error(v, "web.listen_address must be an address or a list of them");
  else
    c.listen_addresses = std::move(out);
}

void read_web(YamlReader& rd, const YAML::Node& n, Config& c) {
  rd.mapping(
      n, "web",
      {{"listen_address", [&](const YAML::Node& v) { read_listen_addresses(rd, v, c); }},
       {"unix_socket_mode",
        [&](const YAML::Node& v) {
          std::string mode;
          if (!rd.string(v, "web.unix_socket_mode", mode)) return;
          char* end = nullptr;
          const long m = std::strtol(mode.c_str(), &end, 8);
          if (mode.empty() || *end != '\0' || m < 0 || m > 0777)
            rd.error(v, "web.unix_socket_mode must be an octal mode such as \"0660\"");
          else
            c.unix_socket_mode = int(m);
        }},
       {"final_capture",
        [&](const YAML::Node& v) { rd.string(v, "web.final_capture", c.final_capture_dir); }},
       {"telemetry_path",
        [&](const YAML::Node& v) { rd.string(v, "web.telemetry_path", c.telemetry_path); }},
       {"max_connections",
        [&](const YAML::Node& v) {
          rd.integer(v, "web.max_connections", c.max_connections, 1, 4096);
        }},
       {"max_connections_per_peer", [&](const YAML::Node& v) {
          rd.integer(v, "web.max_connections_per_peer", c.max_connections_per_peer, 1, 4096);
        }}});
}

void read_service_discovery(YamlReader& rd, const YAML::Node& n, Config& c) {
  rd.mapping(
      n, "service_discovery",
      {{"file", [&](const YAML::Node& v) { rd.string(v, "service_discovery.file", c.sd.file); }},
       {"target",
        [&](const YAML::Node& v) { rd.string(v, "service_discovery.target", c.sd.target); }},
       {"labels", [&](const YAML::Node& v) {
          if (!v.IsMap()) {
            rd.error(v, "service_discovery.labels must map label names to values");
            return;
          }
          for (const auto& kv : v) {
            const std::string name = kv.first.Scalar();
            std::string value;
            if (!valid_sd_label(name) || name == "host") {
              rd.error(kv.first, "service_discovery.labels: '" + name +
                                     "' is not a label name a target may carry "
                                     "([a-zA-Z_][a-zA-Z0-9_]*, not __*, not host)");
              continue;
            }
            if (rd.string(kv.second, "service_discovery.labels." + name, value))
              c.sd.labels[name] = value;
          }
        }}});
}

void read_log(YamlReader& rd, const YAML::Node& n, Config& c) {
  rd.mapping(n, "log",
             {{"level", [&](const YAML::Node& v) { rd.string(v, "log.level", c.log_level); }},
              {"format", [&](const YAML::Node& v) { rd.string(v, "log.format", c.log_format); }}});
}

// Every top-level key: the exporter's own sections and each collector's.
ConfigResult parse_root(YamlReader& rd, const std::optional<YAML::Node>& root) {
  ConfigResult r;
  if (!root) return r;
  Config& c = r.config;
  std::map<std::string, YAML::Node> sections;
  YamlReader::Keys keys = {
      {"web", [&](const YAML::Node& n) { read_web(rd, n, c); }},
      {"registry", [&](const YAML::Node& n) { read_registry(rd, n, c); }},
      {"log", [&](const YAML::Node& n) { read_log(rd, n, c); }},
      {"service_discovery", [&](const YAML::Node& n) { read_service_discovery(rd, n, c); }}};
  for (const CollectorKind* kind : collector_kinds())
    if (kind->parse)
      keys[kind->name] = [&, kind](const YAML::Node& n) { sections[kind->name] = n; };
  YAML::Node servers;
  keys["servers"] = [&](const YAML::Node& n) { servers = n; };
  rd.mapping(*root, "", keys);
  // Before the collectors' sections: it takes its deprecated keys out of them.
  c.servers =
      read_servers_section(rd, servers, sections["memory"], sections["cgroup"], r.deprecations);
  for (const CollectorKind* kind : collector_kinds()) {
    if (!kind->parse) continue;
    const YAML::Node n = sections.count(kind->name) ? sections[kind->name] : YAML::Node();
    c.collectors[kind->name] = {kind->parse(rd, n), YAML::Dump(n)};
  }
  return r;
}

}  // namespace

std::string registry_dir_problem(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return {};
  if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0)
    return "registry directory " + dir +
           " is writable by anyone and has no sticky bit: any user could replace or remove "
           "segments. Remove the write permission (chmod o-w " +
           dir + ") or set the sticky bit (chmod +t " + dir + ")";
  return {};
}

void ConfigOverrides::apply(Config& c) const {
  if (!listen_addresses.empty()) c.listen_addresses = listen_addresses;
  if (systemd_socket) c.systemd_socket = true;
  if (final_capture_dir) c.final_capture_dir = *final_capture_dir;
  if (telemetry_path) c.telemetry_path = *telemetry_path;
  if (registry_dir) c.registry_dir = *registry_dir;
  if (log_level) c.log_level = *log_level;
  if (log_format) c.log_format = *log_format;
  if (sd_file) c.sd.file = *sd_file;
}

std::string listen_address_problem(const std::string& a) {
  if (a.starts_with("unix:")) {
    const std::string path = a.substr(5);
    if (path.empty() || path[0] != '/' || path.size() >= sizeof(sockaddr_un::sun_path))
      return "a Unix listen address must be unix:/absolute/path (under " +
             std::to_string(sizeof(sockaddr_un::sun_path)) + " bytes), got '" + a + "'";
    return {};
  }
  const auto colon = a.rfind(':');
  bool port_ok = colon != std::string::npos && colon + 1 < a.size();
  if (port_ok) {
    for (size_t i = colon + 1; i < a.size(); ++i)
      port_ok = port_ok && std::isdigit(static_cast<unsigned char>(a[i]));
    // At most five digits before converting: a longer number would throw.
    port_ok = port_ok && a.size() - colon - 1 <= 5 && std::stol(a.substr(colon + 1)) <= 65535;
  }
  if (!port_ok) return "listen address must be [host]:port or unix:/path, got '" + a + "'";
  return {};
}

std::vector<std::string> validate(const Config& c, const std::string& origin) {
  std::vector<std::string> errors;
  const std::string p = origin.empty() ? "" : origin + ": ";
  if (c.log_level != "debug" && c.log_level != "info" && c.log_level != "warn" &&
      c.log_level != "error")
    errors.push_back(p + "log level must be debug, info, warn or error, got '" + c.log_level + "'");
  if (c.log_format != "logfmt" && c.log_format != "json")
    errors.push_back(p + "log format must be logfmt or json, got '" + c.log_format + "'");
  if (c.telemetry_path.empty() || c.telemetry_path[0] != '/' || c.telemetry_path == "/")
    errors.push_back(p + "telemetry path must start with '/' and not be '/', got '" +
                     c.telemetry_path + "'");
  for (const std::string& a : c.listen_addresses)
    if (std::string why = listen_address_problem(a); !why.empty()) errors.push_back(p + why);
  if (c.registry_dir.empty()) errors.push_back(p + "registry directory must not be empty");
  if (!c.sd.file.empty() && !c.sd.file.ends_with(".json"))
    errors.push_back(p + "service discovery file must end in .json (Prometheus file_sd), got '" +
                     c.sd.file + "'");
  return errors;
}

namespace {
// `keys` set over the loaded root (a section's key made where missing), so
// that what overrides the file is parsed with it, once. A root or section
// that is not a mapping is left as it is: parsing says what is wrong with it.
void set_keys(std::optional<YAML::Node>& root, const KeyOverrides& keys) {
  if (!root || keys.empty()) return;
  if (root->IsNull()) *root = YAML::Node(YAML::NodeType::Map);
  if (!root->IsMap()) return;
  for (const auto& [section, key, value] : keys) {
    YAML::Node s = (*root)[section];  // a handle: setting its key sets the root's
    if (s.IsMap()) {
      s[key] = value;
    } else if (!s.IsDefined() || s.IsNull()) {
      YAML::Node made(YAML::NodeType::Map);
      made[key] = value;
      (*root)[section] = made;
    }
  }
}

ConfigResult parse_loaded(YamlReader& rd, std::optional<YAML::Node> root, const KeyOverrides& keys,
                          std::vector<std::string>& errors, const std::string& name) {
  set_keys(root, keys);
  ConfigResult r = parse_root(rd, root);
  if (errors.empty()) errors = validate(r.config, name);
  r.errors = std::move(errors);
  return r;
}
}  // namespace

ConfigResult parse_config(const std::string& yaml, const std::string& name,
                          const KeyOverrides& keys) {
  std::vector<std::string> errors;
  YamlReader rd(name, errors);
  return parse_loaded(rd, rd.load(yaml), keys, errors, name);
}

ConfigResult load_config_file(const std::string& path, const KeyOverrides& keys) {
  std::vector<std::string> errors;
  YamlReader rd(path, errors);
  return parse_loaded(rd, rd.load_file(path, "configuration file"), keys, errors, path);
}

}  // namespace gym::exporter
