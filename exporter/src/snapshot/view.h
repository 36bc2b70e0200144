// A registry snapshot grouped the way people and scripts ask about it: each
// concurrency limit, each resources operation (by operation, executor and
// server), each server with what the collectors' last samples say of it (the
// board: servers/board.h, the numbers /metrics serves), and each writer. The
// one model behind `gym-stat` (its screen, --once and --json) and the
// exporter's /api/v1/snapshot; its JSON schema is docs/snapshot.schema.json.
//
// Thread-safety: pure functions over their arguments.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gym/registry_reader.h"
#include "servers/board.h"

namespace gym::exporter {

// Every source's last figures (ServerBoard::read).
using BoardFigures = std::map<std::string, std::shared_ptr<const ServerFigures>>;

struct HistogramView {
  uint64_t count = 0;
  double sum = 0;                                    // seconds
  std::vector<std::pair<double, uint64_t>> buckets;  // (upper bound, cumulative), +Inf last
  // The q-quantile by linear interpolation within the bucket (as PromQL's
  // histogram_quantile); nullopt without observations.
  std::optional<double> quantile(double q) const;
  // This minus an earlier view of the same histogram (for a window).
  HistogramView minus(const HistogramView& earlier) const;
};

struct LimitView {
  std::string component, limit_name, server_name;  // server_name may be empty
  int64_t limit = 0, active = 0, available = 0, queue_depth = 0;
  // Holds in progress (the holds' ages record): a format 3 writer's
  // available gauge holds its limit, and free = available - holds.
  int64_t holds = 0;
  std::optional<uint64_t> admission_timeouts_total;  // only limits with a timeout
  uint64_t admission_cancelled_total = 0;
  uint64_t admissions_total = 0;
  // Every wait that ended (admitted, timed out, cancelled), summed over the
  // outcomes; and the time slots were held over the holds that ended (absent
  // from writers older than the counter).
  HistogramView wait_duration;
  std::optional<double> hold_seconds_total;
  // How long its longest hold and its longest wait have lasted now (0: none).
  double oldest_hold_seconds = 0, oldest_wait_seconds = 0;
  // Its spread over the processes holding it (LimitRow, gym/registry_reader.h):
  // how many, and their free slots stranded beside another process's queue.
  uint32_t processes = 0;
  int64_t stranded_slots = 0;
  std::string key() const { return server_name + "\x1f" + component + "\x1f" + limit_name; }
  // A limit whose writers are gone keeps its counters but has no gauges: it
  // is not a limit now (not shown, not in the JSON).
  bool present() const { return limit > 0; }
};

struct OperationView {
  std::string operation, executor, server_name;
  int64_t queued = 0, active = 0;
  HistogramView queue_duration;  // every wait that ended: admitted, timed out or cancelled
  std::map<std::string, HistogramView> duration;  // by outcome
  // How long its longest wait and its longest run have lasted now (0: none).
  double oldest_queued_seconds = 0, oldest_active_seconds = 0;
  std::string key() const { return server_name + "\x1f" + operation + "\x1f" + executor; }
  uint64_t finished() const;
};

struct ServerView {
  std::string server_name, server_type;
  pid_t pid = 0;  // its oldest root as the host sees it (a declarer's, not yet sampled)
  std::optional<uint64_t> rss_bytes;  // the memory collector's last sample
  std::optional<uint64_t> processes;
  // GPU memory of its processes over every GPU (the gpu collector's last
  // sample, when NVML was read and every GPU's processes were known).
  std::optional<uint64_t> gpu_bytes;
  // The fullest GPU it has memory on: used / total memory (the same sample).
  std::optional<double> gpu_fullest_ratio;
  // Over every cgroup of it, removed ones included (the cgroup collector's
  // last sample): CFS periods and those throttled, OOM kills of both kinds.
  std::optional<uint64_t> cpu_periods, cpu_throttled_periods, oom_kills;
  // Age of its oldest process other than its roots (the servers unit's).
  std::optional<double> oldest_process_seconds;
  // Its event loop, when instrumented (gym_metrics.instrument_runtime): the
  // lag histogram, and how long the loop's heartbeat is overdue now (its
  // most overdue loop's).
  std::optional<HistogramView> loop_lag;
  std::optional<double> loop_blocked_seconds;
};

struct WriterView {
  pid_t pid = 0;
  double start_time_seconds = 0;  // since the epoch (0 when unknown)
  uint32_t format_version = 0;
  bool unmetered = false;
  std::string server_name;  // the server it declared, if any
};

// A process of a server that died (servers/deaths.h records them).
struct ProcessDeath {
  double time = 0;  // Unix seconds
  std::string server, server_type;
  pid_t pid = 0, parent = 0;
  std::string command;  // at its last exec (or its parent's)
  std::optional<double> lifetime_seconds;
  std::string reason;  // exit_zero, exit_nonzero, signal, oom_kill
  std::optional<int> exit_code, signal;
  // The last the exporter saw (a sample's); for an OOM kill, the kernel's
  // figure at the kill (anon + file + shmem).
  std::optional<uint64_t> rss_bytes;
  // An OOM kill's memory cgroup that was out of memory ("/" for the host's),
  // its usage and limit then (a memory cgroup's OOM).
  std::string memory_cgroup;
  std::optional<uint64_t> memory_cgroup_usage_bytes, memory_cgroup_limit_bytes;
};
struct View {
  uint64_t shape = 0;       // which ViewBuilder shape its rows follow (0: none)
  double time_seconds = 0;  // when it was taken, since the epoch
  // When each collector's sample that its servers' numbers come from was
  // taken (since the epoch), by collector.
  std::map<std::string, double> samples;
  std::string registry_dir;
  std::vector<LimitView> limits;
  std::vector<OperationView> operations;
  std::vector<ServerView> servers;
  std::vector<WriterView> writers;
  // gym-stat's: its servers' processes that died lately, newest last, and
  // whether process events feed them (not in the JSON: /api/v1/deaths).
  std::vector<ProcessDeath> deaths;
  bool deaths_followed = false;
};

// Builds Views from successive snapshots of one reader. The shape (which
// series feeds which row) is kept while the snapshot's series stay the same,
// so a refresh only copies values into the View it is given (whose
// allocations it reuses).
class ViewBuilder {
 public:
  // `figures` give each server's numbers, and the servers unit's boot time
  // (ServerFigures::boot_seconds) turns writers' start ticks into times.
  void build(const Snapshot& snap, const std::string& registry_dir, const BoardFigures& figures,
             View& out);

 private:
  // An operation series' part in its row.
  // A series' part in its row: an operation's, or (kLimit*) a limit's.
  enum class Field : uint8_t {
    kNone,
    kQueued,
    kActive,
    kQueueDuration,
    kDuration,
    kOldestQueued,
    kOldestActive,
    kLimitWait,
    kLimitHeld,
    kLimitOldestWait
  };
  struct Slot {
    Field field = Field::kNone;
    uint32_t row = 0;
    std::string outcome;  // kDuration
  };
  void reshape(const Snapshot& snap);
  // The limits' rows in key order; `ranked` gets each one's place by key.
  void reshape_limits(const Snapshot& snap, std::map<std::string, uint32_t>& ranked);
  // The slots of limits' series that are not parts of their row (LimitRow).
  void reshape_limit_extras(const Snapshot& snap, const std::map<std::string, uint32_t>& ranked);
  void fill(const Snapshot& snap, View& out) const;

  std::vector<const SeriesInfo*> infos_;  // the series the shape is for
  uint64_t epoch_ = UINT64_MAX;
  std::vector<Slot> slots_;  // by series index
  std::vector<LimitView> limits_;
  std::vector<uint32_t> limit_rank_;  // by Snapshot::limits index: its place in limits_
  std::vector<OperationView> operations_;
  std::vector<const SeriesInfo*> scratch_;
  uint64_t shape_ = 0;
};

// One View from one snapshot.
View make_view(const Snapshot& snap, const std::string& registry_dir,
               const BoardFigures& figures = {});

// /api/v1/deaths (docs/deaths.schema.json): the records, oldest first, and
// the source of process events ("connector" or "sampling").
std::string deaths_json(const std::vector<ProcessDeath>& deaths, const std::string& source);
struct Verdict;
// With the verdict of a window (snapshot/verdict.h) when there is one.
std::string to_json(const View& v, const Verdict* verdict = nullptr);

}  // namespace gym::exporter
