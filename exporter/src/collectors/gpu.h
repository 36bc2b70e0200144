// The gpu collector: GPU memory per server and per GPU, through NVML loaded
// at start (nvml.h; no build-time dependency). Configuration: the `gpu:`
// section (enabled, interval_seconds, library). The servers are the shared
// watcher's (server_tree.h): NVML names processes by their host pids, and a
// server's members are host pids too, so containerised servers are
// attributed like the others.
//
// Per GPU (label gpu: the device's NVML index, bounded by the host's GPUs;
// gym_gpu_info joins it to the UUID): memory total and used, and the used
// memory that no known server's process holds (other processes', and the
// driver's own), so that the servers' memory on a GPU and its unattributed
// remainder add up to its used memory. Per server and GPU: the memory of
// the server's processes there (gym_server_gpu_memory_bytes), for every GPU
// where one of them has a context, and its sampled peak; and their GPU
// utilization where NVML gives it per process
// (gym_server_gpu_utilization_ratio). A device in MIG mode is reported whole
// (its processes over all its instances); gym_gpu_info's mig label says so.
//
// Without NVML (no library, an old driver, no device access) it reports
// gym_exporter_gpu_up 0 and logs one line; a GPU whose processes cannot be
// listed, or whose processes' memory NVML does not give, has no
// per-server or unattributed series (never a wrong number), and the failure
// is counted by reason in gym_exporter_gpu_sample_errors_total.
//
// Thread-safety: collect() may run while the sampling thread samples.
#pragma once

#include <compare>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "collector.h"
#include "nvml.h"
#include "server_tree.h"

namespace gym::exporter {

struct GpuConfig {
  double interval_seconds = 5;
  std::string library = "libnvidia-ml.so.1";
  bool operator==(const GpuConfig&) const = default;
};

struct Config;
// The gpu section of a loaded configuration; nullopt when it is turned off.
std::optional<GpuConfig> gpu_config(const Config& c);

class GpuCollector : public IntervalCollector {
 public:
  GpuCollector(GpuConfig config, std::shared_ptr<ServerWatcher> servers, Log log);
  ~GpuCollector() override;

  void sample() override;
  void collect(const Emit& emit) override;
  // Without NVML nothing changes: no sampling thread.
  bool samples_on_interval() const override { return nvml_.loaded(); }

  struct Gpu {
    unsigned index = 0;
    std::string uuid;
    bool mig = false;
    uint64_t total_bytes = 0;
    uint64_t used_bytes = 0;
    bool attributed = false;  // its processes were listed with their memory
    uint64_t unattributed_bytes = 0;
  };
  struct ServerGpu {
    std::string name, server_type;
    unsigned gpu = 0;
    uint64_t bytes = 0;
    // The share of time a kernel of one of its processes ran on the GPU,
    // summed over its processes (NVML's per-process smUtil, averaged over
    // NVML's samples since the last sample; at most 1); nullopt: the GPU
    // does not report per-process utilization.
    std::optional<double> utilization;
  };
  // The last sample's (for tests).
  bool up() const;
  std::vector<Gpu> gpus() const;
  std::vector<ServerGpu> servers() const;
  // The largest of each server's memory on each GPU at the samples since
  // the exporter first saw it there, while the server is tracked.
  std::vector<ServerGpu> peaks() const;
  std::map<std::string, uint64_t> errors() const;

 private:
  GpuConfig config_;
  std::shared_ptr<ServerWatcher> watcher_;
  std::shared_ptr<const ServersView> view_;
  Log log_;
  Nvml nvml_;
  const double since_;

  mutable std::mutex mu_;  // guards what collect() reads
  bool up_ = false;
  std::vector<Gpu> gpus_;
  std::vector<ServerGpu> servers_;
  struct PeakKey {
    std::string name;
    unsigned gpu = 0;
    auto operator<=>(const PeakKey&) const = default;
  };
  std::map<PeakKey, ServerGpu> peaks_;  // written by the sampling thread under mu_
  std::map<std::string, uint64_t> errors_;
  std::set<std::string> failing_;  // reasons of the last sample (logged when new)
};

}  // namespace gym::exporter
