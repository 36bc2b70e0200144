#include "server_tree.h"

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

// The match: section of a target: exactly one of comm and cmdline.
void read_match(YamlReader& rd, const YAML::Node& v, ServerTarget& t) {
  int kinds = 0;
  rd.mapping(v, "match",
             {{"comm",
               [&](const YAML::Node& c) {
                 ++kinds;
                 rd.string(c, "match.comm", t.match_comm);
               }},
              {"cmdline", [&](const YAML::Node& c) {
                 ++kinds;
                 if (!rd.string(c, "match.cmdline", t.match_cmdline)) return;
                 if (std::string why = regex_problem(t.match_cmdline); !why.empty()) {
                   rd.error(c, "match.cmdline " + why);
                   t.match_cmdline.clear();
                   return;
                 }
                 try {
                   std::regex re(t.match_cmdline);
                 } catch (const std::regex_error& e) {
                   rd.error(c, std::string("match.cmdline is not a valid regular expression: ") +
                                   e.what());
                 }
               }}});
  if (kinds != 1) rd.error(v, "match needs exactly one of comm and cmdline");
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
              {"pss", [&](const YAML::Node& v) { rd.boolean(v, "pss", t.pss); }}});
  if (!item.IsMap()) return t;
  if (!has_name || !valid_server_name(t.name))
    rd.error(item, "a memory target needs a name of 1 to 128 characters");
  if (!has_type || !valid_server_name(t.server_type))
    rd.error(item, "memory target '" + t.name + "' needs a server_type of 1 to 128 characters");
  if (selectors != 1)
    rd.error(item, "memory target '" + t.name + "' needs exactly one of pid, pidfile and match");
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

ServerTrees::ServerTrees(std::vector<ServerTarget> targets,
                         std::shared_ptr<SharedRegistry> registry,
                         std::function<void(const std::string&, const std::string&)> error)
    : registry_(std::move(registry)), error_(std::move(error)) {
  for (ServerTarget& t : targets) {
    Target target;
    target.config = std::move(t);
    if (!target.config.match_cmdline.empty()) target.cmdline.emplace(target.config.match_cmdline);
    targets_.push_back(std::move(target));
  }
}

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

// The oldest matching process is the root.
const procfs::ProcStat* ServerTrees::from_match(const Target& t,
                                                const procfs::ProcessTable& table) {
  const procfs::ProcStat* best = nullptr;
  std::string cmdline;
  for (const procfs::ProcStat& p : table.processes()) {
    if (p.kernel_thread() || p.zombie()) continue;
    bool match = false;
    if (!t.config.match_comm.empty()) {
      match = p.comm == t.config.match_comm;
    } else if (t.cmdline) {
      const std::string path = table.proc_root() + "/" + std::to_string(p.pid) + "/cmdline";
      if (procfs::read_file(path, cmdline) != procfs::ReadStatus::kOk) continue;
      std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
      match = std::regex_search(cmdline, *t.cmdline);
    }
    if (match && (best == nullptr ||
                  std::tie(p.start_ticks, p.pid) < std::tie(best->start_ticks, best->pid)))
      best = &p;
  }
  return best;
}

const procfs::ProcStat* ServerTrees::find_root(Target& t, const procfs::ProcessTable& table) {
  if (t.config.pid) return first_seen(t, *t.config.pid, table);
  if (!t.config.pidfile.empty()) return from_pidfile(t, table);
  return from_match(t, table);
}

std::optional<std::vector<pid_t>> ServerTrees::prepare() {
  prepared_ = true;
  std::vector<pid_t> roots;
  bool match = false;
  for (Target& t : targets_) {
    if (t.config.pid) {
      roots.push_back(*t.config.pid);
    } else if (!t.config.pidfile.empty()) {
      read_pidfile(t);
      if (t.pidfile_pid != 0) roots.push_back(t.pidfile_pid);
    } else {
      match = true;
    }
  }
  declared_.clear();
  if (registry_) {
    declared_ = registry_->with([](RegistryReader& r) { return r.snapshot().servers; });
    // A process forked by a server (a verifier) inherits its declaration; of
    // the processes that declare one name, the oldest is the server.
    std::sort(
        declared_.begin(), declared_.end(), [](const DeclaredServer& a, const DeclaredServer& b) {
          return std::tie(a.name, a.start_ticks, a.pid) < std::tie(b.name, b.start_ticks, b.pid);
        });
    for (const DeclaredServer& d : declared_) roots.push_back(d.pid);
  }
  if (match) return std::nullopt;
  return roots;
}

std::vector<ServerTrees::Server> ServerTrees::resolve(const procfs::ProcessTable& table) {
  if (!prepared_) prepare();
  prepared_ = false;
  std::vector<Server> out;
  std::map<std::string, bool> named;
  for (Target& t : targets_) {
    out.push_back({t.config.name, t.config.server_type, t.config.pss, true, find_root(t, table)});
    named[t.config.name] = true;
  }
  for (const DeclaredServer& d : declared_) {
    if (!named.emplace(d.name, true).second) continue;  // configuration wins
    out.push_back({d.name, d.server_type, true, false, table.find(d.pid, d.start_ticks)});
  }
  return out;
}

std::optional<std::vector<pid_t>> ServerProcesses::prepare() {
  std::optional<std::vector<pid_t>> seeds = trees_.prepare();
  if (seeds)
    for (const auto& [name, members] : lineage_)
      for (const Member& m : members) seeds->push_back(m.first);
  return seeds;
}

ServerProcesses::ServerProcesses(std::vector<ServerTarget> targets,
                                 std::shared_ptr<SharedRegistry> registry,
                                 std::chrono::duration<double> gone_ttl,
                                 std::function<void(const std::string&, const std::string&)> error)
    : trees_(std::move(targets), std::move(registry), std::move(error)), gone_ttl_(gone_ttl) {}

std::vector<ServerProcesses::Tree> ServerProcesses::sample(
    const procfs::ProcessTable& table, std::chrono::steady_clock::time_point now) {
  dropped_.clear();
  std::vector<Tree> out;
  for (const ServerTrees::Server& s : trees_.resolve(table)) {
    Tree t{s.name, s.server_type, s.pss, s.configured, s.root, {}, 0};
    if (!s.configured) declared_[s.name].server_type = s.server_type;
    if (s.root == nullptr) {
      lineage_.erase(s.name);
      out.push_back(std::move(t));
      continue;
    }
    t.usage = procfs::tree_usage(table, *s.root);
    std::vector<Member>& lineage = lineage_[s.name];
    std::vector<const procfs::ProcStat*> roots{s.root};
    for (const Member& was : lineage) {
      if (std::binary_search(t.usage.members.begin(), t.usage.members.end(), was)) continue;
      const procfs::ProcStat* p = table.find(was.first, was.second);
      if (p != nullptr && !p->zombie() && !p->kernel_thread()) roots.push_back(p);
    }
    if (roots.size() > 1) {
      const size_t in_tree = t.usage.live.size();
      t.usage = procfs::tree_usage(table, roots);
      t.escaped = t.usage.live.size() - in_tree;
    }
    lineage = t.usage.members;
    out.push_back(std::move(t));
  }
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
      std::erase_if(out, [&](const Tree& t) { return t.name == name; });
      lineage_.erase(name);
      dropped_.push_back(name);
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

}  // namespace gym::exporter
