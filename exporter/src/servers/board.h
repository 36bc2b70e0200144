// The board: every per-server number that /metrics serves, as the collectors'
// last samples hold it, for the views that show servers too
// (/api/v1/snapshot, gym-stat). A sampling collector posts its sample's
// figures here under the same lock under which it publishes the sample for
// /metrics, so that a request that sees the board's figures and a scrape
// that follows it serve the same sample (sampled_collector.h).
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace gym::exporter {

// What one collector's sample says of each server.
struct ServerFigures {
  double time_seconds = 0;  // when the sample was taken, Unix seconds
  struct Row {
    std::string server_type;
    std::optional<pid_t> pid;                      // the oldest root as the host sees it (servers)
    std::optional<uint64_t> rss_bytes, processes;  // memory
    std::optional<uint64_t> gpu_bytes;             // gpu: over every GPU
    // gpu: the fullest of the GPUs it has memory on, as used / total memory.
    std::optional<double> gpu_fullest_ratio;
    // cgroup: over every cgroup of it, removed ones included
    std::optional<uint64_t> cpu_periods, cpu_throttled_periods, oom_kills;
    std::optional<double> oldest_process_seconds;  // servers
  };
  std::map<std::string, Row> servers;  // by server name
  // servers: the proc root's boot time, Unix seconds (ServersView's; 0:
  // unknown), which turns the registry's writers' start ticks into times.
  double boot_seconds = 0;
};

class ServerBoard {
 public:
  // The figures of `source` (a collector's name) from now on.
  void post(const std::string& source, std::shared_ptr<const ServerFigures> figures);
  // Every source's last figures.
  std::map<std::string, std::shared_ptr<const ServerFigures>> read() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const ServerFigures>> figures_;
};

}  // namespace gym::exporter
