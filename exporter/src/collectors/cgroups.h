// The cgroup collector: for every Gym server whose root process has a cgroup
// of its own (neither the root of its hierarchy nor the exporter's), what
// that cgroup reports: memory usage, peak and limit, OOM kills, and memory
// pressure (the gym_server_cgroup_* families). cgroup v2 and the v1 memory
// hierarchy are both read (cgroup.h). Configuration: the `cgroup:` section;
// the servers are the memory section's (memory.targets and the declared
// servers) and its proc_root. A server of several roots (server_tree.h) is
// reported with the cgroup of its oldest root.
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
#include "collector.h"
#include "server_tree.h"

namespace gym::exporter {

struct Config;

struct CgroupConfig {
  double interval_seconds = 5;
  // Where the hierarchies are mounted; both empty: as
  // <proc_root>/self/mountinfo says.
  std::string v2_mount;
  std::string v1_memory_mount;
  // The memory section's.
  std::string proc_root = "/proc";
  std::vector<ServerTarget> targets;
  bool operator==(const CgroupConfig&) const = default;
};

// The cgroup mounts a loaded configuration names (nullopt: as mountinfo says).
std::optional<cgroup::Mounts> cgroup_mounts(const Config& c);

class CgroupCollector : public IntervalCollector {
 public:
  // `servers` is the shared watcher; null: one of its own, of `config`.
  CgroupCollector(CgroupConfig config, std::shared_ptr<SharedRegistry> registry, Log log,
                  std::shared_ptr<ServerWatcher> servers = nullptr);
  ~CgroupCollector() override;

  void sample() override;
  void collect(const Emit& emit) override;

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
  void count_error(const std::string& detail);

  CgroupConfig config_;
  std::shared_ptr<ServerWatcher> watcher_;
  std::shared_ptr<const ServersView> view_;  // the last one sampled
  cgroup::Resolver resolver_;
  Log log_;
  std::map<std::string, ServerCgroup> state_;  // the sampling thread's, by server
  std::set<std::string> failing_, failing_now_;

  mutable std::mutex mu_;  // guards what collect() reads
  std::vector<ServerCgroup> servers_;
  uint64_t errors_ = 0;
  const double since_ = unix_now_seconds();  // errors_ counts from then
};

}  // namespace gym::exporter
