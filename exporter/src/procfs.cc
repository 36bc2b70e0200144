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
}  // namespace

StatFiles::StatFiles() {
  rlimit lim{};
  const rlim_t soft = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 ? lim.rlim_cur : 1024;
  // A quarter of the descriptors at most, for all of them (the HTTP server
  // needs its own), and no more than a large host's processes.
  max_kept_ = size_t(std::min<rlim_t>(soft / 4, 16384));
}

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
