#include "config.h"

#include <yaml-cpp/yaml.h>

#include "yaml_support.h"

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>

namespace gym::exporter {

namespace {

struct Reader {
  const std::string& name;
  std::vector<std::string>& errors;

  bool string(const YAML::Node& n, const std::string& key, std::string& out) {
    if (!n.IsScalar()) {
      errors.push_back(where(name, n.Mark()) + key + " must be a string");
      return false;
    }
    out = n.Scalar();
    return true;
  }
  void integer(const YAML::Node& n, const std::string& key, int& out, int min, int max) {
    int v = 0;
    if (!n.IsScalar() || !YAML::convert<int>::decode(n, v)) {
      errors.push_back(where(name, n.Mark()) + key + " must be an integer");
      return;
    }
    if (v < min || v > max) {
      errors.push_back(where(name, n.Mark()) + key + " must be between " + std::to_string(min) +
                       " and " + std::to_string(max) + ", got " + std::to_string(v));
      return;
    }
    out = v;
  }
  void number(const YAML::Node& n, const std::string& key, double& out, double min) {
    double v = 0;
    if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v)) {
      errors.push_back(where(name, n.Mark()) + key + " must be a number");
      return;
    }
    if (v < min) {
      errors.push_back(where(name, n.Mark()) + key + " must be at least " + fmt_number(min));
      return;
    }
    out = v;
  }
  void boolean(const YAML::Node& n, const std::string& key, bool& out) {
    bool v = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
      errors.push_back(where(name, n.Mark()) + key + " must be true or false");
      return;
    }
    out = v;
  }
  static std::string fmt_number(double v) {
    std::ostringstream os;
    os << v;
    return os.str();
  }
  // Calls the handler of each key; an unknown key is an error.
  void mapping(const YAML::Node& n, const std::string& section,
               const std::map<std::string, std::function<void(const YAML::Node&)>>& keys) {
    if (n.IsNull()) return;
    if (!n.IsMap()) {
      errors.push_back(where(name, n.Mark()) + (section.empty() ? "the file" : section) +
                       " must be a mapping");
      return;
    }
    for (const auto& kv : n) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
      auto it = keys.find(key);
      if (it == keys.end()) {
        std::string known;
        for (const auto& [k, _] : keys) known += (known.empty() ? "" : ", ") + k;
        errors.push_back(where(name, kv.first.Mark()) + "unknown key '" +
                         (section.empty() ? "" : section + ".") + key + "' (known: " + known + ")");
        continue;
      }
      it->second(kv.second);
    }
  }
};

void read_targets(Reader& rd, const YAML::Node& n, std::vector<MemoryTarget>& out) {
  if (n.IsNull()) return;
  if (!n.IsSequence()) {
    rd.errors.push_back(where(rd.name, n.Mark()) + "memory.targets must be a list");
    return;
  }
  std::map<std::string, YAML::Mark> seen;
  for (const auto& item : n) {
    MemoryTarget t;
    int selectors = 0;
    bool has_name = false;
    bool has_type = false;
    rd.mapping(
        item, "memory.targets[]",
        {{"name", [&](const YAML::Node& v) { has_name = rd.string(v, "name", t.name); }},
         {"server_type",
          [&](const YAML::Node& v) { has_type = rd.string(v, "server_type", t.server_type); }},
         {"pid",
          [&](const YAML::Node& v) {
            ++selectors;
            int pid = 0;
            rd.integer(v, "pid", pid, 1, 1 << 30);
            t.pid = pid;
          }},
         {"pidfile",
          [&](const YAML::Node& v) {
            ++selectors;
            rd.string(v, "pidfile", t.pidfile);
          }},
         {"match",
          [&](const YAML::Node& v) {
            ++selectors;
            int kinds = 0;
            rd.mapping(v, "match",
                       {{"comm",
                         [&](const YAML::Node& c) {
                           ++kinds;
                           rd.string(c, "match.comm", t.match_comm);
                         }},
                        {"cmdline", [&](const YAML::Node& c) {
                           ++kinds;
                           if (!rd.string(c, "match.cmdline", t.match_cmdline)) return;
                           try {
                             std::regex re(t.match_cmdline);
                           } catch (const std::regex_error& e) {
                             rd.errors.push_back(where(rd.name, c.Mark()) +
                                                 "match.cmdline is not a valid regular "
                                                 "expression: " +
                                                 e.what());
                           }
                         }}});
            if (kinds != 1)
              rd.errors.push_back(where(rd.name, v.Mark()) +
                                  "match needs exactly one of comm and cmdline");
          }},
         {"pss", [&](const YAML::Node& v) { rd.boolean(v, "pss", t.pss); }}});
    if (!item.IsMap()) continue;
    const std::string at = where(rd.name, item.Mark());
    if (!has_name || t.name.empty() || t.name.size() > 128)
      rd.errors.push_back(at + "a memory target needs a name of 1 to 128 characters");
    if (!has_type || t.server_type.empty() || t.server_type.size() > 128)
      rd.errors.push_back(at + "memory target '" + t.name +
                          "' needs a server_type of 1 to 128 characters");
    if (selectors != 1)
      rd.errors.push_back(at + "memory target '" + t.name +
                          "' needs exactly one of pid, pidfile and match");
    if (has_name) {
      auto [it, fresh] = seen.emplace(t.name, item.Mark());
      if (!fresh)
        rd.errors.push_back(at + "memory target name '" + t.name + "' is used twice (also at " +
                            std::to_string(it->second.line + 1) + ":" +
                            std::to_string(it->second.column + 1) + ")");
    }
    out.push_back(std::move(t));
  }
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
  if (listen_address) c.listen_address = *listen_address;
  if (telemetry_path) c.telemetry_path = *telemetry_path;
  if (registry_dir) c.registry_dir = *registry_dir;
  if (log_level) c.log_level = *log_level;
  if (log_format) c.log_format = *log_format;
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
  const auto colon = c.listen_address.rfind(':');
  bool port_ok = colon != std::string::npos && colon + 1 < c.listen_address.size();
  if (port_ok) {
    for (size_t i = colon + 1; i < c.listen_address.size(); ++i)
      port_ok = port_ok && std::isdigit(static_cast<unsigned char>(c.listen_address[i]));
    // At most five digits before converting: a longer number would throw.
    port_ok = port_ok && c.listen_address.size() - colon - 1 <= 5 &&
              std::stol(c.listen_address.substr(colon + 1)) <= 65535;
  }
  if (!port_ok)
    errors.push_back(p + "listen address must be [host]:port, got '" + c.listen_address + "'");
  if (c.registry_dir.empty()) errors.push_back(p + "registry directory must not be empty");
  return errors;
}

ConfigResult parse_config(const std::string& yaml, const std::string& name) {
  ConfigResult r;
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    r.errors.push_back(where(name, e.mark) + "invalid YAML: " + e.msg);
    return r;
  }
  Config& c = r.config;
  Reader rd{name, r.errors};
  rd.mapping(
      root, "",
      {{"web",
        [&](const YAML::Node& n) {
          rd.mapping(
              n, "web",
              {{"listen_address",
                [&](const YAML::Node& v) { rd.string(v, "web.listen_address", c.listen_address); }},
               {"telemetry_path",
                [&](const YAML::Node& v) { rd.string(v, "web.telemetry_path", c.telemetry_path); }},
               {"max_connections", [&](const YAML::Node& v) {
                  rd.integer(v, "web.max_connections", c.max_connections, 1, 256);
                }}});
        }},
       {"registry",
        [&](const YAML::Node& n) {
          rd.mapping(
              n, "registry",
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
                    rd.errors.push_back(where(rd.name, v.Mark()) +
                                        "registry.trusted_uids must be a list of user ids");
                    return;
                  }
                  for (const auto& uid : v) {
                    int u = -1;
                    rd.integer(uid, "registry.trusted_uids[]", u, 0, 0x7fffffff);
                    if (u >= 0) c.trusted_uids.push_back(u);
                  }
                }}});
        }},
       {"memory",
        [&](const YAML::Node& n) {
          rd.mapping(
              n, "memory",
              {{"interval_seconds",
                [&](const YAML::Node& v) {
                  rd.number(v, "memory.interval_seconds", c.memory.interval_seconds, 0.01);
                }},
               {"pss_interval_seconds",
                [&](const YAML::Node& v) {
                  rd.number(v, "memory.pss_interval_seconds", c.memory.pss_interval_seconds, 0);
                }},
               {"proc_root",
                [&](const YAML::Node& v) { rd.string(v, "memory.proc_root", c.memory.proc_root); }},
               {"targets", [&](const YAML::Node& v) { read_targets(rd, v, c.memory.targets); }}});
        }},
       {"log", [&](const YAML::Node& n) {
          rd.mapping(
              n, "log",
              {{"level", [&](const YAML::Node& v) { rd.string(v, "log.level", c.log_level); }},
               {"format", [&](const YAML::Node& v) { rd.string(v, "log.format", c.log_format); }}});
        }}});
  if (r.errors.empty()) {
    for (auto& e : validate(c, name)) r.errors.push_back(std::move(e));
  }
  return r;
}

ConfigResult load_config_file(const std::string& path) {
  std::optional<std::string> text = read_text_file(path);
  if (!text) {
    ConfigResult r;
    r.errors.push_back(path + ": cannot read the configuration file");
    return r;
  }
  return parse_config(*text, path);
}

}  // namespace gym::exporter
