// The cgroup collector: for every Gym server whose root process has a cgroup
// of its own (neither the root of its hierarchy nor the exporter's), what
// that cgroup reports: memory usage, peak and limit, OOM kills, and memory
// pressure (the gym_server_cgroup_* families). cgroup v2 and the v1 memory
// hierarchy are both read (cgroup.h). Configuration: the `cgroup:` section
// (enabled, interval_seconds); the servers, the proc root and the cgroup
// mounts are the servers unit's (servers/watcher.h). A server of several
// roots is reported with the cgroup of its oldest root.
//
// CPU: over every distinct cpu cgroup that holds one of a server's
// processes (its roots' own, its sandboxes', its verifiers'), each read once
// a sample even when several servers share it (then it counts for each):
// the CPU limit in cores (summed over its limited cgroups) and the CFS
// periods, throttled periods and throttled time (gym_server_cgroup_cpu_*).
// A cgroup that goes away keeps what it counted up to the last sample.
//
// The OOM kills and pressure totals are counters that never fall: each
// cgroup's counts are added as they grow, and a cgroup that is new to a
// server (moved, or recreated with a reset count) adds all of its own.
//
// Thread-safety: collect() may run while the sampling thread samples.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cgroup.h"
#include "sampled_collector.h"
#include "servers/watcher.h"

namespace gym::exporter {

struct CgroupSample;

class CgroupCollector : public SampledCollector<CgroupSample> {
 public:
  CgroupCollector(std::shared_ptr<ServerWatcher> servers, Log log, double interval_seconds = 5);
  ~CgroupCollector() override;
  std::string sampling_group() const override { return kPerServerGroup; }

  // A counter made of a kernel count that may restart: it adds increments,
  // and all of a count that is new or fell.
  struct Counter {
    std::optional<uint64_t> last;
    uint64_t total = 0;
    void add(std::optional<uint64_t> now);
  };
  struct ServerCgroup {
    std::string name;
    std::string server_type;
    cgroup::Place place;
    cgroup::MemoryState memory;
    Counter oom_kills, pressure_some_us, pressure_full_us;
  };
  // A server's CPU over its cpu cgroups.
  struct CpuCounters {
    Counter periods, throttled_periods, throttled_us;
  };
  struct ServerCpu {
    std::string name;
    std::string server_type;
    std::optional<double> limit_cores;           // summed over its limited cgroups
    std::map<std::string, CpuCounters> cgroups;  // by directory, those of the last sample
    uint64_t gone_periods = 0, gone_throttled_periods = 0, gone_throttled_us = 0;
    bool counted = false;  // some cgroup of it reported cpu.stat
    uint64_t periods() const { return sum(&CpuCounters::periods, gone_periods); }
    uint64_t throttled_periods() const {
      return sum(&CpuCounters::throttled_periods, gone_throttled_periods);
    }
    uint64_t throttled_us() const { return sum(&CpuCounters::throttled_us, gone_throttled_us); }
    // `gone` and one counter of each of its cgroups, added up.
    uint64_t sum(Counter CpuCounters::*which, uint64_t gone) const;
  };
  // The last sample's servers with a cgroup of their own (for tests).
  std::vector<ServerCgroup> servers() const;
  std::vector<ServerCpu> cpu() const;

 private:
  CgroupSample take() override;
  void serve(const CgroupSample& s, const Emit& emit) const override;

  const double interval_seconds_;
  std::shared_ptr<ServerWatcher> watcher_;
  std::shared_ptr<const ServersView> view_;  // the last one sampled
  cgroup::Resolver resolver_;
  std::map<std::string, ServerCgroup> state_;   // the sampling thread's, by server
  std::map<std::string, ServerCpu> cpu_state_;  // likewise
  void take_cpu(const ServersView& view, std::vector<ServerCpu>& out);
};

struct CgroupSample {
  std::vector<CgroupCollector::ServerCgroup> servers;
  std::vector<CgroupCollector::ServerCpu> cpu;
};

// The last sample's (for tests).
inline std::vector<CgroupCollector::ServerCgroup> CgroupCollector::servers() const {
  return latest().servers;
}
inline std::vector<CgroupCollector::ServerCpu> CgroupCollector::cpu() const {
  return latest().cpu;
}

}  // namespace gym::exporter
