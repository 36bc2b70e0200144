// The memory collector: the memory of every Gym server's whole process tree,
// and of the host, sampled from procfs on an interval (the
// gym_server_memory_*, gym_server_processes, gym_server_info and
// gym_host_memory_* families). Configuration: the `memory:` section.
//
// Which servers, and their roots, come from the server trees
// (server_tree.h). A sample reads the process table in one pass, then RSS
// from each member's stat and, when due, PSS from its smaps_rollup.
//
// Orphans: when a middle process of a tree exits, the kernel hands its
// children to init or to the nearest subreaper, so they leave the tree; run
// servers under a subreaper (PR_SET_CHILD_SUBREAPER) to keep them counted.
//
// Thread-safety: collect() may run while the sampling thread samples.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "collector.h"
#include "procfs.h"
#include "server_tree.h"

namespace gym::exporter {

struct Config;

struct MemoryConfig {
  double interval_seconds = 5;
  // PSS at most this often (0: at every sample); see the README for its cost.
  double pss_interval_seconds = 0;
  std::string proc_root = "/proc";
  std::vector<ServerTarget> targets;
  bool operator==(const MemoryConfig&) const = default;
};

// The memory section of a loaded configuration (its defaults when absent).
MemoryConfig memory_config(const Config& c);

class MemoryCollector : public IntervalCollector {
 public:
  // `registry` may be null (then only configured targets are sampled).
  MemoryCollector(MemoryConfig config, std::shared_ptr<SharedRegistry> registry, Log log);
  ~MemoryCollector() override;

  void sample() override;
  void collect(const Emit& emit) override;

  struct ServerMemory {
    std::string name;
    std::string server_type;
    uint64_t rss = 0;
    std::optional<uint64_t> pss;  // only when read for every process of the tree
    uint64_t processes = 0;
    std::optional<pid_t> root_pid;  // none when the root is gone
  };
  // The last sample's servers (for tests).
  std::vector<ServerMemory> servers() const;

 private:
  struct PssState {
    std::optional<uint64_t> last_pss;
    std::vector<std::pair<pid_t, uint64_t>> members;  // membership when PSS was read
  };
  ServerMemory measure(const ServerTrees::Server& server, const procfs::ProcessTable& table,
                       bool pss_due);
  std::optional<uint64_t> read_pss(const std::vector<const procfs::ProcStat*>& live,
                                   const procfs::ProcessTable& table,
                                   std::vector<std::pair<pid_t, uint64_t>>& read_members);
  std::optional<procfs::MemInfo> read_host();
  void record(std::vector<ServerMemory> servers, std::optional<procfs::MemInfo> host, double took);
  void count_error(const std::string& reason, const std::string& detail);

  MemoryConfig config_;
  ServerTrees trees_;
  Log log_;
  std::map<std::string, PssState> pss_;  // by server name; sampling thread only
  std::chrono::steady_clock::time_point last_pss_{};
  bool pss_ever_ = false;

  mutable std::mutex mu_;  // guards what collect() reads
  std::vector<ServerMemory> servers_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> peaks_;
  std::optional<procfs::MemInfo> host_;
  uint64_t host_peak_ = 0;
  std::map<std::string, uint64_t> errors_;
  double last_duration_ = 0;
};

}  // namespace gym::exporter
