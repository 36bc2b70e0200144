#include "servers/processes.h"

#include <algorithm>
#include <set>

namespace gym::exporter {

ServerProcesses::ServerProcesses(ServersConfig config, std::shared_ptr<SharedRegistry> registry,
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
  add_gone_servers(out, now);
  return out;
}

// Declared servers that are gone: reported with no root until their TTL.
void ServerProcesses::add_gone_servers(std::vector<Tree>& out,
                                       std::chrono::steady_clock::time_point now) {
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
}

}  // namespace gym::exporter
