#include "flags.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

namespace gym::exporter {

namespace {

struct FlagSpec {
  std::string_view name;   // without the leading "--"
  std::string_view value;  // the value's name in the usage; empty: a switch
  std::string help;
  // Where the value (or true, for a switch) goes.
  std::optional<std::string> ConfigOverrides::*override_field = nullptr;
  std::string Flags::*string_field = nullptr;
  bool Flags::*switch_field = nullptr;
  // A repeatable flag: each value appended.
  std::vector<std::string> ConfigOverrides::*list_field = nullptr;
  bool ConfigOverrides::*override_switch = nullptr;
};

const std::vector<FlagSpec>& table() {
  static const std::vector<FlagSpec> flags = {
      {"web.listen-address", "ADDR",
       "address to listen on: [host]:port or unix:/path; repeat for more (default \":9478\")",
       nullptr, nullptr, nullptr, &ConfigOverrides::listen_addresses},
      {"web.systemd-socket", "",
       "listen on the sockets systemd passed (socket activation) instead of the addresses", nullptr,
       nullptr, nullptr, nullptr, &ConfigOverrides::systemd_socket},
      {"web.final-capture", "DIR",
       "at a clean stop, write the last exposition and snapshot into DIR",
       &ConfigOverrides::final_capture_dir},
      {"web.telemetry-path", "PATH", "path under which to expose metrics (default \"/metrics\")",
       &ConfigOverrides::telemetry_path},
      {"config.file", "FILE", "YAML configuration (see config/gym-exporter.yml)", nullptr,
       &Flags::config_file},
      {"web.config.file", "FILE", "TLS and basic auth, in exporter-toolkit's format", nullptr,
       &Flags::web_config_file},
      {"registry.dir", "DIR",
       std::string("registry directory (default \"") + kDefaultRegistryDir + "\")",
       &ConfigOverrides::registry_dir},
      {"web.sd-file", "FILE",
       "write this exporter's Prometheus file_sd entry (FILE.json) while it runs",
       &ConfigOverrides::sd_file},
      {"log.level", "LEVEL", "debug, info, warn or error (default \"info\")",
       &ConfigOverrides::log_level},
      {"log.format", "FORMAT", "logfmt or json (default \"logfmt\")", &ConfigOverrides::log_format},
      {"check-config", "", "validate the configuration and exit (0 valid)", nullptr, nullptr,
       &Flags::check_config},
      {"once", "", "print one exposition to standard output and exit", nullptr, nullptr,
       &Flags::once},
      {"version", "", "print the version and exit", nullptr, nullptr, &Flags::version},
      {"help", "", "print this help and exit", nullptr, nullptr, &Flags::help},
  };
  return flags;
}

const FlagSpec* find(std::string_view name) {
  for (const FlagSpec& f : table())
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace

std::string usage() {
  std::string out =
      "usage: gym-exporter [flags]\n\nServes the NeMo Gym metrics registry of this host to "
      "Prometheus.\n\nFlags:\n";
  for (const FlagSpec& f : table()) {
    std::string left = "  --";  // (appended: GCC 12 warns falsely on "literal" + string)
    left += f.name;
    if (!f.value.empty()) {
      left += '=';
      left += f.value;
    }
    left.resize(std::max<size_t>(left.size() + 1, 30), ' ');
    out += left + f.help + "\n";
  }
  out += "\nFlags override the configuration file, also after a reload (SIGHUP).\n";
  return out;
}

bool parse_flags(int argc, char** argv, Flags& flags, std::string& error) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "-h") arg = "--help";
    if (!arg.starts_with("--")) {
      error = "unexpected argument " + std::string(arg) + " (see --help)";
      return false;
    }
    const size_t eq = arg.find('=');
    const std::string_view name = arg.substr(2, eq == std::string_view::npos ? arg.npos : eq - 2);
    const FlagSpec* f = find(name);
    if (f == nullptr) {
      error = "unknown flag --" + std::string(name) + " (see --help)";
      return false;
    }
    if (f->switch_field || f->override_switch) {
      if (eq != std::string_view::npos) {
        error = "flag --" + std::string(name) + " takes no value";
        return false;
      }
      if (f->switch_field) flags.*(f->switch_field) = true;
      if (f->override_switch) flags.overrides.*(f->override_switch) = true;
      continue;
    }
    std::string value;
    if (eq != std::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      error = "flag --" + std::string(name) + " needs a value";
      return false;
    }
    if (f->override_field) flags.overrides.*(f->override_field) = value;
    if (f->list_field) (flags.overrides.*(f->list_field)).push_back(value);
    if (f->string_field) flags.*(f->string_field) = value;
  }
  return true;
}

}  // namespace gym::exporter
