// The cgroup collector: for every Gym server whose root process has a cgroup
// of its own (neither the root of its hierarchy nor the exporter's), what
// that cgroup reports: memory usage, peak and limit, OOM kills, and memory
// pressure (the gym_server_cgroup_* families). cgroup v2 and the v1 memory
// hierarchy are both read (cgroup.h). Configuration: the `cgroup:` section
// (enabled, interval_seconds); the servers, the proc root and the cgroup
// mounts are the servers unit's (servers/watcher.h). A server of several
// roots is reported with the cgroup of its oldest root.
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
  // The last sample's servers with a cgroup of their own (for tests).
  std::vector<ServerCgroup> servers() const;

 private:
  CgroupSample take() override;
  void serve(const CgroupSample& s, const Emit& emit) const override;

  const double interval_seconds_;
  std::shared_ptr<ServerWatcher> watcher_;
  std::shared_ptr<const ServersView> view_;  // the last one sampled
  cgroup::Resolver resolver_;
  std::map<std::string, ServerCgroup> state_;  // the sampling thread's, by server
};

struct CgroupSample {
  std::vector<CgroupCollector::ServerCgroup> servers;
};

// The last sample's (for tests).
inline std::vector<CgroupCollector::ServerCgroup> CgroupCollector::servers() const {
  return latest().servers;
}

}  // namespace gym::exporter
