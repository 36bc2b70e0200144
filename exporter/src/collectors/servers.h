// The servers collector: the servers unit's own families. Which servers
// there are and whether each is up (gym_server_info, one per root pid;
// gym_server_up), the exits of their roots by reason
// (gym_server_exits_total), their processes kept by lineage
// (gym_server_escaped_processes), the age of the oldest of its processes
// other than its roots (gym_server_oldest_process_seconds), the declarers out of sight
// (gym_exporter_unseen_server_processes), and the watcher's failed reads
// (gym_exporter_collector_sample_errors_total{collector="servers"}).
// Configuration: the `servers:` section (servers/config.h).
//
// A root that is gone at a sample counts as an exit; as an `oom_kill` when
// its own cgroup's OOM kills grew since the sample before.
//
// Thread-safety: collect() may run while the sampling thread samples.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "host/cgroup.h"
#include "sampled_collector.h"
#include "servers/watcher.h"

namespace gym::exporter {

struct ServersSample;

class ServersCollector : public SampledCollector<ServersSample> {
 public:
  ServersCollector(std::shared_ptr<ServerWatcher> servers, Log log,
                   std::shared_ptr<ServerBoard> board = nullptr);
  ~ServersCollector() override;
  std::string sampling_group() const override { return kPerServerGroup; }
  // Its account with the watcher's failed reads.
  std::optional<SampleStats> sample_stats() const override;

  struct Server {
    std::string name;
    std::string server_type;
    std::optional<pid_t> root_pid;  // the oldest root; none when gone (gym_server_up 0)
    std::vector<pid_t> root_pids;   // every root (one gym_server_info each)
    // Of its processes, the ones that left the tree and are its by lineage.
    uint64_t escaped = 0;
    // The age of its oldest process other than its roots (none: it has none).
    std::optional<double> oldest_process_seconds;
    // Times its root process exited (or was replaced), by reason.
    uint64_t exits = 0, oom_kill_exits = 0;
    double exits_since = 0;  // Unix seconds the exits count from (0: not known)
  };
  // The last sample's servers (for tests).
  std::vector<Server> servers() const;

 private:
  ServersSample take() override;
  void serve(const ServersSample& s, const Emit& emit) const override;
  std::shared_ptr<const ServerFigures> figures(const ServersSample& s) const override;
  // Counts an exit for each root of the last sample that is no root now.
  void track_exits(const ServerProcesses::Tree& tree, Server& out);

  std::shared_ptr<ServerWatcher> watcher_;
  std::shared_ptr<const ServersView> view_;  // the last one sampled
  cgroup::Resolver resolver_;
  using Member = std::pair<pid_t, uint64_t>;  // pid, start ticks
  struct RootTrack {
    std::optional<cgroup::Place> place;  // its own cgroup at the last sample
    std::optional<uint64_t> oom_kills;   // that cgroup's OOM kills then
  };
  struct RootState {
    std::map<Member, RootTrack> roots;  // the last sample's
    uint64_t exits = 0, oom_kill_exits = 0;
    double since = 0;  // when it was first tracked: its exits count from then
  };
  std::map<std::string, RootState> roots_;  // the sampling thread's, by server
};

struct ServersSample {
  double time_seconds = 0;  // Unix seconds
  double boot_seconds = 0;  // the proc root's (ServersView::boot_seconds)
  std::vector<ServersCollector::Server> servers;
  uint64_t unseen = 0;  // declarers out of sight (ServersView::unseen_declarers)
};

// The last sample's (for tests).
inline std::vector<ServersCollector::Server> ServersCollector::servers() const {
  return latest().servers;
}

}  // namespace gym::exporter
