// Helpers shared by the test suites: a private registry directory, child
// processes, and lookups in a reader snapshot.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gym/registry_reader.h"

namespace gym::testing {

// Threads of process `pid` now (0 when it is gone).
inline int threads_of(pid_t pid) {
  int n = 0;
  if (DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str())) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

// How the suite's own registries in /dev/shm are named: scripts/test.sh
// gives each run a prefix of its own (GYM_TEST_SHM_PREFIX) and checks that
// nothing with it is left; "gym-test-" otherwise.
inline std::string shm_prefix() {
  const char* p = std::getenv("GYM_TEST_SHM_PREFIX");
  return p != nullptr && *p != '\0' && std::strchr(p, '/') == nullptr ? p : "gym-test-";
}

// A fresh directory under /dev/shm (where the registry lives by default),
// removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/dev/shm/" + shm_prefix() + "XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string sub(std::string_view name) const { return path_ + "/" + std::string(name); }
  // Files in the directory (not starting with '.').
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      std::string name = e.path().filename().string();
      if (!name.starts_with(".")) out.push_back(name);
    }
    return out;
  }

 private:
  std::string path_;
};

// A real tmpfs of `size` (e.g. "1m") mounted on a fresh directory, like a
// container's small /dev/shm; needs root (ok() is false otherwise).
class TmpfsMount {
 public:
  explicit TmpfsMount(const std::string& size) {
    std::string tmpl = "/tmp/gym-tmpfs-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
    const std::string opts = "size=" + size + ",mode=0700";
    ok_ = ::mount("tmpfs", path_.c_str(), "tmpfs", 0, opts.c_str()) == 0;
  }
  ~TmpfsMount() {
    if (ok_) ::umount2(path_.c_str(), MNT_DETACH);
    ::rmdir(path_.c_str());
  }
  bool ok() const { return ok_; }
  const std::string& path() const { return path_; }
  // Fills the file system with `name` until no page is left but `leave`
  // bytes (then removes that much again).
  void fill(const std::string& name = "filler", size_t leave = 0) const {
    const std::string file = path_ + "/" + name;
    int fd = ::open(file.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
    if (fd < 0) std::abort();
    std::vector<char> chunk(4096, 'x');
    off_t size = 0;
    while (::write(fd, chunk.data(), chunk.size()) > 0) size += off_t(chunk.size());
    if (leave > 0 && ::ftruncate(fd, size > off_t(leave) ? size - off_t(leave) : 0) != 0)
      std::abort();
    ::close(fd);
  }

 private:
  std::string path_;
  bool ok_ = false;
};

// Runs `body` in a child process that exits with its return value.
inline pid_t spawn(const std::function<int()>& body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 1;
    try {
      rc = body();
    } catch (...) {
      rc = 99;
    }
    ::_exit(rc);
  }
  return pid;
}

// Waits for a child and returns its exit status (or 128 + signal).
inline int wait_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// A pipe a parent uses to hold children at a point and release them.
class Gate {
 public:
  Gate() {
    if (::pipe2(fds_, O_CLOEXEC) != 0) std::abort();  // not into exec'd programs
  }
  ~Gate() {
    close_read();
    close_write();
  }
  // In the child: block until the parent opens the gate.
  void wait() {
    close_write();
    char c;
    while (::read(fds_[0], &c, 1) < 0) {
    }
  }
  // In the parent: release every child waiting.
  void open() { close_write(); }
  void close_read() {
    if (fds_[0] >= 0) ::close(fds_[0]);
    fds_[0] = -1;
  }
  void close_write() {
    if (fds_[1] >= 0) ::close(fds_[1]);
    fds_[1] = -1;
  }

 private:
  int fds_[2] = {-1, -1};
};

// Signals from children that they reached a point.
class Ready {
 public:
  Ready() {
    if (::pipe2(fds_, O_CLOEXEC) != 0) std::abort();  // not into exec'd programs
  }
  ~Ready() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  void signal() {
    char c = 'r';
    if (::write(fds_[1], &c, 1) != 1) std::abort();
  }
  void wait(int n) {
    for (int i = 0; i < n; ++i) {
      char c;
      while (::read(fds_[0], &c, 1) != 1) {
      }
    }
  }

 private:
  int fds_[2];
};

// Makes the kernel give `pid` (of a process that has exited and been reaped)
// to a new child, which waits on `gate`: through
// /proc/sys/kernel/ns_last_pid, which needs root. Returns the child's pid, or
// -1 when pid allocation cannot be steered here.
inline pid_t spawn_with_pid(pid_t pid, Gate& gate) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    FILE* last = std::fopen("/proc/sys/kernel/ns_last_pid", "w");
    if (last == nullptr) return -1;
    const bool written = std::fprintf(last, "%d", pid - 1) > 0;
    if (std::fclose(last) != 0 || !written) return -1;
    pid_t p = spawn([&] {
      gate.wait();
      return 0;
    });
    if (p == pid) return p;
    ::kill(p, SIGKILL);
    wait_exit(p);
  }
  return -1;
}

// The series of `family` with exactly `labels` (sorted by name), or nullptr.
inline const SeriesSample* find_series(
    const Snapshot& snap, std::string_view family,
    const std::vector<std::pair<std::string, std::string>>& labels = {}) {
  for (const auto& s : snap.series)
    if (s.info->family == family && s.info->labels == labels) return &s;
  return nullptr;
}

// A limit's free slots as the exporter reports them: the available gauge
// (which a format 3 writer keeps at the limit) minus the holds in progress
// (the holds' ages record); -1 when the limit has no available series.
inline int64_t free_slots(const Snapshot& snap,
                          const std::vector<std::pair<std::string, std::string>>& labels) {
  const SeriesSample* a = find_series(snap, "gym_concurrency_available", labels);
  if (a == nullptr) return -1;
  const SeriesSample* h = find_series(snap, "gym_concurrency_oldest_hold_seconds", labels);
  return a->gauge - (h == nullptr ? 0 : h->gauge);
}

inline size_t count_family(const Snapshot& snap, std::string_view family) {
  size_t n = 0;
  for (const auto& s : snap.series) n += s.info->family == family;
  return n;
}

}  // namespace gym::testing
