// Server trees: which processes are each Gym server, for every per-server
// collector (memory, cpu, cgroup). A server is the union of its roots and
// everything beneath each, every process counted once:
//   - every live process that declared the server's name through the library
//     (found in the registry; in another pid namespace, found through
//     pid_namespaces.h), and
//   - what its configured target (memory.targets) names: a pid, a pidfile, the
//     oldest process a match finds (or, with `all`, every one: Ray actors), and
//     the processes of the cgroups it names (a sandbox's container).
// A configured target and declarers of the same name are one server; the
// configuration's server_type wins.
//
// A pid target names the process first seen with that pid: a younger process
// that reuses the pid is not the server. A pidfile names, while it holds the
// same pid, the process first seen behind it, and never one that started
// after the pidfile was last written (a stale pidfile whose pid was reused).
// Pidfiles, matches and cgroups are resolved again at every resolve(), so a
// restarted server is followed. A zombie or exiting process is no root.
//
// Thread-safety: one ServerTrees belongs to one sampling thread; the
// ServerWatcher is shared by the collectors.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "cgroup.h"
#include "collector.h"
#include "pid_namespaces.h"
#include "procfs.h"
#include "shared_registry.h"

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
  bool pss = true;  // read PSS (smaps_rollup) for this tree
  bool operator==(const ServerTarget&) const = default;
};

// Reads a list of targets (a `targets:` section); `section` names it in
// messages.
std::vector<ServerTarget> read_server_targets(YamlReader& rd, const YAML::Node& n,
                                              const std::string& section);

// What the watcher resolves: the memory section's servers, the cgroup
// mounts (cgroup section), and where processes are.
struct WatcherConfig {
  std::string proc_root = "/proc";
  std::vector<ServerTarget> targets;
  double gone_server_ttl_seconds = 300;
  std::optional<cgroup::Mounts> mounts;  // nullopt: as mountinfo says
};

using ErrorFn = std::function<void(const std::string&, const std::string&)>;

class ServerTrees {
 public:
  // `registry` may be null (then only configured targets). `error(reason,
  // detail)` receives each failed read (reason "pidfile", "cgroup") and each
  // adoption rule over its bound (reason "adoption").
  ServerTrees(WatcherConfig config, std::shared_ptr<SharedRegistry> registry, ErrorFn error);
  ~ServerTrees();

  struct Server {
    std::string name;
    std::string server_type;
    bool pss = true;                             // whether PSS is wanted
    bool configured = false;                     // a target of the configuration
    std::vector<const procfs::ProcStat*> roots;  // in the table, oldest first; none: gone
    bool unseen = false;  // no root, and a declarer lives where we cannot see it
  };
  // Reads what names the roots (pidfiles, the registry's declarations,
  // cgroups) for the next resolve(), and returns the pids of those roots: a
  // table walked from them (ProcessTable::walk) has every root. nullopt when
  // a match target needs every process (a scan). resolve() prepares itself
  // when this was not called since the last resolve(). The declarations may
  // come from a registry snapshot up to `declared_age` old.
  std::optional<std::vector<pid_t>> prepare(
      std::chrono::nanoseconds declared_age = std::chrono::nanoseconds::zero());
  // Every server, configured ones first, with its roots in `table`.
  std::vector<Server> resolve(const procfs::ProcessTable& table);
  // Declarers that live in a pid namespace this proc root cannot see, as of
  // the last prepare().
  uint64_t unseen_declarers() const { return unseen_; }
  // Scans of the proc root made to find writers of other pid namespaces.
  uint64_t namespace_scans() const;

 private:
  struct Target;
  struct Declarer {
    DeclaredServer d;
    std::optional<pid_t> host_pid;  // nullopt: not visible from here
  };
  void read_pidfile(Target& t);
  void read_cgroups(Target& t);
  std::vector<const procfs::ProcStat*> find_roots(Target& t, const procfs::ProcessTable& table);
  const procfs::ProcStat* from_pidfile(Target& t, const procfs::ProcessTable& table);
  std::vector<const procfs::ProcStat*> from_match(Target& t, const procfs::ProcessTable& table);
  // The process `pid` if it is the one first seen with that pid for `t`.
  static const procfs::ProcStat* first_seen(Target& t, pid_t pid,
                                            const procfs::ProcessTable& table);
  // Keeps the oldest max_roots of `roots`, counting an overflow.
  void bound(Target& t, std::vector<const procfs::ProcStat*>& roots, const char* rule);
  // Seconds since the epoch at which `p` started (nullopt: boot time unknown).
  std::optional<double> started_at(const procfs::ProcStat& p, const procfs::ProcessTable& table);

  WatcherConfig config_;
  std::optional<uint64_t> boot_time_;  // btime of the proc root, read once
  std::vector<Target> targets_;
  bool prepared_ = false;
  std::vector<Declarer> declared_;  // as prepare() read them
  uint64_t unseen_ = 0;
  std::set<std::string> unseen_logged_;
  std::shared_ptr<SharedRegistry> registry_;
  std::unique_ptr<PidNamespaces> namespaces_;
  cgroup::Mounts mounts_;  // where the cgroup targets' globs are looked up
  bool mounts_read_ = false;
  ErrorFn error_;
};

// Every server's processes at one sample, for a per-server collector (memory,
// CPU): the servers of ServerTrees, each with its trees, the members that
// left them kept by lineage, and the declared servers that are gone, reported
// with no root for `gone_ttl`, then dropped.
//
// Lineage: when a middle process of a tree exits, the kernel hands its
// children to init or to the nearest subreaper, so they leave the tree. A
// member seen at the last sample (pid and start time) stays the server's,
// with its descendants, while the root whose tree it was in lives (lineage
// belongs to a root, not to a name: a new root starts without it). One that
// is born and orphaned between two samples was never seen.
//
// Thread-safety: one ServerProcesses belongs to one sampling thread.
class ServerProcesses {
 public:
  ServerProcesses(WatcherConfig config, std::shared_ptr<SharedRegistry> registry, ErrorFn error);

  struct Tree {
    std::string name;
    std::string server_type;
    bool pss = true;
    bool configured = false;
    // Its roots that are in no other root's tree (a declarer's forked
    // verifier is in its parent's), oldest first; empty: gone.
    std::vector<const procfs::ProcStat*> roots;
    const procfs::ProcStat* root = nullptr;  // the oldest of roots; nullptr: gone
    procfs::TreeUsage usage;                 // its live processes, each once
    uint64_t escaped = 0;                    // of those, the ones kept by lineage
  };
  // The pids a walk must start from for the next sample: the roots and the
  // members of the last sample (see ServerTrees::prepare).
  std::optional<std::vector<pid_t>> prepare(
      std::chrono::nanoseconds declared_age = std::chrono::nanoseconds::zero());
  // Every server of `table` (scanned, or walked from prepare()'s pids) at
  // `now`, configured ones first. Servers whose every declarer is out of
  // sight are left out.
  std::vector<Tree> sample(const procfs::ProcessTable& table,
                           std::chrono::steady_clock::time_point now);
  const ServerTrees& trees() const { return trees_; }

 private:
  using Member = std::pair<pid_t, uint64_t>;  // pid, start ticks
  struct Declared {
    std::string server_type;
    std::optional<std::chrono::steady_clock::time_point> gone_since;
  };
  ServerTrees trees_;
  std::chrono::duration<double> gone_ttl_;
  std::map<Member, std::vector<Member>> lineage_;  // by root: its last members, sorted
  std::map<std::string, Declared> declared_;
};

// What every per-server collector reads: the servers and their processes at
// one moment, resolved once for all of them.
struct ServersView {
  explicit ServersView(std::string proc_root) : table(std::move(proc_root)) {}
  procfs::ProcessTable table;                // every member, with every stat field
  std::vector<ServerProcesses::Tree> trees;  // pointers into `table`
  // False: the proc root could not be read at all; then `trees` is empty and
  // no per-process series is served.
  bool proc_ok = true;
  uint64_t unseen_declarers = 0;  // ServerTrees::unseen_declarers
  // The failed reads of this resolution (reason, detail), for the memory
  // collector to count and log.
  std::vector<std::pair<std::string, std::string>> errors;
  std::chrono::steady_clock::time_point taken;
};

// The one component that says which processes are which server. Every
// per-server collector asks it for a view; it resolves again unless the last
// view is recent (within the caller's max_age) and not the one the caller
// already has, so collectors that sample together share one resolution
// (one walk of the trees, one read of the registry) and no collector is
// handed the same view twice.
//
// Its failed reads go into each view (ServersView::errors): the memory
// collector counts and logs them.
//
// Thread-safety: view() may be called from any thread.
class ServerWatcher {
 public:
  ServerWatcher(WatcherConfig config, std::shared_ptr<SharedRegistry> registry);
  // A view taken no longer than `max_age` ago, other than `seen` (the
  // caller's last).
  std::shared_ptr<const ServersView> view(std::chrono::duration<double> max_age,
                                          const std::shared_ptr<const ServersView>& seen);
  const WatcherConfig& config() const { return config_; }
  uint64_t namespace_scans() const;

 private:
  const WatcherConfig config_;
  mutable std::mutex mu_;
  std::vector<std::pair<std::string, std::string>> errors_;  // of the resolution in progress
  ServerProcesses processes_;
  procfs::StatFiles stat_files_;                                    // kept between samples
  procfs::TreeFiles tree_files_{procfs::TreeFiles::Detail::kStat};  // (a walk's)
  std::shared_ptr<const ServersView> last_;
};

}  // namespace gym::exporter
