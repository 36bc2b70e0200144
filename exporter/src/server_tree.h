// Server trees: which process is the root of each Gym server's tree now, for
// every per-server collector (memory, cpu, cgroup). Servers are the
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

#include <chrono>
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
  // Reads what names the roots (pidfiles, the registry's declarations) for
  // the next resolve(), and returns the pids of those roots: a table walked
  // from them (ProcessTable::walk) has every root. nullopt when a match
  // target needs every process (a scan). resolve() prepares itself when
  // this was not called since the last resolve().
  std::optional<std::vector<pid_t>> prepare();
  // Every server, configured ones first, with its root in `table`.
  std::vector<Server> resolve(const procfs::ProcessTable& table);

 private:
  struct Target {
    ServerTarget config;
    std::optional<std::regex> cmdline;
    pid_t root_pid = 0;                  // pid and pidfile targets: the pid,
    std::optional<uint64_t> root_start;  // and the start of the process first seen
    double pidfile_written = 0;          // the pidfile's mtime then
    pid_t pidfile_pid = 0;               // as prepare() read it (0: none)
    double pidfile_mtime = 0;
  };
  void read_pidfile(Target& t);
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
  bool prepared_ = false;
  std::vector<DeclaredServer> declared_;  // as prepare() read them, oldest first
  std::shared_ptr<SharedRegistry> registry_;
  std::function<void(const std::string&, const std::string&)> error_;
};

// Every server's processes at one sample, for a per-server collector (memory,
// CPU): the servers of ServerTrees, each with its tree, the members that
// left it kept by lineage, and the declared servers that are gone, reported
// with no root for `gone_ttl`, then dropped.
//
// Lineage: when a middle process of a tree exits, the kernel hands its
// children to init or to the nearest subreaper, so they leave the tree. A
// member seen at the last sample (pid and start time) stays the server's,
// with its descendants, while the server's root lives. One that is born and
// orphaned between two samples was never seen.
//
// Thread-safety: one ServerProcesses belongs to one sampling thread.
class ServerProcesses {
 public:
  ServerProcesses(std::vector<ServerTarget> targets, std::shared_ptr<SharedRegistry> registry,
                  std::chrono::duration<double> gone_ttl,
                  std::function<void(const std::string&, const std::string&)> error);

  struct Tree {
    std::string name;
    std::string server_type;
    bool pss = true;
    bool configured = false;
    const procfs::ProcStat* root = nullptr;  // in the table; nullptr: gone
    procfs::TreeUsage usage;                 // its live processes (none when gone)
    uint64_t escaped = 0;                    // of those, the ones kept by lineage
  };
  // The pids a walk must start from for the next sample: the roots and the
  // members of the last sample (see ServerTrees::prepare).
  std::optional<std::vector<pid_t>> prepare();
  // Every server of `table` (scanned, or walked from prepare()'s pids) at
  // `now`, configured ones first.
  std::vector<Tree> sample(const procfs::ProcessTable& table,
                           std::chrono::steady_clock::time_point now);
  // The declared servers the last sample dropped (gone past their TTL).
  const std::vector<std::string>& dropped() const { return dropped_; }

 private:
  using Member = std::pair<pid_t, uint64_t>;  // pid, start ticks
  struct Declared {
    std::string server_type;
    std::optional<std::chrono::steady_clock::time_point> gone_since;
  };
  ServerTrees trees_;
  std::chrono::duration<double> gone_ttl_;
  std::map<std::string, std::vector<Member>> lineage_;  // last members, sorted
  std::map<std::string, Declared> declared_;
  std::vector<std::string> dropped_;
};

}  // namespace gym::exporter
