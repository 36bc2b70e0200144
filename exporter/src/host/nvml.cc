#include "host/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <type_traits>

namespace gym::exporter {

namespace {

// As nvml.h declares them (the driver's ABI).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kNotSupported = 3;
constexpr nvmlReturn_t kNoPermission = 4;
constexpr nvmlReturn_t kInsufficientSize = 7;
constexpr nvmlReturn_t kGpuIsLost = 15;
constexpr unsigned long long kValueNotAvailable = ~0ULL;
constexpr unsigned kMigEnabled = 1;
constexpr unsigned kUuidBytes = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
// nvmlProcessInfo_t of the _v3 functions (nvmlProcessInfo_v2_t's layout).
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
static_assert(sizeof(nvmlProcessInfo_t) == 24);
struct nvmlProcessUtilizationSample_t {
  unsigned int pid;
  unsigned long long timeStamp;                    // microseconds
  unsigned int smUtil, memUtil, encUtil, decUtil;  // percent
};
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32);
constexpr nvmlReturn_t kNotFound = 6;

using ProcessesFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);

// Attempts at listing a device's processes when more keep appearing between
// the size and the read (NVML_ERROR_INSUFFICIENT_SIZE).
constexpr int kListAttempts = 4;

const char* reason_of(nvmlReturn_t r) {
  switch (r) {
    case kGpuIsLost:
      return "gpu_lost";
    case kNoPermission:
      return "no_permission";
    case kInsufficientSize:
      return "insufficient_size";
    default:
      return "error";
  }
}

}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  nvmlReturn_t (*count)(unsigned int*);
  nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*);
  ProcessesFn compute;
  ProcessesFn graphics;                                                  // optional
  nvmlReturn_t (*mig_mode)(nvmlDevice_t, unsigned int*, unsigned int*);  // optional
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlProcessUtilizationSample_t*, unsigned int*,
                              unsigned long long);  // optional
};

Nvml::Nvml(const std::string& library) {
  handle_ = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* why = ::dlerror();
    error_ = "cannot load " + library + ": " + (why ? why : "unknown error");
    return;
  }
  auto* api = new Api{};
  bool missing = false;
  auto bind = [&](auto& fn, const char* name, bool required) {
    void* sym = ::dlsym(handle_, name);
    if (sym == nullptr && required) {
      if (!missing) error_ = library + " has no " + name;
      missing = true;
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(sym);
  };
  bind(api->init, "nvmlInit_v2", true);
  bind(api->shutdown, "nvmlShutdown", true);
  bind(api->count, "nvmlDeviceGetCount_v2", true);
  bind(api->handle, "nvmlDeviceGetHandleByIndex_v2", true);
  bind(api->uuid, "nvmlDeviceGetUUID", true);
  bind(api->memory, "nvmlDeviceGetMemoryInfo", true);
  bind(api->compute, "nvmlDeviceGetComputeRunningProcesses_v3", true);
  bind(api->graphics, "nvmlDeviceGetGraphicsRunningProcesses_v3", false);
  bind(api->mig_mode, "nvmlDeviceGetMigMode", false);
  bind(api->utilization, "nvmlDeviceGetProcessUtilization", false);
  api_ = api;
  if (missing) return;
  if (nvmlReturn_t r = api_->init(); r != kSuccess) {
    error_ = "nvmlInit_v2 failed (NVML error " + std::to_string(r) + ")";
    return;
  }
  init_ok_ = true;
}

Nvml::~Nvml() {
  if (init_ok_) api_->shutdown();
  delete api_;
  if (handle_ != nullptr) ::dlclose(handle_);
}

// The mean smUtil (0..1) of each process over NVML's samples newer than the
// last read of device `index`. `ok`: NVML answered (no new sample counts).
std::map<pid_t, double> Nvml::utilization(void* device, unsigned index, bool& ok) {
  std::map<pid_t, double> out;
  ok = false;
  if (api_->utilization == nullptr) return out;
  if (last_seen_.size() <= index) last_seen_.resize(index + 1, 0);
  auto dev = static_cast<nvmlDevice_t>(device);
  unsigned int n = 0;
  nvmlReturn_t r = api_->utilization(dev, nullptr, &n, last_seen_[index]);
  if (r == kNotFound) {  // nothing ran since the last read
    ok = true;
    return out;
  }
  if (r != kSuccess && r != kInsufficientSize) return out;
  n += 16;  // room for samples taken meanwhile
  samples_.resize(size_t(n) * sizeof(nvmlProcessUtilizationSample_t));
  r = api_->utilization(dev, reinterpret_cast<nvmlProcessUtilizationSample_t*>(samples_.data()), &n,
                        last_seen_[index]);
  if (r == kNotFound) {
    ok = true;
    return out;
  }
  if (r != kSuccess) return out;
  ok = true;
  std::map<pid_t, std::pair<double, unsigned>> sum;  // pid -> (percent summed, samples)
  n = std::min<unsigned int>(n, unsigned(samples_.size() / sizeof(nvmlProcessUtilizationSample_t)));
  for (unsigned int k = 0; k < n; ++k) {
    nvmlProcessUtilizationSample_t u;
    std::memcpy(&u, samples_.data() + size_t(k) * sizeof u, sizeof u);
    last_seen_[index] = std::max(last_seen_[index], u.timeStamp);
    auto& [percent, count] = sum[pid_t(u.pid)];
    percent += std::min(u.smUtil, 100u);
    ++count;
  }
  for (const auto& [pid, s] : sum) out[pid] = s.first / 100.0 / s.second;
  return out;
}

std::map<pid_t, uint64_t> Nvml::bytes_by_pid(const Sample& s) {
  std::map<pid_t, uint64_t> out;
  for (const Device& d : s.devices)
    if (d.processes_ok)
      for (const Process& p : d.processes) out[p.pid] += p.used_bytes.value_or(0);
  return out;
}

Nvml::Sample Nvml::read() {
  Sample out;
  if (!init_ok_) return out;  // error() says why
  unsigned int n = 0;
  if (nvmlReturn_t r = api_->count(&n); r != kSuccess) {
    out.errors.push_back(reason_of(r));
    return out;
  }
  out.up = true;
  for (unsigned int i = 0; i < n; ++i) {
    nvmlDevice_t dev = nullptr;
    if (nvmlReturn_t r = api_->handle(i, &dev); r != kSuccess) {
      out.errors.push_back(reason_of(r));
      continue;
    }
    Device d;
    d.index = i;
    char uuid[kUuidBytes] = {};
    if (nvmlReturn_t r = api_->uuid(dev, uuid, sizeof uuid); r != kSuccess) {
      out.errors.push_back(reason_of(r));
      continue;
    }
    d.uuid.assign(uuid, ::strnlen(uuid, sizeof uuid));
    nvmlMemory_t mem{};
    if (nvmlReturn_t r = api_->memory(dev, &mem); r != kSuccess) {
      out.errors.push_back(reason_of(r));
      continue;
    }
    d.total_bytes = mem.total;
    d.used_bytes = mem.used;
    if (api_->mig_mode != nullptr) {
      unsigned int current = 0, pending = 0;
      if (api_->mig_mode(dev, &current, &pending) == kSuccess) d.mig = current == kMigEnabled;
    }
    // Compute and graphics processes; one that is both is one process, with
    // the same memory in both lists.
    std::map<pid_t, std::optional<uint64_t>> procs;
    for (ProcessesFn list : {api_->compute, api_->graphics}) {
      if (list == nullptr || !d.processes_ok) continue;
      nvmlReturn_t r = kInsufficientSize;
      unsigned int got = 0;
      unsigned int capacity =
          std::max<unsigned int>(64, unsigned(buffer_.size() / sizeof(nvmlProcessInfo_t)));
      for (int attempt = 0; attempt < kListAttempts && r == kInsufficientSize; ++attempt) {
        buffer_.resize(size_t(capacity) * sizeof(nvmlProcessInfo_t));
        got = capacity;
        r = list(dev, &got, reinterpret_cast<nvmlProcessInfo_t*>(buffer_.data()));
        if (r == kInsufficientSize) capacity = std::max(capacity, got) + 16;
      }
      if (r == kNotSupported && list == api_->graphics) continue;  // a compute-only device
      if (r != kSuccess) {
        out.errors.push_back(reason_of(r));
        d.processes_ok = false;
        continue;
      }
      got = std::min(got, capacity);
      for (unsigned int k = 0; k < got; ++k) {
        nvmlProcessInfo_t p;
        std::memcpy(&p, buffer_.data() + size_t(k) * sizeof p, sizeof p);
        std::optional<uint64_t> bytes;
        if (p.usedGpuMemory != kValueNotAvailable) bytes = p.usedGpuMemory;
        auto [it, fresh] = procs.emplace(pid_t(p.pid), bytes);
        if (!fresh && it->second && bytes) it->second = std::max(*it->second, *bytes);
        if (!bytes) it->second.reset();
      }
    }
    const std::map<pid_t, double> util = utilization(dev, i, d.utilization_ok);
    for (const auto& [pid, bytes] : procs) {
      if (!bytes && d.processes_ok) {
        out.errors.push_back("not_available");
        d.processes_ok = false;
      }
      std::optional<double> sm;
      if (auto it = util.find(pid); it != util.end()) sm = it->second;
      d.processes.push_back({pid, bytes, sm});
    }
    out.devices.push_back(std::move(d));
  }
  return out;
}

}  // namespace gym::exporter
