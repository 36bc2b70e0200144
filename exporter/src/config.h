// The exporter's configuration: YAML (config/gym-exporter.yml documents every
// key), with command-line flags overriding the file.
//
// Thread-safety: plain values; the exporter swaps whole Configs under a lock.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gym/contract.h"
#include "sd_file.h"
#include "servers/config.h"

namespace gym::exporter {

class CollectorSettings;

// A collector's configuration section, read by the collector (collector.h).
struct CollectorSection {
  std::shared_ptr<const CollectorSettings> settings;
  std::string yaml;  // the section as written, to tell whether a reload changed it
  bool operator==(const CollectorSection& o) const { return yaml == o.yaml; }
};

struct Config {
  // "[host]:port" or "unix:/path", each listened on (http/listeners.h).
  std::vector<std::string> listen_addresses{":9478"};
  bool systemd_socket = false;  // listen on the sockets systemd passed instead
  int unix_socket_mode = 0660;  // of the Unix sockets it makes
  std::string telemetry_path = "/metrics";
  // Where a clean stop writes the last exposition and snapshot (empty: no
  // final capture; final_capture.h).
  std::string final_capture_dir;
  std::string registry_dir = kDefaultRegistryDir;
  std::string log_level = "info";     // debug, info, warn, error
  std::string log_format = "logfmt";  // logfmt, json
  int max_connections = 1024;         // HTTP connections open at once
  int max_connections_per_peer = 0;   // of one peer address; 0: a quarter of those
  // Users whose segments are read; empty: the registry directory's owner and
  // the exporter's own user.
  std::vector<int> trusted_uids;
  // A series with no live writer that has not changed for this long is
  // forgotten; at most max_series series are tracked (the rest are counted).
  double retired_series_ttl_seconds = 3600;
  int max_series = 100000;
  // Prometheus file_sd entry of this exporter (sd_file.h).
  SdConfig sd;
  // What a server is (the servers: section).
  ServersConfig servers;
  // Every collector kind that has a section, by name (defaults when the file
  // has none).
  std::map<std::string, CollectorSection> collectors;
  // What a registry reader needs (a change needs a new reader).
  bool same_reader(const Config& o) const;
};

// What the kind of collector `name` read from its section: its settings
// type S (collector.h), or S's defaults when the configuration has none.
template <class S>
S collector_settings(const Config& c, const std::string& name) {
  const auto it = c.collectors.find(name);
  if (it == c.collectors.end()) return S{};
  const auto* s = dynamic_cast<const S*>(it->second.settings.get());
  return s != nullptr ? *s : S{};
}

// Why the registry directory may not be used (anyone may write to it and it
// has no sticky bit), or empty. A missing directory is fine: writers make it.
std::string registry_dir_problem(const std::string& dir);

// Values given on the command line: they win over the file, also on reload.
struct ConfigOverrides {
  std::vector<std::string> listen_addresses;  // --web.listen-address, repeatable; empty: none
  bool systemd_socket = false;
  std::optional<std::string> final_capture_dir;
  std::optional<std::string> telemetry_path;
  std::optional<std::string> registry_dir;
  std::optional<std::string> log_level;
  std::optional<std::string> log_format;
  std::optional<std::string> sd_file;
  void apply(Config& c) const;
};

struct ConfigResult {
  Config config;
  // Each error names the file, line and column: "gym-exporter.yml:3:5: ...".
  std::vector<std::string> errors;
  // Deprecated keys it used, each a line to log ("file:line:column: ...").
  std::vector<std::string> deprecations;
  bool ok() const { return errors.empty(); }
};

// Keys of a section set over what a file says, before it is parsed (a
// command line's values for keys that no ConfigOverrides field has):
// {section, key, value}.
struct KeyOverride {
  std::string section, key, value;
};
using KeyOverrides = std::vector<KeyOverride>;

// Reads `path` (defaults for what it does not set), with `keys` set over it.
// An unknown key, a wrong type or a bad value is an error. Sections other
// than web, registry and log are the collectors' (memory, ...): each
// collector reads its own.
ConfigResult load_config_file(const std::string& path, const KeyOverrides& keys = {});
// The same from YAML text; `name` stands for the file in messages.
ConfigResult parse_config(const std::string& yaml, const std::string& name,
                          const KeyOverrides& keys = {});
// Why a listen address is not "[host]:port" or "unix:/path", or empty.
std::string listen_address_problem(const std::string& address);
// Checks values that flags may also set (log level and format, path, address).
std::vector<std::string> validate(const Config& c, const std::string& origin);

}  // namespace gym::exporter
