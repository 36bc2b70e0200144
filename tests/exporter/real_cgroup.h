// Real memory and cpu cgroups of this host for tests, and a process that
// fills a memory cgroup until the OOM killer kills it.
#pragma once

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "host/cgroup.h"
#include "host/procfs.h"

namespace gym::exporter {

using namespace std::chrono_literals;

// A real memory cgroup of this host, removed at the end: cgroup v2 when the
// unified hierarchy offers the memory controller, else the v1 memory
// hierarchy. ok() is false (with why()) where the kernel refuses.
class RealMemoryCgroup {
 public:
  explicit RealMemoryCgroup(uint64_t limit) {
    std::string text;
    if (procfs::read_file("/proc/self/mountinfo", text) != procfs::ReadStatus::kOk) {
      why_ = "no /proc/self/mountinfo";
      return;
    }
    const cgroup::Mounts m = cgroup::parse_mountinfo(text);
    std::string controllers;
    const bool v2 =
        !m.v2.empty() &&
        procfs::read_file(m.v2 + "/cgroup.controllers", controllers) == procfs::ReadStatus::kOk &&
        controllers.find("memory") != std::string::npos;
    if (!v2 && m.v1_memory.empty()) {
      why_ = "the memory controller is mounted neither in cgroup v2 nor in v1";
      return;
    }
    if (v2) std::ofstream(m.v2 + "/cgroup.subtree_control") << "+memory";
    dir_ = (v2 ? m.v2 : m.v1_memory) + "/gym-test-" + std::to_string(::getpid());
    if (::mkdir(dir_.c_str(), 0755) != 0) {
      why_ = "cannot create " + dir_ + ": " + std::strerror(errno);
      dir_.clear();
      return;
    }
    const std::string file = dir_ + (v2 ? "/memory.max" : "/memory.limit_in_bytes");
    std::ofstream(file) << limit;
    std::string got;
    if (procfs::read_file(file, got) != procfs::ReadStatus::kOk || std::stoull(got) != limit) {
      why_ = "cannot set " + file;
      return;
    }
    version_ = v2 ? 2 : 1;
  }
  ~RealMemoryCgroup() { remove(); }
  // Its processes are gone; the kernel frees it when their last references
  // go, which can take a moment.
  bool remove() {
    for (int i = 0; !dir_.empty() && i < 500; ++i) {
      if (::rmdir(dir_.c_str()) == 0) dir_.clear();
      if (dir_.empty()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return dir_.empty();
  }
  bool ok() const { return version_ != 0; }
  const std::string& why() const { return why_; }
  int version() const { return version_; }
  // In the calling (child) process: moves it into the cgroup.
  bool join() const {
    std::ofstream procs(dir_ + "/cgroup.procs");
    procs << ::getpid() << std::flush;
    return bool(procs);
  }
  uint64_t oom_kills() const {
    std::string text;
    const std::string file = dir_ + (version_ == 2 ? "/memory.events" : "/memory.oom_control");
    if (procfs::read_file(file, text) != procfs::ReadStatus::kOk) return 0;
    return cgroup::find_count(text, "oom_kill").value_or(0);
  }

 private:
  std::string dir_, why_;
  int version_ = 0;
};

// Touches memory a megabyte at a time until the OOM killer kills it.
[[noreturn]] inline void hog() {
  for (;;) {
    void* p = ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) continue;
    volatile char* c = static_cast<volatile char*>(p);
    for (size_t i = 0; i < (1 << 20); i += 4096) c[i] = 1;
  }
}

// A real cpu cgroup of this host with a quota, removed at the end: cgroup v2
// when the unified hierarchy offers the cpu controller, else v1's.
class RealCpuCgroup {
 public:
  RealCpuCgroup(uint64_t quota_us, uint64_t period_us) {
    std::string text;
    if (procfs::read_file("/proc/self/mountinfo", text) != procfs::ReadStatus::kOk) return;
    const cgroup::Mounts m = cgroup::parse_mountinfo(text);
    std::string controllers;
    const bool v2 =
        !m.v2.empty() &&
        procfs::read_file(m.v2 + "/cgroup.controllers", controllers) == procfs::ReadStatus::kOk &&
        controllers.find("cpu") != std::string::npos;
    if (!v2 && m.v1_cpu.empty()) {
      why_ = "the cpu controller is mounted neither in cgroup v2 nor in v1";
      return;
    }
    if (v2) std::ofstream(m.v2 + "/cgroup.subtree_control") << "+cpu";
    dir_ = (v2 ? m.v2 : m.v1_cpu) + "/gym-test-cpu-" + std::to_string(::getpid());
    if (::mkdir(dir_.c_str(), 0755) != 0) {
      why_ = "cannot create " + dir_ + ": " + std::strerror(errno);
      dir_.clear();
      return;
    }
    if (v2) {
      std::ofstream(dir_ + "/cpu.max") << quota_us << " " << period_us;
    } else {
      std::ofstream(dir_ + "/cpu.cfs_period_us") << period_us;
      std::ofstream(dir_ + "/cpu.cfs_quota_us") << quota_us;
    }
    std::string got;
    const std::string file = dir_ + (v2 ? "/cpu.max" : "/cpu.cfs_quota_us");
    if (procfs::read_file(file, got) != procfs::ReadStatus::kOk || std::stoull(got) != quota_us) {
      why_ = "cannot set " + file;
      return;
    }
    version_ = v2 ? 2 : 1;
  }
  ~RealCpuCgroup() {
    for (int i = 0; !dir_.empty() && i < 500 && ::rmdir(dir_.c_str()) != 0; ++i)
      std::this_thread::sleep_for(10ms);
  }
  bool ok() const { return version_ != 0; }
  const std::string& why() const { return why_; }
  bool join() const {
    std::ofstream procs(dir_ + "/cgroup.procs");
    procs << ::getpid() << std::flush;
    return bool(procs);
  }
  // The kernel's own count of time throttled, in microseconds.
  uint64_t throttled_us() const {
    std::string text;
    if (procfs::read_file(dir_ + "/cpu.stat", text) != procfs::ReadStatus::kOk) return 0;
    if (version_ == 2) return cgroup::find_count(text, "throttled_usec").value_or(0);
    return cgroup::find_count(text, "throttled_time").value_or(0) / 1000;
  }

 private:
  std::string dir_, why_ = "no /proc/self/mountinfo";
  int version_ = 0;
};

}  // namespace gym::exporter
