// Reading procfs files: read_file, and the two descriptor caches that keep
// files open across samples (StatFiles: each process's stat for a whole-host
// scan; TreeFiles: the stat, statm and children of the processes of
// servers' trees), within one budget of descriptors for the process.
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "gym/whole_file.h"
#include "host/procfs.h"

namespace gym::exporter::procfs {

namespace {
ReadStatus status_of(int e) {
  if (e == ESRCH || e == ENOENT) return ReadStatus::kGone;
  if (e == EACCES || e == EPERM) return ReadStatus::kPermission;
  return ReadStatus::kError;
}
}  // namespace

std::optional<uint64_t> read_boot_time(const std::string& proc_root) {
  std::string text;
  if (read_file(proc_root + "/stat", text) != ReadStatus::kOk) return std::nullopt;
  return parse_btime(text);
}

double ticks_per_second() {
  static const double ticks = double(::sysconf(_SC_CLK_TCK));
  return ticks;
}

std::string read_boot_id(const std::string& proc_root) {
  std::string text;
  if (read_file(proc_root + "/sys/kernel/random/boot_id", text) != ReadStatus::kOk) return "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const bool uuid = !text.empty() && text.size() <= 64 &&
                    std::all_of(text.begin(), text.end(),
                                [](char c) { return std::isxdigit(uint8_t(c)) || c == '-'; });
  return uuid ? text : "";
}

double started_unix_seconds(uint64_t boot_time, uint64_t start_ticks) {
  return double(boot_time) + double(start_ticks) / ticks_per_second();
}

ReadStatus read_file(const std::string& path, std::string& out) {
  out.clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return status_of(errno);
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return status_of(e);
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
    if (out.size() > (1 << 20)) break;  // nothing we read is this large
  }
  ::close(fd);
  return ReadStatus::kOk;
}

bool write_file_whole(const std::string& path, std::string_view text, std::string& why, mode_t mode,
                      bool sync) {
  if (write_whole_file(AT_FDCWD, path.c_str(), (path + ".new").c_str(), text, mode, sync))
    return true;
  why = std::strerror(errno);
  return false;
}

namespace {
// Descriptors kept by every StatFiles of the process together (each
// collector that scans has one): the budget is the process's, not each one's.
std::atomic<size_t> g_kept{0};

ssize_t pread_start(int fd, char* buf, size_t size) {
  ssize_t n;
  do {
    n = ::pread(fd, buf, size, 0);
  } while (n < 0 && errno == EINTR);
  return n;
}

// A quarter of the descriptors at most, for all kept ones (the HTTP server
// needs its own), and no more than a large host's processes.
size_t kept_budget() {
  rlimit lim{};
  const rlim_t soft = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 ? lim.rlim_cur : 1024;
  return size_t(std::min<rlim_t>(soft / 4, 16384));
}
}  // namespace

StatFiles::StatFiles() : max_kept_(kept_budget()) {}

void StatFiles::Kept::close() {
  ::close(fd);
  g_kept.fetch_sub(1, std::memory_order_relaxed);
}

ReadStatus StatFiles::read(const std::string& root, pid_t pid, std::string& out) {
  fds_.use_root(root);
  const std::string path = root + "/" + std::to_string(pid) + "/stat";
  char buf[4096];
  if (Kept* kept = fds_.find(pid)) {
    const ssize_t n = pread_start(kept->fd, buf, sizeof buf);
    if (n > 0 && size_t(n) < sizeof buf) {
      kept->read = true;
      out.assign(buf, size_t(n));
      return ReadStatus::kOk;
    }
    // Reaped (a new process may hold the pid now), or longer than a stat
    // line can be: read afresh.
    fds_.drop(pid);
  }
  if (g_kept.load(std::memory_order_relaxed) >= max_kept_) return read_file(path, out);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return status_of(errno);
  const ssize_t n = pread_start(fd, buf, sizeof buf);
  if (n < 0 || size_t(n) >= sizeof buf) {
    const int e = errno;
    ::close(fd);
    return n < 0 ? status_of(e) : read_file(path, out);
  }
  out.assign(buf, size_t(n));
  fds_.keep(pid, {fd, true});
  g_kept.fetch_add(1, std::memory_order_relaxed);
  return ReadStatus::kOk;
}

namespace {
// The whole of a seq_file through `fd` (children lists may be long).
bool pread_all(int fd, std::string& out) {
  out.clear();
  char buf[4096];
  for (;;) {
    ssize_t n;
    do {
      n = ::pread(fd, buf, sizeof buf, off_t(out.size()));
    } while (n < 0 && errno == EINTR);
    if (n < 0) return false;
    if (n == 0) return true;
    out.append(buf, size_t(n));
    // A seq_file read stops short only at its end (a pid is a few bytes):
    // no second read to learn so.
    if (size_t(n) + 64 < sizeof buf) return true;
    if (out.size() > (1 << 22)) return true;  // 4 MiB of pids: more than a pid space
  }
}

// Closes `fd` when it is open, and marks it closed.
void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}
}  // namespace

TreeFiles::TreeFiles(Detail detail) : detail_(detail), kept_budget_(kept_budget()) {}

void TreeFiles::Entry::close() {
  close_fd(value);
  close_fd(children);
  close_fd(task);
  if (kept) g_kept.fetch_sub(3, std::memory_order_relaxed);
  kept = false;
}

std::optional<TreeFiles::Entry> TreeFiles::open(const std::string& root, pid_t pid, Read& why) {
  why = Read::kGone;
  // Gone (or not ours to read), or an open that failed for another reason.
  auto failed = [](int e) {
    return e == ENOENT || e == ESRCH || e == EACCES || e == EPERM ? Read::kGone : Read::kError;
  };
  const std::string dir = root + "/" + std::to_string(pid);
  const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0) {
    why = failed(errno);
    return std::nullopt;
  }
  Entry e;
  int stat_fd = ::openat(d, "stat", O_RDONLY | O_CLOEXEC);
  if (stat_fd < 0) why = failed(errno);
  char buf[4096];
  const ssize_t n = stat_fd < 0 ? -1 : pread_start(stat_fd, buf, sizeof buf);
  std::optional<ProcStat> first;
  if (n > 0 && size_t(n) < sizeof buf) first = parse_stat(std::string_view(buf, size_t(n)));
  if (!first) {
    close_fd(stat_fd);
    ::close(d);
    return std::nullopt;
  }
  e.first = *first;
  if (detail_ == Detail::kStat) {
    e.value = stat_fd;
  } else {
    e.value = ::openat(d, "statm", O_RDONLY | O_CLOEXEC);
  }
  bool missing = e.value < 0 && errno == ENOENT;
  e.task = ::openat(d, "task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  missing = missing || (e.task < 0 && errno == ENOENT);
  const std::string children = "task/" + std::to_string(pid) + "/children";
  e.children = ::openat(d, children.c_str(), O_RDONLY | O_CLOEXEC);
  missing = missing || (e.children < 0 && errno == ENOENT);
  ::close(d);
  if (e.value < 0 || e.task < 0 || e.children < 0) {
    // A process that is still there without these files: a kernel without
    // children files, or not a real proc root. Another failure (no
    // descriptor left) is this walk's only.
    if (pread_start(stat_fd, buf, sizeof buf) > 0)
      why = missing ? Read::kUnsupported : Read::kError;
    if (e.value != stat_fd) close_fd(stat_fd);
    e.close();
    return std::nullopt;
  }
  if (e.value != stat_fd) close_fd(stat_fd);
  return e;
}

TreeFiles::Read TreeFiles::read_entry(pid_t pid, Entry& e, ProcStat& out,
                                      std::vector<pid_t>* children) {
  char buf[4096];
  const ssize_t n = pread_start(e.value, buf, sizeof buf);
  if (n <= 0 || size_t(n) >= sizeof buf) return Read::kGone;  // reaped
  const std::string_view text(buf, size_t(n));
  struct stat task {};
  const uint64_t threads =
      ::fstat(e.task, &task) == 0 && task.st_nlink > 2 ? uint64_t(task.st_nlink - 2) : 1;
  if (detail_ == Detail::kStat) {
    std::optional<ProcStat> st = parse_stat(text);
    if (!st || st->pid != pid) return Read::kGone;
    out = std::move(*st);
  } else {
    const std::optional<Statm> m = parse_statm(text);
    if (!m) return Read::kGone;
    out = e.first;
    out.rss_pages = m->resident_pages;
    out.num_threads = threads;
    if (m->size_pages == 0 && !out.kernel_thread()) out.state = 'Z';  // its memory is gone
    // Not read here: the first sight's would be stale.
    out.utime_ticks = out.stime_ticks = out.cutime_ticks = out.cstime_ticks = 0;
    out.vsize_bytes = 0;
  }
  if (children == nullptr) return Read::kOk;
  children->clear();
  auto add = [&](int fd) {
    if (!pread_all(fd, text_)) return;
    if (std::optional<std::vector<pid_t>> pids = parse_children(text_))
      children->insert(children->end(), pids->begin(), pids->end());
  };
  if (threads <= 1) {
    add(e.children);
    return Read::kOk;
  }
  // Each thread has children of its own (those it forked).
  add(e.children);
  const int listing = ::dup(e.task);
  DIR* d = listing < 0 ? nullptr : ::fdopendir(listing);
  if (d == nullptr) {
    if (listing >= 0) ::close(listing);
    return Read::kOk;
  }
  ::rewinddir(d);
  std::string path;
  while (dirent* t = ::readdir(d)) {
    int64_t tid = 0;
    const auto r = std::from_chars(t->d_name, t->d_name + std::strlen(t->d_name), tid);
    if (r.ec != std::errc() || *r.ptr != '\0' || tid == pid) continue;
    path = std::to_string(tid) + "/children";
    int fd = ::openat(e.task, path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // the thread has ended
    add(fd);
    ::close(fd);
  }
  ::closedir(d);
  return Read::kOk;
}

TreeFiles::Read TreeFiles::read(const std::string& root, pid_t pid, ProcStat& out,
                                std::vector<pid_t>* children) {
  if (files_.use_root(root)) unsupported_ = false;
  if (unsupported_) return Read::kUnsupported;
  if (Entry* kept = files_.find(pid)) {
    if (read_entry(pid, *kept, out, children) == Read::kOk) {
      kept->read = true;
      return Read::kOk;
    }
    files_.drop(pid);  // reaped: a new process may hold the pid now
  }
  Read why = Read::kGone;
  std::optional<Entry> e = open(root, pid, why);
  if (!e) {
    unsupported_ = why == Read::kUnsupported;
    return why;
  }
  const Read r = read_entry(pid, *e, out, children);
  if (r != Read::kOk || g_kept.load(std::memory_order_relaxed) + 3 > kept_budget_) {
    e->close();
    return r;
  }
  e->kept = true;
  g_kept.fetch_add(3, std::memory_order_relaxed);
  files_.keep(pid, *e);
  return Read::kOk;
}

}  // namespace gym::exporter::procfs
