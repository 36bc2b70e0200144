// The memory collector: the memory of every Gym server's whole process tree,
// and of the host, sampled from procfs on an interval (the
// gym_server_memory_*, gym_server_processes and gym_host_* families).
// Configuration: the `memory:` section (enabled, interval_seconds,
// pss_interval_seconds, pss_max_stall_seconds, pss_max_stall_fraction,
// pss_stall_seconds_per_gib).
//
// Which servers, and their processes, come from the shared watcher
// (servers/watcher.h). A sample reads each member's RSS, by kind, from its
// status (no memory lock taken) or, when PSS is due and the stall budget
// (collectors/pss_budget.h) allows it, RSS, PSS, USS and swap from one read
// of its smaps_rollup (so that they are of one instant).
//
// A server whose root is gone reports zeros while the servers unit keeps it
// (gym_server_up 0: collectors/servers.h); then its series (its peaks too)
// are dropped. Its RSS and process count are posted to the board
// (servers/board.h) for /api/v1/snapshot and gym-stat.
//
// Thread-safety: collect() may run while the sampling thread samples.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "collectors/pss_budget.h"
#include "host/procfs.h"
#include "sampled_collector.h"
#include "servers/watcher.h"

namespace gym::exporter {

struct MemoryConfig {
  double interval_seconds = 5;
  // PSS at most this often (0: at every sample); see docs/memory.md for its cost.
  double pss_interval_seconds = 0;
  // What a PSS read may stall a process (see collectors/pss_budget.h).
  PssBudgetConfig budget;
};

// The memory: section as its kind reads it (collector_settings in config.h).
struct MemorySettings : SampledSettings {
  double pss_interval_seconds = 0;
  double max_stall = PssBudgetConfig{}.max_stall_seconds;
  double max_fraction = PssBudgetConfig{}.max_stall_fraction;
  double per_gib = PssBudgetConfig{}.prior_seconds_per_gib;
  double max_cpu = PssBudgetConfig{}.max_cpu_fraction;
  MemoryConfig config() const {
    return {interval_seconds, pss_interval_seconds, {max_stall, max_fraction, per_gib, max_cpu}};
  }
};

struct MemorySample;

class MemoryCollector : public SampledCollector<MemorySample> {
 public:
  MemoryCollector(MemoryConfig config, std::shared_ptr<ServerWatcher> servers, Log log,
                  std::shared_ptr<ServerBoard> board = nullptr);
  ~MemoryCollector() override;
  std::string sampling_group() const override { return kPerServerGroup; }

  struct ServerMemory {
    std::string name;
    std::string server_type;
    uint64_t rss = 0;
    // From smaps_rollup: only when read for every process of the tree.
    std::optional<uint64_t> pss;
    std::optional<uint64_t> uss;
    std::optional<uint64_t> swap;
    // RSS by kind from status: only when read for every process of the tree.
    std::optional<uint64_t> rss_anon;
    std::optional<uint64_t> rss_file;
    std::optional<uint64_t> rss_shmem;
    uint64_t processes = 0;
    bool up = false;         // it has a root (gone: zeros)
    bool pss_wanted = true;  // its target does not say pss: false
    // Since the exporter first saw it: smaps_rollup reads of its tree, and
    // due reads skipped because the budget refused (a member's single stall
    // over the cap) or deferred them (its share of wall time).
    uint64_t pss_reads = 0;
    uint64_t pss_refused = 0;
    uint64_t pss_deferred = 0;
    uint64_t pss_busy = 0;  // the exporter's own reading budget spent on others
  };
  // The last sample's servers (for tests).
  std::vector<ServerMemory> servers() const;

 private:
  // A tree's smaps_rollup totals, and its membership when they were read.
  struct Rollups {
    uint64_t rss = 0, pss = 0, uss = 0, swap = 0;
    std::vector<std::pair<pid_t, uint64_t>> members;  // sorted
  };
  MemorySample take() override;
  void serve(const MemorySample& s, const Emit& emit) const override;
  std::shared_ptr<const ServerFigures> figures(const MemorySample& s) const override;
  // A tree's PSS state: when its smaps_rollup was last read, and its counts.
  struct PssState {
    std::optional<std::chrono::steady_clock::time_point> last_read;
    uint64_t reads = 0, refused = 0, deferred = 0, busy = 0;
  };
  ServerMemory measure(const ServerProcesses::Tree& tree, const procfs::ProcessTable& table,
                       bool pss_due);
  // Its PSS, USS and swap into `m` (read now, or the last read's): those of
  // a server whose target wants them.
  void measure_pss(const ServerProcesses::Tree& tree, const procfs::ProcessTable& table,
                   bool pss_due, ServerMemory& m);
  // Whether the budget lets `tree` be read now (kRead), else counts the skip.
  PssVerdict judge(const ServerProcesses::Tree& tree, PssState& state);
  std::optional<Rollups> read_rollups(const std::vector<const procfs::ProcStat*>& live,
                                      const procfs::ProcessTable& table);
  std::optional<procfs::MemInfo> read_host();

  MemoryConfig config_;
  std::shared_ptr<ServerWatcher> watcher_;
  std::shared_ptr<const ServersView> view_;  // the last one sampled
  // The sampling thread's: last smaps_rollup totals by server name, peaks.
  std::map<std::string, Rollups> rollups_;
  std::map<std::string, PssState> pss_;
  StallModel stall_;
  double pss_spent_ = 0;  // seconds of smaps_rollup reads in this sample
  std::chrono::steady_clock::time_point sample_started_{};
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> peaks_;
  uint64_t host_peak_ = 0;
  std::string scratch_;  // a buffer for reads
  std::chrono::steady_clock::time_point last_pss_{};
  bool pss_ever_ = false;
};

// One memory sample.
struct MemorySample {
  double time_seconds = 0;  // Unix seconds
  std::vector<MemoryCollector::ServerMemory> servers;
  // By (server, type, memory_type): the largest sampled, while it is reported.
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> peaks;
  std::optional<procfs::MemInfo> host;
  double pss_seconds_per_gib = 0;  // the stall model's estimate
  uint64_t host_peak = 0;
  std::optional<uint64_t> host_oom_kills;
  double host_oom_since = 0;  // the boot: the kernel counts OOM kills from then
  // The servers unit's failed reads (this family's alias counts them too).
  std::map<std::string, uint64_t> watcher_errors;
};

// The last sample's (for tests).
inline std::vector<MemoryCollector::ServerMemory> MemoryCollector::servers() const {
  return latest().servers;
}

}  // namespace gym::exporter
