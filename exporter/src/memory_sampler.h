// MemorySampler: the memory of every Gym server's whole process tree, and of
// the host, sampled from procfs on an interval (the gym_server_memory_*,
// gym_server_processes, gym_server_info and gym_host_memory_* families).
//
// Targets are the configured ones (memory.targets) plus every live process
// that declared a server identity through the library (found in the
// registry). A sample reads the process table in one pass, then RSS from
// each member's stat and, when due, PSS from its smaps_rollup.
//
// Orphans: when a middle process of a tree exits, the kernel hands its
// children to init or to the nearest subreaper, so they leave the tree; run
// servers under a subreaper (PR_SET_CHILD_SUBREAPER) to keep them counted.
//
// Thread-safety: collect() may run while the sampling thread samples.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "config.h"
#include "exposition.h"
#include "procfs.h"

namespace gym::exporter {

class MemorySampler : public Collector {
 public:
  // `registry` may be null (then only configured targets are sampled).
  MemorySampler(MemoryConfig config, std::shared_ptr<SharedRegistry> registry,
                std::function<void(const std::string&)> log);
  ~MemorySampler() override;

  // One sample now, then one every interval_seconds on a thread of its own.
  void start();
  // Stops the thread after one final sample.
  void stop();
  // Takes one sample (what start() and the thread do).
  void sample_once();
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
  struct Target {
    MemoryTarget config;
    std::optional<std::regex> cmdline;
  };
  struct TargetState {
    std::optional<uint64_t> root_start;  // pid targets: the process first seen
    std::optional<uint64_t> last_pss;
    std::vector<std::pair<pid_t, uint64_t>> pss_members;  // membership when PSS was read
  };
  const procfs::ProcStat* resolve(const Target& t, const procfs::ProcessTable& table,
                                  TargetState& state);
  ServerMemory measure(const std::string& name, const std::string& type, bool want_pss,
                       const procfs::ProcStat* root, const procfs::ProcessTable& table,
                       bool pss_due, TargetState& state);
  void count_error(const std::string& reason, const std::string& detail);

  MemoryConfig config_;
  std::vector<Target> targets_;
  std::shared_ptr<SharedRegistry> registry_;
  std::function<void(const std::string&)> log_;
  std::map<std::string, TargetState> states_;  // by server name; sampling thread only
  std::chrono::steady_clock::time_point last_pss_{};
  bool pss_ever_ = false;

  mutable std::mutex mu_;  // guards what collect() reads
  std::vector<ServerMemory> servers_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> peaks_;
  std::optional<procfs::MemInfo> host_;
  uint64_t host_peak_ = 0;
  std::map<std::string, uint64_t> errors_;
  double last_duration_ = 0;

  std::mutex run_mu_;
  std::condition_variable run_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace gym::exporter
