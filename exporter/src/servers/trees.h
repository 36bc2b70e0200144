// Server trees: which processes are each Gym server's roots, for every
// per-server collector (memory, cpu, cgroup, gpu). A server is the union of
// its roots and everything beneath each, every process counted once:
//   - every live process that declared the server's name through the library
//     (found in the registry; in another pid namespace, found through
//     host/pid_namespaces.h), and
//   - what its configured target (servers.targets) names: a pid, a pidfile,
//     the oldest process a match finds (or, with `all`, every one: Ray
//     actors), and the processes of the cgroups it names (a sandbox's
//     container).
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
// Thread-safety: one ServerTrees belongs to one sampling thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "host/cgroup.h"
#include "host/pid_namespaces.h"
#include "host/procfs.h"
#include "servers/config.h"
#include "shared_registry.h"

namespace gym::exporter {

using ErrorFn = std::function<void(const std::string&, const std::string&)>;

class ServerTrees {
 public:
  // `registry` may be null (then only configured targets). `error(reason,
  // detail)` receives each failed read (reason "pidfile", "cgroup") and each
  // adoption rule over its bound (reason "adoption").
  ServerTrees(ServersConfig config, std::shared_ptr<SharedRegistry> registry, ErrorFn error);
  ~ServerTrees();

  struct Server {
    std::string name;
    std::string server_type;
    std::optional<bool> pss;                     // ServerTarget::pss
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
  // The proc root's boot time (btime, Unix seconds), read at the first
  // resolve() that could and kept: 0 until then. The one copy the
  // per-server collectors use (ServersView::boot_seconds).
  double boot_seconds() const { return boot_time_ ? double(*boot_time_) : 0; }
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
  // Seconds since the epoch at which `p` started (nullopt: boot time
  // unknown), never later than it did: to a clock tick from this kernel's
  // exact boot instant when the proc root is its own, else from btime
  // (truncated to the second: up to a second early).
  std::optional<double> started_at(const procfs::ProcStat& p, const procfs::ProcessTable& table);
  void read_boot_time(const std::string& proc_root);

  ServersConfig config_;
  std::optional<uint64_t> boot_time_;  // btime of the proc root, read once
  std::optional<double> boot_exact_;   // the boot's instant, when the proc root is this kernel's
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

}  // namespace gym::exporter
