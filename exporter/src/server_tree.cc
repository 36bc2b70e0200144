#include "server_tree.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <tuple>

#include "gym/contract.h"
#include "yaml_reader.h"

namespace gym::exporter {

namespace {

// Why `re` is refused before std::regex sees it: libstdc++ reads the numbers
// of repetitions ({m,n}) and back-references (\N) into an int without an
// overflow check (undefined behaviour; found by fuzzing), and large counts
// make the compiled automaton huge. Empty: none.
std::string regex_problem(std::string_view re) {
  if (re.size() > 1024) return "is longer than 1024 characters";
  auto digits_at = [&](size_t i) {
    size_t j = i;
    while (j < re.size() && re[j] >= '0' && re[j] <= '9') ++j;
    return j - i;
  };
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\') {
      if (i + 1 < re.size() && re[i + 1] >= '1' && re[i + 1] <= '9' && digits_at(i + 1) > 2)
        return "has a back-reference above \\99";
      ++i;  // the escaped character
      continue;
    }
    if (in_class) {
      in_class = c != ']';
      continue;
    }
    if (c == '[') {
      in_class = true;
      continue;
    }
    if (c != '{') continue;
    for (size_t j = i + 1; j < re.size() && re[j] != '}'; ++j) {
      const size_t n = digits_at(j);
      if (n > 4 || (n > 0 && std::stoul(std::string(re.substr(j, n))) > 1000))
        return "repeats something more than 1000 times";
      j += n > 0 ? n - 1 : 0;
    }
  }
  return {};
}

// A cmdline regex that `re` may be compiled from, or why not (a message).
std::string check_cmdline(const std::string& re) {
  if (std::string why = regex_problem(re); !why.empty()) return "match.cmdline " + why;
  try {
    std::regex compiled(re);
  } catch (const std::regex_error& e) {
    return std::string("match.cmdline is not a valid regular expression: ") + e.what();
  }
  return {};
}

// The match: section of a target: exactly one of comm, cmdline and
// ray_actor (a Ray actor's class: Ray titles its worker processes
// "ray::<Class>.<method>" or "ray::<Class>"), and `all`.
void read_match(YamlReader& rd, const YAML::Node& v, ServerTarget& t) {
  int kinds = 0;
  auto cmdline = [&](const YAML::Node& c, const std::string& re) {
    if (std::string why = check_cmdline(re); !why.empty()) {
      rd.error(c, why);
      t.match_cmdline.clear();
      return;
    }
    t.match_cmdline = re;
  };
  rd.mapping(v, "match",
             {{"comm",
               [&](const YAML::Node& c) {
                 ++kinds;
                 rd.string(c, "match.comm", t.match_comm);
               }},
              {"cmdline",
               [&](const YAML::Node& c) {
                 ++kinds;
                 std::string re;
                 if (rd.string(c, "match.cmdline", re)) cmdline(c, re);
               }},
              {"ray_actor",
               [&](const YAML::Node& c) {
                 ++kinds;
                 std::string actor;
                 if (!rd.string(c, "match.ray_actor", actor)) return;
                 if (actor.empty() ||
                     actor.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                             "0123456789_") != std::string::npos) {
                   rd.error(c, "match.ray_actor must be a class name (letters, digits, _)");
                   return;
                 }
                 cmdline(c, "^ray::" + actor + "(\\.|\\s|$)");
               }},
              {"all", [&](const YAML::Node& c) { rd.boolean(c, "match.all", t.match_all); }}});
  if (kinds != 1) rd.error(v, "match needs exactly one of comm, cmdline and ray_actor");
}

ServerTarget read_target(YamlReader& rd, const YAML::Node& item, const std::string& section) {
  ServerTarget t;
  int selectors = 0;
  bool has_name = false;
  bool has_type = false;
  rd.mapping(item, section + "[]",
             {{"name", [&](const YAML::Node& v) { has_name = rd.string(v, "name", t.name); }},
              {"server_type",
               [&](const YAML::Node& v) { has_type = rd.string(v, "server_type", t.server_type); }},
              {"pid",
               [&](const YAML::Node& v) {
                 ++selectors;
                 int pid = 0;
                 rd.integer(v, "pid", pid, 1, 1 << 30);
                 t.pid = pid;
               }},
              {"pidfile",
               [&](const YAML::Node& v) {
                 ++selectors;
                 rd.string(v, "pidfile", t.pidfile);
               }},
              {"match",
               [&](const YAML::Node& v) {
                 ++selectors;
                 read_match(rd, v, t);
               }},
              {"cgroups",
               [&](const YAML::Node& v) {
                 if (!v.IsSequence() || v.size() == 0) {
                   rd.error(v, "cgroups must be a list of cgroup paths or glob patterns");
                   return;
                 }
                 for (const auto& c : v) {
                   std::string path;
                   if (!rd.string(c, "cgroups[]", path)) continue;
                   if (path.empty() || path.find("..") != std::string::npos)
                     rd.error(c, "a cgroups entry must be a path under the cgroup mount, no '..'");
                   else
                     t.cgroups.push_back(path);
                 }
               }},
              {"max_roots",
               [&](const YAML::Node& v) { rd.integer(v, "max_roots", t.max_roots, 1, 100000); }},
              {"pss", [&](const YAML::Node& v) { rd.boolean(v, "pss", t.pss); }}});
  if (!item.IsMap()) return t;
  if (!has_name || !valid_server_name(t.name))
    rd.error(item, "a memory target needs a name of 1 to 128 characters");
  if (!has_type || !valid_server_name(t.server_type))
    rd.error(item, "memory target '" + t.name + "' needs a server_type of 1 to 128 characters");
  if (selectors > 1 || (selectors == 0 && t.cgroups.empty()))
    rd.error(item, "memory target '" + t.name +
                       "' needs exactly one of pid, pidfile and match, or cgroups, or both");
  return t;
}

}  // namespace

std::vector<ServerTarget> read_server_targets(YamlReader& rd, const YAML::Node& n,
                                              const std::string& section) {
  std::vector<ServerTarget> out;
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsSequence()) {
    rd.error(n, section + " must be a list");
    return out;
  }
  std::map<std::string, YAML::Mark> seen;
  for (const auto& item : n) {
    ServerTarget t = read_target(rd, item, section);
    if (!t.name.empty()) {
      auto [it, fresh] = seen.emplace(t.name, item.Mark());
      if (!fresh)
        rd.error(item, "memory target name '" + t.name + "' is used twice (also at " +
                           std::to_string(it->second.line + 1) + ":" +
                           std::to_string(it->second.column + 1) + ")");
    }
    out.push_back(std::move(t));
  }
  return out;
}

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

ServerTrees::ServerTrees(WatcherConfig config, std::shared_ptr<SharedRegistry> registry,
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

std::optional<double> ServerTrees::started_at(const procfs::ProcStat& p,
                                              const procfs::ProcessTable& table) {
  if (!boot_time_) {
    std::string text;
    if (procfs::read_file(table.proc_root() + "/stat", text) != procfs::ReadStatus::kOk)
      return std::nullopt;
    boot_time_ = procfs::parse_btime(text);
    if (!boot_time_) return std::nullopt;
  }
  static const double ticks_per_second = double(::sysconf(_SC_CLK_TCK));
  return double(*boot_time_) + double(p.start_ticks) / ticks_per_second;
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
  // the server is gone and its pid reused. (Boot time has whole seconds.)
  const double written = t.pidfile_mtime;
  if (auto started = started_at(*p, table); started && *started > written + 1.0) return nullptr;
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
    if (fresh) out.push_back({d.name, d.server_type, true, false, {}});
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

ServerProcesses::ServerProcesses(WatcherConfig config, std::shared_ptr<SharedRegistry> registry,
                                 ErrorFn error)
    : trees_(config, std::move(registry), std::move(error)),
      gone_ttl_(config.gone_server_ttl_seconds) {}

std::optional<std::vector<pid_t>> ServerProcesses::prepare(std::chrono::nanoseconds declared_age) {
  std::optional<std::vector<pid_t>> seeds = trees_.prepare(declared_age);
  if (seeds)
    for (const auto& [root, members] : lineage_)
      for (const Member& m : members) seeds->push_back(m.first);
  return seeds;
}

namespace {
// Whether a process of `roots` other than `p` is an ancestor of `p`.
bool below_another(const procfs::ProcessTable& table, const procfs::ProcStat* p,
                   const std::set<const procfs::ProcStat*>& roots) {
  const procfs::ProcStat* at = p;
  for (int depth = 0; depth < 4096; ++depth) {
    const procfs::ProcStat* parent = table.find(at->ppid);
    // A parent younger than its child is a reused pid, not the parent.
    if (parent == nullptr || parent == at || parent->start_ticks > at->start_ticks) return false;
    if (roots.contains(parent)) return true;
    at = parent;
  }
  return false;
}
}  // namespace

std::vector<ServerProcesses::Tree> ServerProcesses::sample(
    const procfs::ProcessTable& table, std::chrono::steady_clock::time_point now) {
  std::vector<Tree> out;
  std::map<Member, std::vector<Member>> lineage;
  for (const ServerTrees::Server& s : trees_.resolve(table)) {
    if (s.unseen) {  // neither up nor gone: out of sight
      declared_.erase(s.name);
      continue;
    }
    Tree t{s.name, s.server_type, s.pss, s.configured, {}, nullptr, {}, 0};
    if (!s.configured) declared_[s.name].server_type = s.server_type;
    const std::set<const procfs::ProcStat*> all(s.roots.begin(), s.roots.end());
    for (const procfs::ProcStat* r : s.roots)
      if (!below_another(table, r, all)) t.roots.push_back(r);
    if (t.roots.empty()) {
      out.push_back(std::move(t));
      continue;
    }
    t.root = t.roots.front();
    // Each root's tree with its members kept by lineage; the server is their
    // union, each process once. Each tree is walked once; a server of one
    // root with nothing escaped (the common case) is that walk.
    std::vector<const procfs::ProcStat*> starts = t.roots;
    for (const procfs::ProcStat* r : t.roots) {
      const Member key{r->pid, r->start_ticks};
      procfs::TreeUsage in_tree = procfs::tree_usage(table, *r);
      std::vector<const procfs::ProcStat*> escaped;
      if (auto was = lineage_.find(key); was != lineage_.end())
        for (const Member& m : was->second) {
          if (std::binary_search(in_tree.members.begin(), in_tree.members.end(), m)) continue;
          const procfs::ProcStat* p = table.find(m.first, m.second);
          if (p != nullptr && !p->zombie() && !p->kernel_thread()) escaped.push_back(p);
        }
      if (escaped.empty()) {
        lineage[key] = in_tree.members;
        if (t.roots.size() == 1) t.usage = std::move(in_tree);
        continue;
      }
      std::vector<const procfs::ProcStat*> mine{r};
      mine.insert(mine.end(), escaped.begin(), escaped.end());
      lineage[key] = procfs::tree_usage(table, mine).members;
      starts.insert(starts.end(), escaped.begin(), escaped.end());
    }
    if (t.roots.size() > 1 || starts.size() > t.roots.size()) {
      t.usage = procfs::tree_usage(table, t.roots);
      if (starts.size() > t.roots.size()) {
        const size_t in_trees = t.usage.live.size();
        t.usage = procfs::tree_usage(table, starts);
        t.escaped = t.usage.live.size() - in_trees;
      }
    }
    out.push_back(std::move(t));
  }
  lineage_ = std::move(lineage);  // a root that is gone takes its lineage with it
  // Declared servers that are gone: reported with no root until their TTL.
  for (auto it = declared_.begin(); it != declared_.end();) {
    const std::string& name = it->first;  // (lambdas cannot capture structured bindings)
    Declared& d = it->second;
    const bool up = std::any_of(out.begin(), out.end(),
                                [&](const Tree& t) { return t.name == name && t.root != nullptr; });
    if (up) {
      d.gone_since.reset();
      ++it;
      continue;
    }
    if (!d.gone_since) d.gone_since = now;
    if (now - *d.gone_since > gone_ttl_) {
      std::erase_if(out, [&](const Tree& t) { return t.name == name && !t.configured; });
      it = declared_.erase(it);
      continue;
    }
    if (std::none_of(out.begin(), out.end(), [&](const Tree& t) { return t.name == name; })) {
      Tree gone;  // its segment is gone too
      gone.name = name;
      gone.server_type = d.server_type;
      out.push_back(std::move(gone));
    }
    ++it;
  }
  return out;
}

ServerWatcher::ServerWatcher(WatcherConfig config, std::shared_ptr<SharedRegistry> registry)
    : config_(std::move(config)),
      processes_(config_, std::move(registry),
                 [this](const std::string& reason, const std::string& detail) {
                   errors_.emplace_back(reason, detail);
                 }) {}

uint64_t ServerWatcher::namespace_scans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return processes_.trees().namespace_scans();
}

namespace {
// How old the registry's declarations may be for a view of `max_age`: up to
// the period of the collector that asks (twice its half), so that a scrape's
// snapshot serves, and a watcher alone takes one snapshot a period.
std::chrono::nanoseconds declared_age(std::chrono::duration<double> max_age) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(2 * max_age);
}
}  // namespace

std::shared_ptr<const ServersView> ServerWatcher::view(
    std::chrono::duration<double> max_age, const std::shared_ptr<const ServersView>& seen) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (last_ && last_ != seen && now - last_->taken <= max_age) return last_;
  auto v = std::make_shared<ServersView>(config_.proc_root);
  v->taken = now;
  errors_.clear();
  // A walk skips roots that are no process: a proc root that is not there
  // at all must not read as every server gone.
  v->proc_ok =
      ::access(config_.proc_root.c_str(), R_OK | X_OK) == 0 &&
      v->table.walk_or_scan(processes_.prepare(declared_age(max_age)), tree_files_, stat_files_);
  if (v->proc_ok) {
    v->trees = processes_.sample(v->table, now);
  } else {
    errors_.emplace_back("proc", "cannot list " + config_.proc_root);
  }
  v->unseen_declarers = processes_.trees().unseen_declarers();
  v->errors = std::move(errors_);
  errors_.clear();
  last_ = v;
  return v;
}

}  // namespace gym::exporter
