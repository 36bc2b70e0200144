// The `servers:` section: what a server is on this host, read and validated
// once, for the one watcher (watcher.h) that every per-server collector,
// /api/v1/snapshot and gym-stat read.
//
//   servers:
//     interval_seconds: 5          # how often info, up and exits are sampled
//     proc_root: /proc             # where procfs is
//     gone_server_ttl_seconds: 300 # a gone declared server reports up 0 this long
//     cgroup_v2_mount: ""          # cgroup mounts; empty: as mountinfo says
//     cgroup_v1_memory_mount: ""
//     cgroup_v1_cpu_mount: ""
//     targets: []                  # configured servers (targets.h)
//
// Until the next release `memory.targets`, `memory.proc_root`,
// `memory.gone_server_ttl_seconds`, `cgroup.v2_mount` and
// `cgroup.v1_memory_mount` are still read into it, with a deprecation
// warning; set in both places, they are an error.
//
// Thread-safety: plain values and a pure parse.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "host/cgroup.h"
#include "servers/targets.h"

namespace gym::exporter {

class YamlReader;

struct ServersConfig {
  double interval_seconds = 5;
  std::string proc_root = "/proc";
  std::vector<ServerTarget> targets;
  double gone_server_ttl_seconds = 300;
  std::optional<cgroup::Mounts> mounts;  // nullopt: as mountinfo says
  bool operator==(const ServersConfig&) const = default;
};

// Reads the `servers:` section (a null node: the defaults) and the
// deprecated keys of the `memory:` and `cgroup:` sections, which it removes
// from those nodes (they are no longer those collectors' keys). Each
// deprecated key read adds a line to `deprecations`.
ServersConfig read_servers_section(YamlReader& rd, const YAML::Node& servers, YAML::Node& memory,
                                   YAML::Node& cgroup, std::vector<std::string>& deprecations);

}  // namespace gym::exporter
