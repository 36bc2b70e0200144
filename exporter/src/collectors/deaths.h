// The deaths collector: every exit of every process of a server, by reason
// (gym_server_process_exits_total), from the kernel's process events
// (host/proc_events.h) and, for OOM kills, its log (host/kmsg.h, read
// before the events of each wakeup: the kill is logged before the victim
// dies) on a reader thread of its own, the sampled trees
// resynchronising who is whose at each sample (servers/deaths.h). Which
// source runs (gym_exporter_process_events_source), and what the kernel
// dropped or we could not parse (gym_exporter_process_events_lost_total,
// gym_exporter_process_events_malformed_total). Where the connector cannot
// be had (no root or CAP_NET_ADMIN), the source is `sampling` and no
// process exit series is served: only the roots' exits
// (gym_server_exits_total), which sampling can see.
//
// Thread-safety: collect() may run while the sampling and reader threads run.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "host/kmsg.h"
#include "host/proc_events.h"
#include "sampled_collector.h"
#include "servers/deaths.h"
#include "servers/watcher.h"

namespace gym::exporter {

// The deaths collector's counts file, in the registry directory.
inline constexpr const char* kDeathsFile = ".exporter-deaths";

// A sample says which source runs; the counts are read from the log at
// each scrape (as /api/v1/deaths reads the records), so none waits for one.
struct DeathsSample {
  double since = 0;  // Unix seconds the counts count from
  bool connected = false;
  uint64_t lost = 0, malformed = 0;
};

class DeathsCollector : public SampledCollector<DeathsSample> {
 public:
  // `deaths` may be null: one of its own (the app's outlives its
  // collectors); it keeps `limits` from now on. Every `interval_seconds` a
  // sample resynchronises who is whose.
  DeathsCollector(std::shared_ptr<ServerWatcher> servers, std::shared_ptr<DeathLog> deaths, Log log,
                  double interval_seconds = 5, DeathLimits limits = {}, bool connect = true);
  ~DeathsCollector() override;
  std::string sampling_group() const override { return kPerServerGroup; }
  const std::shared_ptr<DeathLog>& deaths() const { return deaths_; }
  // Keeps the counts in `path` (DeathLog::encode), written when they change
  // while `may_write` says so, and goes on from the file's counts now.
  void keep_counts(std::string path, std::function<bool()> may_write);
  bool connected() const { return connector_ != nullptr; }

 private:
  DeathsSample take() override;
  void serve(const DeathsSample& s, const Emit& emit) const override;
  void read_events();
  void save_counts();

  std::shared_ptr<ServerWatcher> watcher_;
  std::shared_ptr<DeathLog> deaths_;
  std::shared_ptr<const ServersView> view_;
  std::unique_ptr<procev::ProcConnector> connector_;
  std::unique_ptr<kmsg::KmsgReader> kmsg_;  // OOM kills; null: none told apart
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> lost_{0}, malformed_{0};
  std::string counts_file_;  // empty: not kept
  std::function<bool()> may_write_;
  uint64_t saved_version_ = 0;  // the sampling thread's
  std::thread reader_;
};

}  // namespace gym::exporter
