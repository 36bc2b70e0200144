#include "servers/trees.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <tuple>

namespace gym::exporter {

struct ServerTrees::Target {
  ServerTarget config;
  std::optional<std::regex> cmdline;
  pid_t root_pid = 0;                  // pid and pidfile targets: the pid,
  std::optional<uint64_t> root_start;  // and the start of the process first seen
  double pidfile_written = 0;          // the pidfile's mtime then
  pid_t pidfile_pid = 0;               // as prepare() read it (0: none)
  double pidfile_mtime = 0;
  std::vector<pid_t> cgroup_pids;  // as prepare() read them
};

ServerTrees::ServerTrees(ServersConfig config, std::shared_ptr<SharedRegistry> registry,
                         ErrorFn error)
    : config_(std::move(config)),
      registry_(std::move(registry)),
      namespaces_(std::make_unique<PidNamespaces>(config_.proc_root)),
      error_(std::move(error)) {
  for (const ServerTarget& t : config_.targets) {
    Target target;
    target.config = t;
    if (!t.match_cmdline.empty()) target.cmdline.emplace(t.match_cmdline);
    targets_.push_back(std::move(target));
  }
}

ServerTrees::~ServerTrees() = default;

uint64_t ServerTrees::namespace_scans() const {
  return namespaces_->scans();
}

namespace {
// A process that can be a root: alive (not a zombie, not exiting), not a
// kernel thread.
bool can_be_root(const procfs::ProcStat* p) {
  return p != nullptr && !p->exiting() && !p->kernel_thread();
}
bool older(const procfs::ProcStat* a, const procfs::ProcStat* b) {
  return std::tie(a->start_ticks, a->pid) < std::tie(b->start_ticks, b->pid);
}
}  // namespace

const procfs::ProcStat* ServerTrees::first_seen(Target& t, pid_t pid,
                                                const procfs::ProcessTable& table) {
  const procfs::ProcStat* p = table.find(pid);
  if (p == nullptr) return nullptr;
  if (t.root_pid != pid || !t.root_start) {
    t.root_pid = pid;
    t.root_start = p->start_ticks;
  }
  return p->start_ticks == *t.root_start ? p : nullptr;
}

namespace {
// This kernel's boot instant (Unix seconds, to the nanosecond): the real-time
// clock less the time since boot, which is what /proc/stat's btime truncates
// to the second.
double boot_instant_now() {
  timespec real{}, since{};
  ::clock_gettime(CLOCK_REALTIME, &real);
  ::clock_gettime(CLOCK_BOOTTIME, &since);
  return double(real.tv_sec - since.tv_sec) + double(real.tv_nsec - since.tv_nsec) * 1e-9;
}
}  // namespace

void ServerTrees::read_boot_time(const std::string& proc_root) {
  boot_time_ = procfs::read_boot_time(proc_root);
  if (!boot_time_) return;
  // This kernel's proc root: btime is the exact instant truncated.
  const double exact = boot_instant_now();
  if (exact >= double(*boot_time_) - 0.001 && exact < double(*boot_time_) + 1.001)
    boot_exact_ = exact;
}

std::optional<double> ServerTrees::started_at(const procfs::ProcStat& p,
                                              const procfs::ProcessTable& table) {
  if (!boot_time_) read_boot_time(table.proc_root());
  if (!boot_time_) return std::nullopt;
  if (boot_exact_) return *boot_exact_ + double(p.start_ticks) / procfs::ticks_per_second();
  return procfs::started_unix_seconds(*boot_time_, p.start_ticks);
}

void ServerTrees::read_pidfile(Target& t) {
  const ServerTarget& c = t.config;
  t.pidfile_pid = 0;
  std::string text;
  struct stat st {};
  if (procfs::read_file(c.pidfile, text) != procfs::ReadStatus::kOk ||
      ::stat(c.pidfile.c_str(), &st) != 0) {
    error_("pidfile", "cannot read pidfile " + c.pidfile + " of " + c.name);
    return;
  }
  size_t b = text.find_first_not_of(" \t\n");
  size_t e = text.find_last_not_of(" \t\n");
  int pid = 0;
  if (b == std::string::npos ||
      std::from_chars(text.data() + b, text.data() + e + 1, pid).ptr != text.data() + e + 1 ||
      pid <= 0) {
    error_("pidfile", "pidfile " + c.pidfile + " of " + c.name + " holds no pid");
    return;
  }
  t.pidfile_pid = pid;
  t.pidfile_mtime = double(st.st_mtim.tv_sec) + double(st.st_mtim.tv_nsec) * 1e-9;
}

// The processes of the target's cgroups: every directory the patterns name
// under the cgroup mount (v2 when mounted, else the v1 memory hierarchy),
// its cgroup.procs, pids as the proc root's namespace sees them.
void ServerTrees::read_cgroups(Target& t) {
  t.cgroup_pids.clear();
  if (t.config.cgroups.empty()) return;
  if (!mounts_read_) {
    mounts_read_ = true;
    if (config_.mounts) {
      mounts_ = *config_.mounts;
    } else {
      std::string text;
      if (procfs::read_file(config_.proc_root + "/self/mountinfo", text) == procfs::ReadStatus::kOk)
        mounts_ = cgroup::parse_mountinfo(text);
    }
  }
  const std::string& mount = !mounts_.v2.empty() ? mounts_.v2 : mounts_.v1_memory;
  if (mount.empty()) {
    error_("cgroup", "no cgroup hierarchy is mounted for the cgroups of " + t.config.name);
    return;
  }
  for (const std::string& pattern : t.config.cgroups) {
    std::string path = mount + "/" + (pattern.front() == '/' ? pattern.substr(1) : pattern);
    glob_t g{};
    if (::glob(path.c_str(), GLOB_ONLYDIR | GLOB_NOSORT, nullptr, &g) == 0) {
      std::string text;
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        if (procfs::read_file(std::string(g.gl_pathv[i]) + "/cgroup.procs", text) !=
            procfs::ReadStatus::kOk)
          continue;
        if (auto pids = procfs::parse_children(text))
          t.cgroup_pids.insert(t.cgroup_pids.end(), pids->begin(), pids->end());
      }
    }
    ::globfree(&g);
  }
}

const procfs::ProcStat* ServerTrees::from_pidfile(Target& t, const procfs::ProcessTable& table) {
  if (t.pidfile_pid == 0) return nullptr;
  const procfs::ProcStat* p = table.find(t.pidfile_pid);
  if (p == nullptr) return nullptr;
  // A process that started after the pidfile was written did not write it:
  // the server is gone and its pid reused. A start time reads early, never
  // late; a file's time lags the write by up to a timer tick (the kernel's
  // coarse clock): 20 ms covers that.
  const double written = t.pidfile_mtime;
  if (auto started = started_at(*p, table); started && *started > written + 0.02) return nullptr;
  // A rewritten pidfile names its process afresh (a restart may reuse a pid).
  if (written != t.pidfile_written) t.root_start.reset();
  t.pidfile_written = written;
  return first_seen(t, t.pidfile_pid, table);
}

// The oldest matching process, or with `all` every one.
std::vector<const procfs::ProcStat*> ServerTrees::from_match(Target& t,
                                                             const procfs::ProcessTable& table) {
  std::vector<const procfs::ProcStat*> out;
  std::string cmdline;
  for (const procfs::ProcStat& p : table.processes()) {
    if (!can_be_root(&p)) continue;
    bool match = false;
    if (!t.config.match_comm.empty()) {
      match = p.comm == t.config.match_comm;
    } else if (t.cmdline) {
      const std::string path = table.proc_root() + "/" + std::to_string(p.pid) + "/cmdline";
      if (procfs::read_file(path, cmdline) != procfs::ReadStatus::kOk) continue;
      std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
      match = std::regex_search(cmdline, *t.cmdline);
    }
    if (!match) continue;
    if (t.config.match_all || out.empty())
      out.push_back(&p);
    else if (older(&p, out.front()))
      out.front() = &p;
  }
  return out;
}

void ServerTrees::bound(Target& t, std::vector<const procfs::ProcStat*>& roots, const char* rule) {
  const size_t max = size_t(t.config.max_roots);
  if (roots.size() <= max) return;
  std::sort(roots.begin(), roots.end(), older);
  error_("adoption", "the " + std::string(rule) + " of " + t.config.name + " adopts " +
                         std::to_string(roots.size()) + " processes, more than max_roots (" +
                         std::to_string(max) + "): the oldest " + std::to_string(max) +
                         " are kept");
  roots.resize(max);
}

std::vector<const procfs::ProcStat*> ServerTrees::find_roots(Target& t,
                                                             const procfs::ProcessTable& table) {
  std::vector<const procfs::ProcStat*> roots;
  const procfs::ProcStat* one = nullptr;
  if (t.config.pid) {
    one = first_seen(t, *t.config.pid, table);
  } else if (!t.config.pidfile.empty()) {
    one = from_pidfile(t, table);
  } else if (!t.config.match_comm.empty() || t.cmdline) {
    roots = from_match(t, table);
    bound(t, roots, "match");
  }
  if (can_be_root(one)) roots.push_back(one);
  std::vector<const procfs::ProcStat*> adopted;
  for (pid_t pid : t.cgroup_pids)
    if (const procfs::ProcStat* p = table.find(pid); can_be_root(p)) adopted.push_back(p);
  bound(t, adopted, "cgroups");
  roots.insert(roots.end(), adopted.begin(), adopted.end());
  return roots;
}

std::optional<std::vector<pid_t>> ServerTrees::prepare(std::chrono::nanoseconds declared_age) {
  prepared_ = true;
  std::vector<pid_t> roots;
  bool match = false;
  for (Target& t : targets_) {
    if (t.config.pid) {
      roots.push_back(*t.config.pid);
    } else if (!t.config.pidfile.empty()) {
      read_pidfile(t);
      if (t.pidfile_pid != 0) roots.push_back(t.pidfile_pid);
    } else if (!t.config.match_comm.empty() || t.cmdline) {
      match = true;
    }
    read_cgroups(t);
    roots.insert(roots.end(), t.cgroup_pids.begin(), t.cgroup_pids.end());
  }
  declared_.clear();
  unseen_ = 0;
  if (registry_) {
    std::vector<DeclaredServer> declared = registry_->servers(declared_age);
    // Writers of other pid namespaces: their pids on this side, looked up
    // once each.
    std::vector<PidNamespaces::Key> foreign;
    for (const DeclaredServer& d : declared)
      if (!namespaces_->is_own(d.pid_ns)) foreign.push_back({d.pid_ns, d.pid, d.start_ticks});
    namespaces_->update(foreign);
    for (DeclaredServer& d : declared) {
      Declarer one;
      one.d = std::move(d);
      if (namespaces_->is_own(one.d.pid_ns)) {
        one.host_pid = one.d.pid;
      } else {
        one.host_pid = namespaces_->host_pid({one.d.pid_ns, one.d.pid, one.d.start_ticks});
        if (!one.host_pid) ++unseen_;
      }
      if (one.host_pid) roots.push_back(*one.host_pid);
      declared_.push_back(std::move(one));
    }
  }
  if (match) return std::nullopt;
  return roots;
}

std::vector<ServerTrees::Server> ServerTrees::resolve(const procfs::ProcessTable& table) {
  if (!prepared_) prepare();
  if (!boot_time_) read_boot_time(table.proc_root());
  prepared_ = false;
  std::vector<Server> out;
  std::map<std::string, size_t> index;
  for (Target& t : targets_) {
    index[t.config.name] = out.size();
    out.push_back({t.config.name, t.config.server_type, t.config.pss, true, find_roots(t, table)});
  }
  std::set<std::string> unseen;  // names with a declarer out of sight
  for (const Declarer& one : declared_) {
    const DeclaredServer& d = one.d;
    auto [it, fresh] = index.emplace(d.name, out.size());
    if (fresh) out.push_back({d.name, d.server_type, std::nullopt, false, {}});
    if (!one.host_pid) {
      unseen.insert(d.name);
      if (unseen_logged_.insert(d.name).second)
        error_("namespace",
               "server " + d.name + " (pid " + std::to_string(d.pid) + " in pid namespace pid:[" +
                   std::to_string(d.pid_ns) +
                   "]) runs in a pid namespace this exporter cannot see: its memory, CPU and "
                   "processes are not reported. Run the exporter in the host's pid namespace "
                   "(Kubernetes: hostPID: true, or shareProcessNamespace: true for a sidecar; "
                   "docker/podman: --pid=host)");
      continue;
    }
    const procfs::ProcStat* p = table.find(*one.host_pid, d.start_ticks);
    if (can_be_root(p)) out[it->second].roots.push_back(p);
  }
  for (Server& s : out) {
    std::sort(s.roots.begin(), s.roots.end(), older);
    s.roots.erase(std::unique(s.roots.begin(), s.roots.end()), s.roots.end());
    s.unseen = s.roots.empty() && unseen.contains(s.name);
  }
  std::erase_if(unseen_logged_, [&](const std::string& n) { return !unseen.contains(n); });
  return out;
}
}  // namespace gym::exporter
