// The cpu collector: the CPU time, threads and open file descriptors of
// every Gym server's whole process tree (the gym_server_cpu_seconds_total,
// gym_server_threads and gym_server_open_fds families), sampled from procfs
// on an interval. Configuration: the `cpu:` section (enabled,
// interval_seconds); the servers are the shared watcher's
// (servers/watcher.h: lineage included).
//
// CPU seconds of a tree are a counter: each process's own time and its
// reaped children's, counted by increments between samples. A member that
// leaves the tree (exits) took its times with it, and its parent's
// cutime/cstime will jump by them when it reaps it: that jump is not counted
// again. A member whose parent left too was orphaned: its reaper is the
// nearest subreaper above it or init, and its times are taken off the jump
// of its nearest ancestor still in the tree (the reaper, when the server
// runs under a subreaper as advised). (An orphan that init reaps takes the
// CPU it used since the last sample with it.)
//
// Thread-safety: collect() may run while the sampling thread samples.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "host/procfs.h"
#include "sampled_collector.h"
#include "servers/watcher.h"

namespace gym::exporter {

struct CpuSample;

class CpuCollector : public SampledCollector<CpuSample> {
 public:
  CpuCollector(std::shared_ptr<ServerWatcher> servers, Log log, double interval_seconds = 5);
  ~CpuCollector() override;
  std::string sampling_group() const override { return kPerServerGroup; }

  struct ServerCpu {
    std::string name;
    std::string server_type;
    uint64_t threads = 0;
    std::optional<uint64_t> open_fds;  // only when every process's could be counted
    // Since the exporter first saw the tree, in clock ticks: never falls.
    uint64_t user_ticks = 0;
    uint64_t system_ticks = 0;
    // Unix seconds they count from: the start of the root first seen (its
    // tree's CPU time is counted from its start); 0 when not known.
    double since = 0;
  };
  // The last sample's servers (for tests).
  std::vector<ServerCpu> servers() const;

 private:
  using Member = std::pair<pid_t, uint64_t>;  // pid, start ticks
  struct Times {
    pid_t ppid = 0;
    uint64_t user = 0, system = 0, child_user = 0, child_system = 0;
  };
  struct Departed {
    Member parent;
    uint64_t user = 0, system = 0;  // its own and its children's, last seen
  };
  struct CpuState {
    std::map<Member, Times> members;
    std::map<Member, Departed> departed;  // exited, not yet reaped
    uint64_t user = 0, system = 0;        // ticks counted
    double since = 0;                     // ServerCpu::since
  };
  CpuSample take() override;
  void serve(const CpuSample& s, const Emit& emit) const override;
  // The tree's threads and open descriptors, its CPU counted into `st`
  // (since its root started, from `boot_seconds`, when first seen).
  ServerCpu measure(const ServerProcesses::Tree& t, CpuState& st, const procfs::ProcessTable& table,
                    double boot_seconds);
  void account_cpu(CpuState& st, const procfs::TreeUsage& tree, const procfs::ProcessTable& table);

  const double interval_seconds_;
  std::shared_ptr<ServerWatcher> watcher_;
  std::shared_ptr<const ServersView> view_;  // the last one sampled
  std::map<std::string, CpuState> cpu_;      // the sampling thread's, by server
  std::string scratch_;
};

struct CpuSample {
  std::vector<CpuCollector::ServerCpu> servers;
};

// The last sample's (for tests).
inline std::vector<CpuCollector::ServerCpu> CpuCollector::servers() const {
  return latest().servers;
}

}  // namespace gym::exporter
