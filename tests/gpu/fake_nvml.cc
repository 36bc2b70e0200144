// A fake libnvidia-ml.so.1 for the gpu collector's tests: the NVML symbols
// gym-exporter calls, answering from a fixture file that the test writes
// ($FAKE_NVML_FIXTURE, read again at every nvmlDeviceGetCount_v2). Lines:
//   device <uuid> <total bytes> <used bytes> [mig]
//   process <pid> <bytes | na> [graphics]    a process on the last device
//   fail <function> <NVML error code>        that function returns the code
//                                            (for the last device, or for
//                                            all calls before any device)
//   util <pid> <sm percent> <timestamp us>   a utilization sample of the last
//                                            device (returned when newer than
//                                            the caller's last seen)
//   race <n>                                 the last device's next n process
//                                            reads find one process more than
//                                            the buffer they were sized for
// Built without the _v3 symbols (FAKE_NVML_OLD), it is a driver too old.
// Every entry point holds one lock, as NVML's own calls are thread-safe.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Proc {
  unsigned pid;
  unsigned long long bytes;
  bool graphics;
};
struct Util {
  unsigned pid;
  unsigned long long ts;
  unsigned sm;
};
struct Dev {
  std::string uuid;
  unsigned long long total = 0, used = 0;
  bool mig = false;
  std::vector<Proc> procs;
  std::vector<Util> utils;
  std::map<std::string, int> fail;
  int race = 0;
};
struct Fixture {
  std::map<std::string, int> fail;  // before any device
  std::vector<Dev> devs;
};

Fixture g;
// NVML is thread-safe: the exporter's sampler and its snapshot API call it
// from two threads.
std::recursive_mutex mu;

void load() {
  Fixture f;
  const char* path = std::getenv("FAKE_NVML_FIXTURE");
  std::ifstream in(path ? path : "");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream w(line);
    std::string what;
    w >> what;
    if (what == "device") {
      Dev d;
      std::string mig;
      w >> d.uuid >> d.total >> d.used >> mig;
      d.mig = mig == "mig";
      f.devs.push_back(d);
    } else if (what == "process" && !f.devs.empty()) {
      Proc p{};
      std::string bytes, kind;
      w >> p.pid >> bytes >> kind;
      p.bytes = bytes == "na" ? ~0ULL : std::strtoull(bytes.c_str(), nullptr, 10);
      p.graphics = kind == "graphics";
      f.devs.back().procs.push_back(p);
    } else if (what == "fail") {
      std::string fn;
      int code = 0;
      w >> fn >> code;
      (f.devs.empty() ? f.fail : f.devs.back().fail)[fn] = code;
    } else if (what == "util" && !f.devs.empty()) {
      Util u{};
      w >> u.pid >> u.sm >> u.ts;
      f.devs.back().utils.push_back(u);
    } else if (what == "race" && !f.devs.empty()) {
      w >> f.devs.back().race;
    }
  }
  g = f;
}

int global_fail(const char* fn) {
  auto it = g.fail.find(fn);
  return it == g.fail.end() ? 0 : it->second;
}
Dev* dev_of(void* handle) {
  const size_t i = reinterpret_cast<size_t>(handle) - 1;
  return i < g.devs.size() ? &g.devs[i] : nullptr;
}
int dev_fail(Dev* d, const char* fn) {
  auto it = d->fail.find(fn);
  return it == d->fail.end() ? 0 : it->second;
}

#ifndef FAKE_NVML_OLD
struct Info {
  unsigned pid;
  unsigned long long bytes;
  unsigned gi, ci;
};

int processes(void* handle, unsigned* count, Info* out, bool graphics, const char* fn) {
  Dev* d = dev_of(handle);
  if (d == nullptr || count == nullptr) return 2;  // INVALID_ARGUMENT
  if (int r = dev_fail(d, fn)) return r;
  std::vector<Proc> mine;
  for (const Proc& p : d->procs)
    if (p.graphics == graphics) mine.push_back(p);
  unsigned need = unsigned(mine.size());
  if (!graphics && d->race > 0 && *count >= need) {
    --d->race;  // one more appeared since the caller sized its buffer
    *count = *count + 1;
    return 7;
  }
  if (out == nullptr || *count < need) {
    *count = need;
    return 7;  // INSUFFICIENT_SIZE
  }
  for (unsigned i = 0; i < need; ++i) out[i] = {mine[i].pid, mine[i].bytes, 0, 0};
  *count = need;
  return 0;
}
#endif

}  // namespace

extern "C" {

int nvmlInit_v2() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  load();
  return global_fail("nvmlInit_v2");
}
int nvmlShutdown() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  return 0;
}
int nvmlDeviceGetCount_v2(unsigned* n) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  load();
  if (int r = global_fail("nvmlDeviceGetCount_v2")) return r;
  *n = unsigned(g.devs.size());
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** handle) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (i >= g.devs.size()) return 2;
  if (int r = dev_fail(&g.devs[i], "nvmlDeviceGetHandleByIndex_v2")) return r;
  *handle = reinterpret_cast<void*>(size_t(i) + 1);
  return 0;
}
int nvmlDeviceGetUUID(void* handle, char* uuid, unsigned length) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  Dev* d = dev_of(handle);
  if (d == nullptr) return 2;
  if (int r = dev_fail(d, "nvmlDeviceGetUUID")) return r;
  if (d->uuid.size() + 1 > length) return 7;
  std::memcpy(uuid, d->uuid.c_str(), d->uuid.size() + 1);
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* handle, unsigned long long* memory) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  Dev* d = dev_of(handle);
  if (d == nullptr) return 2;
  if (int r = dev_fail(d, "nvmlDeviceGetMemoryInfo")) return r;
  memory[0] = d->total;
  memory[1] = d->total - d->used;
  memory[2] = d->used;
  return 0;
}
struct UtilSample {
  unsigned pid;
  unsigned long long ts;
  unsigned sm, mem, enc, dec;
};
int nvmlDeviceGetProcessUtilization(void* handle, UtilSample* out, unsigned* count,
                                    unsigned long long last_seen) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  Dev* d = dev_of(handle);
  if (d == nullptr || count == nullptr) return 2;
  if (int r = dev_fail(d, "nvmlDeviceGetProcessUtilization")) return r;
  std::vector<Util> newer;
  for (const Util& u : d->utils)
    if (u.ts > last_seen) newer.push_back(u);
  if (newer.empty()) return 6;  // NOT_FOUND: no sample since
  if (out == nullptr || *count < newer.size()) {
    *count = unsigned(newer.size());
    return 7;
  }
  for (size_t i = 0; i < newer.size(); ++i)
    out[i] = {newer[i].pid, newer[i].ts, newer[i].sm, 0, 0, 0};
  *count = unsigned(newer.size());
  return 0;
}
int nvmlDeviceGetMigMode(void* handle, unsigned* current, unsigned* pending) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  Dev* d = dev_of(handle);
  if (d == nullptr) return 2;
  *current = *pending = d->mig ? 1 : 0;
  return 0;
}
#ifndef FAKE_NVML_OLD
int nvmlDeviceGetComputeRunningProcesses_v3(void* handle, unsigned* count, Info* out) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  return processes(handle, count, out, false, "nvmlDeviceGetComputeRunningProcesses_v3");
}
int nvmlDeviceGetGraphicsRunningProcesses_v3(void* handle, unsigned* count, Info* out) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  return processes(handle, count, out, true, "nvmlDeviceGetGraphicsRunningProcesses_v3");
}
#endif

}  // extern "C"
