// Cgroups: where a process's memory is charged, and what its cgroup reports
// (usage, peak, limit, OOM kills, memory pressure); where its CPU time is
// accounted, and that cgroup's CPU limit and throttling. Both layouts are
// read: cgroup v2 (the unified hierarchy, when its memory or cpu controller
// is enabled) and the v1 memory and cpu hierarchies (hybrid hosts, where
// the controller is bound to v1). The parsers take text and never fail: a line they do not
// understand is skipped.
//
// Thread-safety: the parsers are pure; one Resolver belongs to one thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace gym::exporter::cgroup {

// Where the hierarchies are mounted (empty: not mounted), from mountinfo.
struct Mounts {
  std::string v2;             // the cgroup2 mount point
  std::string v2_root = "/";  // the part of the hierarchy mounted there
  std::string v1_memory;      // the v1 hierarchy with the memory controller
  std::string v1_memory_root = "/";
  std::string v1_cpu;  // the v1 hierarchy with the cpu controller
  std::string v1_cpu_root = "/";
  bool operator==(const Mounts&) const = default;
};
Mounts parse_mountinfo(std::string_view text);

// A process's cgroups (/proc/<pid>/cgroup): its v2 path ("0::/path") and
// its v1 memory and cpu paths ("N:...memory...:/path", "N:cpu,cpuacct:/path").
struct Membership {
  std::optional<std::string> v2;
  std::optional<std::string> v1_memory;
  std::optional<std::string> v1_cpu;
};
Membership parse_membership(std::string_view text);

// A cgroup whose memory is accounted: its version (1 or 2), its path in the
// hierarchy and its directory.
struct Place {
  int version = 0;
  std::string path;
  std::string dir;
  bool operator==(const Place&) const = default;
};
// Where `who`'s memory is charged: its v2 cgroup when that one accounts
// memory (has memory.current), else its v1 memory cgroup; nullopt when
// neither is mounted or the path is outside the mounted part.
std::optional<Place> locate(const Mounts& mounts, const Membership& who);
// Where `who`'s CPU time is accounted and limited: its v2 cgroup when the
// cpu controller is enabled there (it has cpu.max), else its v1 cpu cgroup.
std::optional<Place> locate_cpu(const Mounts& mounts, const Membership& who);

struct Pressure {
  double avg10 = 0, avg60 = 0, avg300 = 0;  // percent of wall time stalled
  uint64_t total_us = 0;                    // microseconds stalled, in all
};
struct PressureFile {
  std::optional<Pressure> some, full;
};
// memory.pressure, cpu.pressure, io.pressure (and /proc/pressure/*).
PressureFile parse_pressure(std::string_view text);
// The resources the kernel reports pressure of (/proc/pressure/<resource>,
// <resource>.pressure in a v2 cgroup).
inline constexpr const char* kPressureResources[3] = {"cpu", "memory", "io"};
// The pressure file at `path`; empty when it cannot be read.
PressureFile read_pressure(const std::string& path);

// The value of a "key value" line (memory.events, memory.oom_control,
// /proc/vmstat).
std::optional<uint64_t> find_count(std::string_view text, std::string_view key);

// A v1 limit this large is no limit (the kernel's PAGE_COUNTER_MAX).
inline constexpr uint64_t kV1Unlimited = uint64_t(1) << 62;

struct MemoryState {
  std::optional<uint64_t> current;
  std::optional<uint64_t> peak;             // v2: Linux 5.19 or later
  std::optional<uint64_t> limit;            // none: unlimited
  std::optional<uint64_t> oom_kills;        // processes killed (oom_kill)
  std::optional<uint64_t> oom_group_kills;  // v2: whole cgroups killed (oom_group_kill)
  PressureFile pressure;                    // v2 only
  bool exists = false;                      // the directory was there
};
// Reads the files of `place` (each one that is missing stays empty).
MemoryState read_memory(const Place& place);

struct CpuState {
  std::optional<double> limit_cores;  // quota / period; none: unlimited
  std::optional<uint64_t> periods, throttled_periods;
  std::optional<uint64_t> throttled_us;
  bool exists = false;  // the directory was there
};
// v2's cpu.max ("QUOTA PERIOD" or "max PERIOD"): the cores it allows.
std::optional<double> parse_cpu_max(std::string_view text);
// cpu.stat's nr_periods, nr_throttled and throttled_usec (v2) or
// throttled_time in nanoseconds (v1), and the quota (v2 cpu.max; v1
// cpu.cfs_quota_us over cpu.cfs_period_us, -1 for none) of a cpu `place`.
CpuState read_cpu(const Place& place);
// Only the OOM kills of `place` (what an exit's reason needs).
std::optional<uint64_t> read_oom_kills(const Place& place);

// A process's own cgroup: the one its memory is charged to, when that is
// neither the root of its hierarchy nor the exporter's own (a server that
// shares the exporter's cgroup has no cgroup of its own to report).
class Resolver {
 public:
  // Reads <proc_root>/self/mountinfo and /self/cgroup on first use, unless
  // `mounts` says where the hierarchies are.
  explicit Resolver(std::string proc_root, std::optional<Mounts> mounts = std::nullopt);
  // nullopt: none of its own, or its cgroup file could not be read.
  std::optional<Place> own(pid_t pid);
  // That and its cpu cgroup (on the same terms), from one read of its
  // cgroup file.
  std::pair<std::optional<Place>, std::optional<Place>> own_both(pid_t pid);

 private:
  void init();
  std::optional<Membership> membership(pid_t pid);
  std::string proc_root_;
  std::optional<Mounts> mounts_;
  std::optional<Place> self_, self_cpu_;
  bool init_ = false;
};

}  // namespace gym::exporter::cgroup
