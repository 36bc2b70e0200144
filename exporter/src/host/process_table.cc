// The process table: every process of a host scan or of servers' trees,
// indexed by pid with its children, and what a tree uses (memory, CPU,
// threads, descriptors).
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>

#include "host/procfs.h"

namespace gym::exporter::procfs {

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
