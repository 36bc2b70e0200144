// NVML, the NVIDIA Management Library, loaded at run time: dlopen of
// libnvidia-ml.so.1 (or a configured path), no build-time dependency (Debian
// main has neither its headers nor the library). The few types and functions
// used are declared here as the driver's nvml.h declares them; processes are
// read with the _v3 functions, whose element (pid, memory, GPU and compute
// instance) is the one struct all drivers since R510 share.
//
// Nvml::read() returns every device with its memory and the processes on it
// (compute and graphics, each pid once), or what went wrong, by reason
// (a library that is missing, lacks a symbol or fails nvmlInit_v2 is not
// loaded(), and error() says why):
//   gpu_lost           a device fell off the bus (NVML_ERROR_GPU_IS_LOST)
//   no_permission      NVML refused a query (NVML_ERROR_NO_PERMISSION)
//   insufficient_size  processes kept appearing between the size query and
//                      the read, in every attempt
//   not_available      a process's memory was NVML_VALUE_NOT_AVAILABLE
//   error              any other failure
//
// Thread-safety: one Nvml is used by one thread at a time.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gym::exporter {

class Nvml {
 public:
  struct Process {
    pid_t pid = 0;                       // as the host sees it
    std::optional<uint64_t> used_bytes;  // nullopt: NVML did not say
    // The mean share of time a kernel of it ran on the device (NVML's smUtil,
    // 0..1) over NVML's samples since the last read; nullopt: no sample.
    std::optional<double> sm_utilization;
  };
  struct Device {
    unsigned index = 0;
    std::string uuid;
    bool mig = false;  // in MIG mode (its memory and processes are the whole device's)
    uint64_t total_bytes = 0;
    uint64_t used_bytes = 0;
    // Every process on it; `processes_ok` false: they could not be listed
    // (the reason is in Sample::errors), so nothing on it can be attributed.
    std::vector<Process> processes;
    bool processes_ok = true;
    // Whether NVML gave per-process utilization (not every device does).
    bool utilization_ok = false;
  };
  struct Sample {
    bool up = false;  // NVML was loaded and initialized, and listed devices
    std::vector<Device> devices;
    std::vector<std::string> errors;  // reasons (above), one per failure
  };

  // Loads `library` (a file name, searched as dlopen does, or a path) and
  // initializes NVML. Never throws; a failure shows in error() and in every
  // read().
  explicit Nvml(const std::string& library);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool loaded() const { return init_ok_; }
  // GPU memory by host pid, summed over the GPUs of `s` whose processes were
  // read whole (Device::processes_ok).
  static std::map<pid_t, uint64_t> bytes_by_pid(const Sample& s);
  // Whether the library itself was found (false: no NVIDIA driver here).
  bool found() const { return handle_ != nullptr; }
  // Why it is not loaded (empty when it is).
  const std::string& error() const { return error_; }
  Sample read();

 private:
  struct Api;
  std::map<pid_t, double> utilization(void* device, unsigned index, bool& ok);
  void* handle_ = nullptr;
  Api* api_ = nullptr;
  bool init_ok_ = false;
  std::string error_;
  std::vector<unsigned char> buffer_;          // process entries, reused
  std::vector<unsigned char> samples_;         // utilization samples, reused
  std::vector<unsigned long long> last_seen_;  // by device: the newest sample read
};

}  // namespace gym::exporter
