// The cgroup collector: for every Gym server whose root process has a cgroup
// of its own (neither the root of its hierarchy nor the exporter's), what
// that cgroup reports: memory usage, peak and pressure averages (the
// gym_server_cgroup_* families), and the host's pressure stalls
// (/proc/pressure: gym_host_pressure_seconds_total). cgroup v2 and the v1
// memory and cpu hierarchies are both read (cgroup.h). Configuration: the `cgroup:` section
// (enabled, interval_seconds); the servers, the proc root and the cgroup
// mounts are the servers unit's (servers/watcher.h). A server of several
// roots is reported with the cgroup of its oldest root.
//
// Every distinct cgroup that holds one of a server's processes (its roots'
// own, its sandboxes', its verifiers'; the memory and the cpu cgroup of
// each) is read once a sample even when several servers share it (then it
// counts for each), and adds to the server's totals: the OOM kills by kind
// (process, group), the memory, cpu and io pressure stalls (v2), the CFS
// periods, throttled periods and throttled time; and to its limits, summed
// over its limited cgroups (memory bytes, CPU cores). The usage, peak,
// pressure averages and gym_server_cgroup_info stay the root's own cgroup's.
//
// Nothing is lost when a cgroup goes: a cgroup that no longer holds a
// process of the server is read once more (when the kernel still has it)
// and its counts are folded into the server's; those folded counts are
// kept in the totals file (cgroup_totals.h) by the registry's lock holder,
// and read back by the next exporter of the same boot. A cgroup removed
// between two samples loses what happened since the last one.
//
// The totals are counters that never fall: each cgroup's counts are added
// as they grow, and a cgroup that is new to a server (moved, or recreated
// with a reset count) adds all of its own.
//
// Thread-safety: collect() may run while the sampling thread samples.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "host/cgroup.h"
#include "sampled_collector.h"
#include "servers/watcher.h"

namespace gym::exporter {

struct CgroupSample;

class CgroupCollector : public SampledCollector<CgroupSample> {
 public:
  // The counts added up per server, each from a file of every cgroup.
  enum Count : uint8_t {
    kOomProcess,  // memory.events oom_kill (v1 memory.oom_control)
    kOomGroup,    // memory.events oom_group_kill (v2)
    kMemorySome,  // memory.pressure totals, microseconds (v2)
    kMemoryFull,
    kCpuSome,  // cpu.pressure (v2)
    kCpuFull,
    kIoSome,  // io.pressure (v2)
    kIoFull,
    kPeriods,           // cpu.stat nr_periods
    kThrottledPeriods,  // nr_throttled
    kThrottledUs,       // throttled_usec (v1 throttled_time / 1000)
    kCounts
  };
  // `totals_file`: where the counts of gone cgroups are kept ("": nowhere);
  // `may_write`: whether this one writes it (the registry's lock holder).
  CgroupCollector(std::shared_ptr<ServerWatcher> servers, Log log, double interval_seconds = 5,
                  std::string totals_file = "", std::function<bool()> may_write = {},
                  std::shared_ptr<ServerBoard> board = nullptr);
  ~CgroupCollector() override;
  std::string sampling_group() const override { return kPerServerGroup; }

  // A counter made of a kernel count that may restart: it adds increments,
  // and all of a count that is new or fell.
  struct Counter {
    std::optional<uint64_t> last;
    uint64_t total = 0;
    void add(std::optional<uint64_t> now);
  };
  // What the root's own cgroup reports now.
  struct ServerCgroup {
    std::string name;
    std::string server_type;
    cgroup::Place place;
    cgroup::MemoryState memory;
  };
  // A server's totals over every cgroup of it, now and gone.
  struct ServerTotals {
    std::string name;
    std::string server_type;
    std::optional<double> cpu_limit_cores;       // summed over its limited cgroups
    std::optional<uint64_t> memory_limit_bytes;  // likewise, its outermost ones
    std::optional<uint64_t> memory_usage_bytes;  // of its outermost memory cgroups
    struct Kept {
      cgroup::Place place;
      bool memory = false, cpu = false;  // which hierarchies it is the server's cgroup in
      bool active = false;               // it held a process of the server at the last sample
      // Below another memory cgroup of the server in the unified hierarchy,
      // whose own counts (hierarchical there) hold its OOM kills, pressure
      // and usage: those it does not add.
      bool nested = false;
      uint64_t inode = 0;  // of its directory: a cgroup made again is another
      std::array<Counter, kCounts> counts;
    };
    // By directory: those that held its processes at the last sample, and
    // those that did before and are still there (idle).
    std::map<std::string, Kept> cgroups;
    std::array<uint64_t, kCounts> gone{};  // of its cgroups that were removed
    std::array<bool, kCounts> seen{};      // some cgroup of it reported the count
    uint64_t total(Count c) const;
    uint64_t periods() const { return total(kPeriods); }
    uint64_t throttled_periods() const { return total(kThrottledPeriods); }
    uint64_t throttled_us() const { return total(kThrottledUs); }
  };
  // The last sample's servers with a cgroup of their own, and the totals of
  // every server with some cgroup (for tests).
  std::vector<ServerCgroup> servers() const;
  std::vector<ServerTotals> totals() const;

 private:
  CgroupSample take() override;
  void serve(const CgroupSample& s, const Emit& emit) const override;

  const double interval_seconds_;
  std::shared_ptr<ServerWatcher> watcher_;
  std::shared_ptr<const ServersView> view_;  // the last one sampled
  cgroup::Resolver resolver_;
  std::shared_ptr<const ServerFigures> figures(const CgroupSample& s) const override;
  struct Reading {       // one cgroup's files, read once a sample
    uint64_t inode = 0;  // 0: gone
    std::optional<double> cpu_limit;
    std::optional<uint64_t> memory_limit, memory_usage;
    std::array<std::optional<uint64_t>, kCounts> counts;
  };
  Reading read(const ServerTotals::Kept& k) const;
  const Reading& reading(const ServerTotals::Kept& k);  // once a sample
  void take_totals(const ServersView& view, std::vector<ServerTotals>& out);
  void track(ServerTotals& t, std::map<std::string, ServerTotals::Kept> places);
  void add(ServerTotals::Kept& k, const Reading& r) const;
  static void mark_nested(std::map<std::string, ServerTotals::Kept>& places);
  void keep_totals();

  const std::string totals_file_;
  const std::function<bool()> may_write_;
  std::map<std::string, ServerTotals> totals_;  // the sampling thread's, by server
  using Member = std::pair<pid_t, uint64_t>;    // pid, start ticks
  using Memberships = std::pair<std::optional<cgroup::Place>, std::optional<cgroup::Place>>;
  static constexpr uint64_t kRecheck = 12;  // samples between two reads of a process's cgroups
  const Memberships& cgroups_of(const ServerProcesses::Tree& s, pid_t pid, uint64_t start,
                                std::map<Member, Memberships>& seen);
  std::map<Member, Memberships> members_;  // the last sample's, memory and cpu cgroup
  uint64_t samples_ = 0;
  std::map<std::pair<std::string, int>, Reading> read_now_;  // this sample's, by directory
  bool changed_ = false;  // its cgroups or gone counts, since the totals file was written
  std::string boot_id_;   // the proc root's boot id, read once ("": unknown)
};

struct CgroupSample {
  double time_seconds = 0;  // Unix seconds
  std::vector<CgroupCollector::ServerCgroup> servers;
  std::vector<CgroupCollector::ServerTotals> totals;
  cgroup::PressureFile host[3];  // /proc/pressure/cpu, memory, io
  double host_since = 0;         // the boot, since when they count (0: unknown)
};

// The last sample's (for tests).
inline std::vector<CgroupCollector::ServerCgroup> CgroupCollector::servers() const {
  return latest().servers;
}
inline std::vector<CgroupCollector::ServerTotals> CgroupCollector::totals() const {
  return latest().totals;
}

}  // namespace gym::exporter
