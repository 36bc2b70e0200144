#include "procfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>

#include "gym/proc_stat.h"

namespace gym::exporter::procfs {

namespace {

bool to_u64(std::string_view s, uint64_t& out) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool to_i64(std::string_view s, int64_t& out) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// "Key:   123 kB" -> 123 * 1024 (or 123 without a unit).
std::optional<uint64_t> kb_value(std::string_view rest) {
  size_t i = 0;
  while (i < rest.size() && (rest[i] == ' ' || rest[i] == '\t')) ++i;
  size_t j = i;
  while (j < rest.size() && rest[j] >= '0' && rest[j] <= '9') ++j;
  uint64_t v = 0;
  if (j == i || !to_u64(rest.substr(i, j - i), v)) return std::nullopt;
  std::string_view unit = rest.substr(j);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  if (unit.starts_with("kB")) v *= 1024;
  return v;
}

// Calls f(line) for each line until it returns false.
template <class F>
void for_each_line(std::string_view text, F&& f) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    if (!f(text.substr(pos, end - pos))) return;
    pos = end + 1;
  }
}

// Calls f(key, bytes) for each "Key: N kB" line (meminfo, smaps_rollup).
template <class F>
void for_each_kb_field(std::string_view text, F&& f) {
  for_each_line(text, [&](std::string_view line) {
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return true;
    if (const std::optional<uint64_t> v = kb_value(line.substr(colon + 1)))
      f(line.substr(0, colon), *v);
    return true;
  });
}

}  // namespace

std::optional<ProcStat> parse_stat(std::string_view text) {
  const std::optional<proc_stat::Split> split = proc_stat::split(text);
  if (!split) return std::nullopt;
  ProcStat st;
  int64_t pid = 0;
  // pid_t is 32 bits: a larger number is not a pid (found by fuzzing).
  constexpr int64_t kMaxPid = std::numeric_limits<pid_t>::max();
  if (!to_i64(split->pid, pid) || pid <= 0 || pid > kMaxPid) return std::nullopt;
  st.pid = pid_t(pid);
  st.comm = std::string(split->comm);
  // Fields 3 .. 24, by number.
  std::string_view f[25];
  int seen = 0;
  proc_stat::for_each_field(split->rest, [&](int n, std::string_view v) {
    f[n] = v;
    seen = n;
    return n < 24;
  });
  if (seen < 24 || f[3].size() != 1) return std::nullopt;
  st.state = f[3][0];
  int64_t ppid = 0;
  if (!to_i64(f[4], ppid) || ppid < 0 || ppid > kMaxPid || !to_u64(f[9], st.flags) ||
      !to_u64(f[14], st.utime_ticks) || !to_u64(f[15], st.stime_ticks) ||
      !to_u64(f[22], st.start_ticks) || !to_u64(f[23], st.vsize_bytes))
    return std::nullopt;
  // rss may be negative in odd kernels' accounting: treat as 0.
  int64_t rss_signed = 0;
  if (!to_u64(f[24], st.rss_pages)) {
    if (!to_i64(f[24], rss_signed)) return std::nullopt;
    st.rss_pages = 0;
  }
  // Reaped children's times (signed in the kernel's format) and threads:
  // absent or negative in odd input reads as 0.
  int64_t v = 0;
  st.cutime_ticks = to_i64(f[16], v) && v > 0 ? uint64_t(v) : 0;
  st.cstime_ticks = to_i64(f[17], v) && v > 0 ? uint64_t(v) : 0;
  st.num_threads = to_i64(f[20], v) && v > 0 ? uint64_t(v) : 0;
  st.ppid = pid_t(ppid);
  return st;
}

std::optional<uint64_t> parse_btime(std::string_view text) {
  std::optional<uint64_t> out;
  for_each_line(text, [&](std::string_view line) {
    if (!line.starts_with("btime ")) return true;
    uint64_t v = 0;
    std::string_view n = line.substr(6);
    while (!n.empty() && n.front() == ' ') n.remove_prefix(1);
    if (to_u64(n, v)) out = v;
    return false;
  });
  return out;
}

MemInfo parse_meminfo(std::string_view text) {
  MemInfo m;
  std::optional<uint64_t> free, buffers, cached;
  for_each_kb_field(text, [&](std::string_view key, uint64_t v) {
    if (key == "MemTotal")
      m.total = v;
    else if (key == "MemAvailable")
      m.available = v;
    else if (key == "MemFree")
      free = v;
    else if (key == "Buffers")
      buffers = v;
    else if (key == "Cached")
      cached = v;
  });
  if (!m.available && free) m.available = *free + buffers.value_or(0) + cached.value_or(0);
  return m;
}

SmapsRollup parse_smaps_rollup(std::string_view text) {
  SmapsRollup r;
  for_each_kb_field(text, [&](std::string_view key, uint64_t v) {
    if (key == "Rss")
      r.rss = v;
    else if (key == "Pss")
      r.pss = v;
    else if (key == "Private_Clean" || key == "Private_Dirty")
      r.uss += v;
    else if (key == "Swap")
      r.swap = v;
  });
  return r;
}

std::optional<Statm> parse_statm(std::string_view text) {
  Statm m;
  uint64_t* fields[] = {&m.size_pages, &m.resident_pages};
  size_t pos = 0;
  for (uint64_t* f : fields) {
    while (pos < text.size() && text[pos] == ' ') ++pos;
    size_t end = pos;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    if (!to_u64(text.substr(pos, end - pos), *f)) return std::nullopt;
    pos = end;
  }
  return m;
}

std::optional<std::vector<pid_t>> parse_children(std::string_view text) {
  std::vector<pid_t> out;
  size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == ' ' || text[pos] == '\n') {
      ++pos;
      continue;
    }
    size_t end = pos;
    while (end < text.size() && text[end] != ' ' && text[end] != '\n') ++end;
    int64_t pid = 0;
    if (!to_i64(text.substr(pos, end - pos), pid) || pid <= 0 ||
        pid > std::numeric_limits<pid_t>::max())
      return std::nullopt;
    out.push_back(pid_t(pid));
    pos = end;
  }
  return out;
}

ReadStatus read_file(const std::string& path, std::string& out) {
  out.clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ESRCH) return ReadStatus::kGone;
    if (errno == EACCES || errno == EPERM) return ReadStatus::kPermission;
    return ReadStatus::kError;
  }
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      if (e == ESRCH || e == ENOENT) return ReadStatus::kGone;
      if (e == EACCES || e == EPERM) return ReadStatus::kPermission;
      return ReadStatus::kError;
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
    if (out.size() > (1 << 20)) break;  // nothing we read is this large
  }
  ::close(fd);
  return ReadStatus::kOk;
}

namespace {
ReadStatus status_of(int e) {
  if (e == ESRCH || e == ENOENT) return ReadStatus::kGone;
  if (e == EACCES || e == EPERM) return ReadStatus::kPermission;
  return ReadStatus::kError;
}
}  // namespace

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

StatFiles::~StatFiles() {
  close_all();
}

void StatFiles::close_all() {
  for (const auto& [pid, k] : fds_) ::close(k.fd);
  g_kept.fetch_sub(fds_.size(), std::memory_order_relaxed);
  fds_.clear();
}

void StatFiles::drop(std::unordered_map<pid_t, Kept>::iterator it) {
  ::close(it->second.fd);
  fds_.erase(it);
  g_kept.fetch_sub(1, std::memory_order_relaxed);
}

ReadStatus StatFiles::read(const std::string& root, pid_t pid, std::string& out) {
  if (root != root_) {  // another proc root: nothing kept applies
    close_all();
    root_ = root;
  }
  const std::string path = root + "/" + std::to_string(pid) + "/stat";
  char buf[4096];
  auto it = fds_.find(pid);
  if (it != fds_.end()) {
    const ssize_t n = pread_start(it->second.fd, buf, sizeof buf);
    if (n > 0 && size_t(n) < sizeof buf) {
      it->second.read = true;
      out.assign(buf, size_t(n));
      return ReadStatus::kOk;
    }
    // Reaped (a new process may hold the pid now), or longer than a stat
    // line can be: read afresh.
    drop(it);
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
  fds_[pid] = {fd, true};
  g_kept.fetch_add(1, std::memory_order_relaxed);
  return ReadStatus::kOk;
}

void StatFiles::sweep() {
  for (auto it = fds_.begin(); it != fds_.end();) {
    if (it->second.read) {
      it->second.read = false;
      ++it;
    } else {
      drop(it++);
    }
  }
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

TreeFiles::~TreeFiles() {
  for (auto& [pid, e] : files_) close(e);
}

void TreeFiles::close(Entry& e) {
  close_fd(e.value);
  close_fd(e.children);
  close_fd(e.task);
  if (e.kept) g_kept.fetch_sub(3, std::memory_order_relaxed);
  e.kept = false;
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
    close(e);
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
  if (root != root_) {  // another proc root: nothing kept applies
    for (auto& [p, e] : files_) close(e);
    files_.clear();
    root_ = root;
    unsupported_ = false;
  }
  if (unsupported_) return Read::kUnsupported;
  if (auto it = files_.find(pid); it != files_.end()) {
    if (read_entry(pid, it->second, out, children) == Read::kOk) {
      it->second.read = true;
      return Read::kOk;
    }
    close(it->second);  // reaped: a new process may hold the pid now
    files_.erase(it);
  }
  Read why = Read::kGone;
  std::optional<Entry> e = open(root, pid, why);
  if (!e) {
    unsupported_ = why == Read::kUnsupported;
    return why;
  }
  const Read r = read_entry(pid, *e, out, children);
  if (r != Read::kOk || g_kept.load(std::memory_order_relaxed) + 3 > kept_budget_) {
    close(*e);
    return r;
  }
  e->kept = true;
  e->read = true;
  g_kept.fetch_add(3, std::memory_order_relaxed);
  files_.emplace(pid, *e);
  return Read::kOk;
}

void TreeFiles::sweep() {
  for (auto it = files_.begin(); it != files_.end();) {
    if (it->second.read) {
      it->second.read = false;
      ++it;
    } else {
      close(it->second);
      it = files_.erase(it);
    }
  }
}

bool ProcessTable::walk(const std::vector<pid_t>& roots, TreeFiles& files, bool descend) {
  processes_.clear();
  index_.clear();
  children_.clear();
  struct Visit {
    pid_t pid;
    pid_t parent;  // 0: a root
  };
  std::vector<Visit> queue;
  for (pid_t r : roots)
    if (r > 0) queue.push_back({r, 0});
  std::vector<pid_t> kids;
  ProcStat st;
  for (size_t i = 0; i < queue.size(); ++i) {
    const Visit v = queue[i];
    auto known = index_.find(v.pid);
    if (known == index_.end()) {
      switch (files.read(root_, v.pid, st, descend ? &kids : nullptr)) {
        case TreeFiles::Read::kUnsupported:
        case TreeFiles::Read::kError:
          processes_.clear();
          index_.clear();
          children_.clear();
          return false;
        case TreeFiles::Read::kGone:
          continue;
        case TreeFiles::Read::kOk:
          break;
      }
      known = index_.emplace(v.pid, processes_.size()).first;
      processes_.push_back(st);
      if (descend)
        for (pid_t k : kids) queue.push_back({k, v.pid});
    }
    if (v.parent != 0 && v.parent != v.pid) {
      children_[v.parent].push_back(known->second);
      processes_[known->second].ppid = v.parent;
    }
  }
  files.sweep();
  return true;
}

bool ProcessTable::walk_or_scan(const std::optional<std::vector<pid_t>>& roots,
                                TreeFiles& walk_files, StatFiles& scan_files, bool descend) {
  return (roots && walk(*roots, walk_files, descend)) || scan(&scan_files);
}

bool ProcessTable::scan(StatFiles* files) {
  processes_.clear();
  index_.clear();
  children_.clear();
  DIR* d = ::opendir(root_.c_str());
  if (d == nullptr) return false;
  std::string text;
  std::string path;
  while (dirent* e = ::readdir(d)) {
    const char* name = e->d_name;
    if (name[0] < '0' || name[0] > '9') continue;
    if (files != nullptr) {
      int64_t pid = 0;
      const auto r = std::from_chars(name, name + std::strlen(name), pid);
      if (r.ec != std::errc() || *r.ptr != '\0' || pid <= 0 ||
          pid > std::numeric_limits<pid_t>::max())
        continue;
      if (files->read(root_, pid_t(pid), text) != ReadStatus::kOk) continue;  // exited since
    } else {
      path = root_;
      path += '/';
      path += name;
      path += "/stat";
      if (read_file(path, text) != ReadStatus::kOk) continue;  // exited since the listing
    }
    std::optional<ProcStat> st = parse_stat(text);
    if (!st) continue;
    index_[st->pid] = processes_.size();
    processes_.push_back(std::move(*st));
  }
  ::closedir(d);
  if (files != nullptr) files->sweep();
  for (size_t i = 0; i < processes_.size(); ++i) {
    const ProcStat& p = processes_[i];
    auto parent = index_.find(p.ppid);
    if (parent == index_.end() || p.ppid == p.pid) continue;
    // A child is never older than its parent: otherwise the parent's pid was
    // reused by a younger process.
    if (processes_[parent->second].start_ticks > p.start_ticks) continue;
    children_[p.ppid].push_back(i);
  }
  return true;
}

const ProcStat* ProcessTable::find(pid_t pid) const {
  auto it = index_.find(pid);
  return it == index_.end() ? nullptr : &processes_[it->second];
}

const ProcStat* ProcessTable::find(pid_t pid, uint64_t start_ticks) const {
  const ProcStat* p = find(pid);
  return p != nullptr && p->start_ticks == start_ticks ? p : nullptr;
}

std::vector<const ProcStat*> ProcessTable::tree(const ProcStat& root) const {
  return tree(std::vector<const ProcStat*>{&root});
}

std::vector<const ProcStat*> ProcessTable::tree(const std::vector<const ProcStat*>& roots) const {
  std::vector<const ProcStat*> out;
  // Each process once, even in a table whose parent links loop (equal start
  // times can make a hand-made tree do so), or a root under another.
  std::vector<char> seen(processes_.size(), 0);
  for (const ProcStat* root : roots) {
    char& s = seen[size_t(root - processes_.data())];
    if (s) continue;
    s = 1;
    out.push_back(root);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    auto it = children_.find(out[i]->pid);
    if (it == children_.end()) continue;
    for (size_t child : it->second) {
      if (seen[child]) continue;
      seen[child] = 1;
      out.push_back(&processes_[child]);
    }
  }
  return out;
}

std::optional<uint64_t> count_open_fds(const std::string& proc_root, pid_t pid) {
  const std::string dir = proc_root + "/" + std::to_string(pid) + "/fd";
  // Linux 6.2 and later give the count as the directory's size (one stat
  // instead of listing every descriptor); 0 there, or an older kernel: list.
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return std::nullopt;
  if (S_ISDIR(st.st_mode) && st.st_size > 0) return uint64_t(st.st_size);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return std::nullopt;
  uint64_t n = 0;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n;
}

TreeUsage tree_usage(const ProcessTable& table, const ProcStat& root) {
  return tree_usage(table, std::vector<const ProcStat*>{&root});
}

TreeUsage tree_usage(const ProcessTable& table, const std::vector<const ProcStat*>& roots) {
  static const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  TreeUsage u;
  for (const ProcStat* p : table.tree(roots)) {
    if (p->kernel_thread() || p->zombie()) continue;
    u.live.push_back(p);
    u.members.emplace_back(p->pid, p->start_ticks);
    u.rss_bytes += p->rss_pages * page;
    u.threads += p->num_threads;
  }
  std::sort(u.members.begin(), u.members.end());
  return u;
}

}  // namespace gym::exporter::procfs
