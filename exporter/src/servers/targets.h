// Configured servers: a target names a server and says which processes are
// its roots (a pid, a pidfile, the oldest process a match finds or every one,
// and the processes of cgroups), as the `servers.targets` section writes it.
//
// Thread-safety: plain values and a pure parse.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace gym::exporter {

class YamlReader;

// One configured server: at least one of pid, pidfile, match and cgroups
// (and at most one of the first three) says which processes are its roots.
struct ServerTarget {
  std::string name;
  std::string server_type;
  std::optional<int> pid;
  std::string pidfile;
  std::string match_comm;     // the process name (/proc/<pid>/comm), exactly
  std::string match_cmdline;  // an ECMAScript regex searched in the command line
  bool match_all = false;     // every matching process is a root, not the oldest
  // cgroup paths or glob patterns under the cgroup mount (v2, else the v1
  // memory hierarchy): their processes are roots.
  std::vector<std::string> cgroups;
  // At most this many roots from match (with all) and cgroups; beyond, the
  // oldest are kept and the overflow is logged once and counted.
  int max_roots = 64;
  // PSS (smaps_rollup) for this tree: empty, within the stall budget
  // (collectors/pss_budget.h); true, at every due sample; false, never.
  std::optional<bool> pss;
  bool operator==(const ServerTarget&) const = default;
};

// Reads a list of targets (a `targets:` section); `section` names it in
// messages.
std::vector<ServerTarget> read_server_targets(YamlReader& rd, const YAML::Node& n,
                                              const std::string& section);

}  // namespace gym::exporter
