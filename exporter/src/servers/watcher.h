// The one component that says which processes are which server: built by
// the application (or gym-stat) from the `servers:` section and handed to
// every consumer. Every per-server collector asks it for a view; it resolves
// again unless the last view is recent (within the caller's max_age) and not
// the one the caller already has, so collectors that sample together share
// one resolution (one walk of the trees, one read of the registry) and no
// collector is handed the same view twice.
//
// Its failed reads (a pidfile, a cgroup, an adoption rule over its bound,
// the proc root) are counted here by reason, and logged once while they
// repeat; the servers collector serves the counts.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "host/procfs.h"
#include "servers/config.h"
#include "servers/processes.h"
#include "shared_registry.h"

namespace gym::exporter {

// What every per-server collector reads: the servers and their processes at
// one moment, resolved once for all of them.
struct ServersView {
  explicit ServersView(std::string proc_root) : table(std::move(proc_root)) {}
  procfs::ProcessTable table;                // every member, with every stat field
  std::vector<ServerProcesses::Tree> trees;  // pointers into `table`
  // False: the proc root could not be read at all; then `trees` is empty and
  // no per-process series is served.
  bool proc_ok = true;
  uint64_t unseen_declarers = 0;  // ServerTrees::unseen_declarers
  double boot_seconds = 0;        // the proc root's boot time (ServerTrees::boot_seconds)
  // When it was finished: a view that took long to read (a registry of many
  // dead writers, read-only) still serves the collectors of the same round.
  std::chrono::steady_clock::time_point taken;
};

class ServerWatcher {
 public:
  // The reasons of its errors, all counted from 0.
  static constexpr const char* kReasons[] = {"pidfile", "proc", "cgroup", "adoption"};
  // `registry` may be null (then only configured targets). `log` receives
  // each problem once while it repeats.
  ServerWatcher(ServersConfig config, std::shared_ptr<SharedRegistry> registry,
                std::function<void(const std::string&)> log = {});
  // A view taken no longer than `max_age` ago, other than `seen` (the
  // caller's last).
  std::shared_ptr<const ServersView> view(std::chrono::duration<double> max_age,
                                          const std::shared_ptr<const ServersView>& seen);
  const ServersConfig& config() const { return config_; }
  uint64_t namespace_scans() const;
  // Failed reads so far, by reason (every kReasons entry).
  std::map<std::string, uint64_t> errors() const;

 private:
  void error(const std::string& reason, const std::string& detail);

  const ServersConfig config_;
  std::function<void(const std::string&)> log_;
  mutable std::mutex mu_;
  ServerProcesses processes_;
  procfs::StatFiles stat_files_;                                    // kept between samples
  procfs::TreeFiles tree_files_{procfs::TreeFiles::Detail::kStat};  // (a walk's)
  std::shared_ptr<const ServersView> last_;
  std::map<std::string, uint64_t> errors_;
  std::set<std::string> failing_, failing_now_;  // details logged, to log each once
};

// A shared watcher (the application makes one; tests and tools too).
std::shared_ptr<ServerWatcher> make_watcher(ServersConfig config,
                                            std::shared_ptr<SharedRegistry> registry = nullptr,
                                            std::function<void(const std::string&)> log = {});

}  // namespace gym::exporter
