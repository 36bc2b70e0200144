// Server trees: which process is the root of each Gym server's tree now, for
// every per-server collector (memory; later CPU, cgroups). Servers are the
// configured targets (memory.targets) plus every live process that declared a
// server identity through the library (found in the registry); a configured
// name wins over a declared one.
//
// A pid target names the process first seen with that pid: a younger process
// that reuses the pid is not the server. A pidfile names, while it holds the
// same pid, the process first seen behind it, and never one that started
// after the pidfile was last written (a stale pidfile whose pid was reused).
// Pidfiles and matches are resolved again at every resolve(), so a restarted
// server is followed.
//
// Thread-safety: one ServerTrees belongs to one sampling thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "procfs.h"
#include "shared_registry.h"

namespace gym::exporter {

class YamlReader;

// One configured server. Exactly one of pid, pidfile and match says which
// process is the root.
struct ServerTarget {
  std::string name;
  std::string server_type;
  std::optional<int> pid;
  std::string pidfile;
  std::string match_comm;     // the process name (/proc/<pid>/comm), exactly
  std::string match_cmdline;  // an ECMAScript regex searched in the command line
  bool pss = true;            // read PSS (smaps_rollup) for this tree
  bool operator==(const ServerTarget&) const = default;
};

// Reads a list of targets (a `targets:` section); `section` names it in
// messages.
std::vector<ServerTarget> read_server_targets(YamlReader& rd, const YAML::Node& n,
                                              const std::string& section);

class ServerTrees {
 public:
  // `registry` may be null (then only configured targets). `error(reason,
  // detail)` receives each failed read (reason "pidfile").
  ServerTrees(std::vector<ServerTarget> targets, std::shared_ptr<SharedRegistry> registry,
              std::function<void(const std::string&, const std::string&)> error);

  struct Server {
    std::string name;
    std::string server_type;
    bool pss = true;                         // whether PSS is wanted
    bool configured = false;                 // a target of the configuration
    const procfs::ProcStat* root = nullptr;  // in the table; nullptr: gone
  };
  // Every server, configured ones first, with its root in `table`.
  std::vector<Server> resolve(const procfs::ProcessTable& table);

 private:
  struct Target {
    ServerTarget config;
    std::optional<std::regex> cmdline;
    pid_t root_pid = 0;                  // pid and pidfile targets: the pid,
    std::optional<uint64_t> root_start;  // and the start of the process first seen
    double pidfile_written = 0;          // the pidfile's mtime then
  };
  const procfs::ProcStat* find_root(Target& t, const procfs::ProcessTable& table);
  const procfs::ProcStat* from_pidfile(Target& t, const procfs::ProcessTable& table);
  // The process `pid` if it is the one first seen with that pid for `t`.
  static const procfs::ProcStat* first_seen(Target& t, pid_t pid,
                                            const procfs::ProcessTable& table);
  // Seconds since the epoch at which `p` started (nullopt: boot time unknown).
  std::optional<double> started_at(const procfs::ProcStat& p, const procfs::ProcessTable& table);

  std::optional<uint64_t> boot_time_;  // btime of the proc root, read once
  static const procfs::ProcStat* from_match(const Target& t, const procfs::ProcessTable& table);

  std::vector<Target> targets_;
  std::shared_ptr<SharedRegistry> registry_;
  std::function<void(const std::string&, const std::string&)> error_;
};

}  // namespace gym::exporter
