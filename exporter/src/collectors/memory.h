// The memory collector: the memory of every Gym server's whole process tree,
// and of the host, sampled from procfs on an interval (the
// gym_server_memory_*, gym_server_processes, gym_server_info, gym_server_up,
// gym_server_exits_total and gym_host_* families). Configuration: the `memory:` section.
//
// Which servers, and their roots, come from the server trees
// (server_tree.h). A sample walks each tree from its root (ProcessTable::walk;
// a scan of every process when a match target needs it), with RSS from each
// member's statm or, when PSS is due, RSS, PSS, USS and swap from one read
// of its smaps_rollup (so that they are of one instant).
//
// A server whose root is gone reports gym_server_up 0 and zeros; a declared
// server that is gone does so for gone_server_ttl_seconds, then its series
// (its peaks too) are dropped. Configured targets are reported while they are
// configured.
//
// Orphans stay in their server's tree by lineage (server_tree.h;
// gym_server_escaped_processes counts them). One that is born and orphaned
// between two samples was never seen: run servers under a subreaper
// (PR_SET_CHILD_SUBREAPER) to keep those too. The trees' CPU, threads and
// open files are the cpu collector's (cpu.h), their cgroups the cgroup
// collector's (cgroups.h).
//
// Thread-safety: collect() may run while the sampling thread samples.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cgroup.h"
#include "collector.h"
#include "procfs.h"
#include "server_tree.h"

namespace gym::exporter {

struct Config;

struct MemoryConfig {
  double interval_seconds = 5;
  // PSS at most this often (0: at every sample); see docs/memory.md for its cost.
  double pss_interval_seconds = 0;
  // How long a declared server that is gone reports zeros before its series go.
  double gone_server_ttl_seconds = 300;
  std::string proc_root = "/proc";
  std::vector<ServerTarget> targets;
  bool operator==(const MemoryConfig&) const = default;
};

// The memory section of a loaded configuration (its defaults when absent).
MemoryConfig memory_config(const Config& c);
// The server watcher's configuration from the memory section (its proc root,
// targets and gone TTL) and the cgroup mounts (nullopt: as mountinfo says).
WatcherConfig watcher_config(const MemoryConfig& m, std::optional<cgroup::Mounts> mounts);

class MemoryCollector : public IntervalCollector {
 public:
  // `registry` may be null (then only configured targets are sampled).
  // `servers` is the shared watcher; null: one of its own, of `config`.
  MemoryCollector(MemoryConfig config, std::shared_ptr<SharedRegistry> registry, Log log,
                  std::shared_ptr<ServerWatcher> servers = nullptr);
  ~MemoryCollector() override;

  void sample() override;
  void collect(const Emit& emit) override;

  struct ServerMemory {
    std::string name;
    std::string server_type;
    uint64_t rss = 0;
    // From smaps_rollup: only when read for every process of the tree.
    std::optional<uint64_t> pss;
    std::optional<uint64_t> uss;
    std::optional<uint64_t> swap;
    uint64_t processes = 0;
    // Of those, the ones that left the tree and are the server's by lineage.
    uint64_t escaped = 0;
    std::optional<pid_t> root_pid;  // the oldest root; none when gone (gym_server_up 0)
    std::vector<pid_t> root_pids;   // every root (one gym_server_info each)
    // Times its root process exited (or was replaced), by reason.
    uint64_t exits = 0, oom_kill_exits = 0;
    double exits_since = 0;  // Unix seconds the exits count from (0: not known)
  };
  // The last sample's servers (for tests).
  std::vector<ServerMemory> servers() const;

 private:
  // A tree's smaps_rollup totals, and its membership when they were read.
  struct Rollups {
    uint64_t rss = 0, pss = 0, uss = 0, swap = 0;
    std::vector<std::pair<pid_t, uint64_t>> members;  // sorted
  };
  ServerMemory measure(const ServerProcesses::Tree& tree, const procfs::ProcessTable& table,
                       bool pss_due);
  void record_unseen(uint64_t unseen);
  std::optional<Rollups> read_rollups(const std::vector<const procfs::ProcStat*>& live,
                                      const procfs::ProcessTable& table);
  std::optional<procfs::MemInfo> read_host();
  void record(std::vector<ServerMemory> servers, std::optional<procfs::MemInfo> host,
              std::optional<uint64_t> host_oom_kills, double took);
  void count_error(const std::string& reason, const std::string& detail);
  // Counts an exit for each root of the last sample that is no root now; an
  // OOM kill when its cgroup's OOM kills grew since that sample.
  void track_exit(const ServerProcesses::Tree& tree);

  MemoryConfig config_;
  std::shared_ptr<ServerWatcher> watcher_;
  std::shared_ptr<const ServersView> view_;  // the last one sampled
  Log log_;
  // The sampling thread's: last smaps_rollup totals by server name.
  std::map<std::string, Rollups> rollups_;
  using Member = std::pair<pid_t, uint64_t>;  // pid, start ticks
  struct RootTrack {
    std::optional<cgroup::Place> place;  // its own cgroup at the last sample
    std::optional<uint64_t> oom_kills;   // that cgroup's OOM kills then
  };
  struct RootState {
    std::map<Member, RootTrack> roots;  // the last sample's
    uint64_t exits = 0, oom_kill_exits = 0;
    double since = 0;  // when it was first tracked: its exits count from then
  };
  std::map<std::string, RootState> roots_;
  cgroup::Resolver resolver_;
  std::string scratch_;                          // a buffer for reads
  double boot_seconds_ = 0;                      // the proc root's boot time (0: not read yet)
  const double since_ = unix_now_seconds();      // its own counters count from then
  std::set<std::string> failing_, failing_now_;  // details logged, to log each once
  std::chrono::steady_clock::time_point last_pss_{};
  bool pss_ever_ = false;

  mutable std::mutex mu_;  // guards what collect() reads
  std::vector<ServerMemory> servers_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> peaks_;
  std::optional<procfs::MemInfo> host_;
  std::optional<uint64_t> host_oom_kills_;
  double host_oom_since_ = 0;  // the boot: the kernel counts OOM kills from then
  uint64_t host_peak_ = 0;
  std::map<std::string, uint64_t> errors_;
  uint64_t unseen_ = 0;  // declarers out of sight (ServersView::unseen_declarers)
  double last_duration_ = 0;
};

}  // namespace gym::exporter
