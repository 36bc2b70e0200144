// A server's processes over time: its trees at each sample, the members that
// left them kept by lineage, and declared servers that are gone kept for a
// while (servers.gone_server_ttl_seconds).
//
// Thread-safety: one ServerProcesses belongs to one sampling thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "host/procfs.h"
#include "servers/trees.h"

namespace gym::exporter {

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
  ServerProcesses(ServersConfig config, std::shared_ptr<SharedRegistry> registry, ErrorFn error);

  struct Tree {
    std::string name;
    std::string server_type;
    std::optional<bool> pss;  // ServerTarget::pss
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
  void add_gone_servers(std::vector<Tree>& out, std::chrono::steady_clock::time_point now);
};

}  // namespace gym::exporter
