// The gpu collector: GPU memory per server and per GPU, through NVML loaded
// at start (nvml.h; no build-time dependency). Configuration: the `gpu:`
// section (enabled, interval_seconds, library). The servers are the shared
// watcher's (servers/watcher.h): NVML names processes by their host pids, and a
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

#include "host/nvml.h"
#include "sampled_collector.h"
#include "servers/watcher.h"

namespace gym::exporter {

struct GpuConfig {
  double interval_seconds = 5;
  std::string library = "libnvidia-ml.so.1";
};

struct GpuSample;

class GpuCollector : public SampledCollector<GpuSample> {
 public:
  // Without `servers` nothing is attributed to servers (GPUs only).
  GpuCollector(GpuConfig config, Log log, std::shared_ptr<ServerWatcher> servers = nullptr,
               std::shared_ptr<ServerBoard> board = nullptr);
  ~GpuCollector() override;
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
  std::map<std::string, uint64_t> errors() const { return error_counts(); }

 private:
  GpuSample take() override;
  void serve(const GpuSample& s, const Emit& emit) const override;
  std::shared_ptr<const ServerFigures> figures(const GpuSample& s) const override;
  // The memory (and utilization) of each server's processes on each device.
  std::vector<ServerGpu> attribute(const Nvml::Sample& s, const ServersView* view,
                                   std::vector<Gpu>& gpus) const;

  GpuConfig config_;
  std::shared_ptr<ServerWatcher> watcher_;
  std::shared_ptr<const ServersView> view_;
  Nvml nvml_;
  struct PeakKey {
    std::string name;
    unsigned gpu = 0;
    auto operator<=>(const PeakKey&) const = default;
  };
  std::map<PeakKey, ServerGpu> peaks_;  // the sampling thread's
};

struct GpuSample {
  double time_seconds = 0;  // Unix seconds
  bool up = false;
  std::vector<GpuCollector::Gpu> gpus;
  std::vector<GpuCollector::ServerGpu> servers;
  std::vector<GpuCollector::ServerGpu> peaks;
  // Servers whose memory on every GPU is known (the view's, when every GPU
  // was attributed): 0 on the board when none of theirs is on a GPU.
  std::vector<std::pair<std::string, std::string>> attributed;  // name, type
};

// The last sample's (for tests).
inline bool GpuCollector::up() const {
  return latest().up;
}
inline std::vector<GpuCollector::Gpu> GpuCollector::gpus() const {
  return latest().gpus;
}
inline std::vector<GpuCollector::ServerGpu> GpuCollector::servers() const {
  return latest().servers;
}
inline std::vector<GpuCollector::ServerGpu> GpuCollector::peaks() const {
  return latest().peaks;
}

}  // namespace gym::exporter
