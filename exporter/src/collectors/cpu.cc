#include "collectors/cpu.h"

#include <algorithm>
#include <set>

#include "contract/families.h"
#include "gym/contract.h"

using prometheus::MetricFamily;

namespace gym::exporter {

namespace {

GYM_REGISTER_COLLECTOR(per_server_kind<CpuCollector>("cpu", 52));

}  // namespace

CpuCollector::CpuCollector(std::shared_ptr<ServerWatcher> servers, Log log, double interval_seconds)
    : SampledCollector(std::chrono::duration<double>(interval_seconds), "cpu", std::move(log)),
      interval_seconds_(interval_seconds),
      watcher_(std::move(servers)) {}

CpuCollector::~CpuCollector() {
  stop();
}

CpuCollector::ServerCpu CpuCollector::measure(const ServerProcesses::Tree& t, CpuState& st,
                                              const procfs::ProcessTable& table,
                                              double boot_seconds) {
  ServerCpu c;
  c.name = t.name;
  c.server_type = t.server_type;
  if (t.root == nullptr) {  // gone: CPU as counted, nothing running
    st.members.clear();
    st.departed.clear();
  } else {
    c.threads = t.usage.threads;
    uint64_t fds = 0;
    bool all = true;
    for (const procfs::ProcStat* p : t.usage.live) {
      const std::optional<uint64_t> n = procfs::count_open_fds(table.proc_root(), p->pid);
      if (n)
        fds += *n;
      else if (procfs::read_file(table.proc_root() + "/" + std::to_string(p->pid) + "/stat",
                                 scratch_) != procfs::ReadStatus::kGone)
        all = false;  // there, but not ours to count
    }
    if (all) c.open_fds = fds;
    if (st.since == 0 && boot_seconds > 0 && st.members.empty())
      st.since = procfs::started_unix_seconds(uint64_t(boot_seconds), t.root->start_ticks);
    account_cpu(st, t.usage, table);
  }
  c.user_ticks = st.user;
  c.system_ticks = st.system;
  c.since = st.since;
  return c;
}

CpuSample CpuCollector::take() {
  const std::shared_ptr<const ServersView> view =
      watcher_->view(std::chrono::duration<double>(interval_seconds_ / 2), view_);
  view_ = view;
  const procfs::ProcessTable& table = view->table;
  CpuSample out;
  std::set<std::string> names;
  for (const ServerProcesses::Tree& t : view->trees) {
    names.insert(t.name);
    out.servers.push_back(measure(t, cpu_[t.name], table, view->boot_seconds));
  }
  if (view->proc_ok)  // servers that went take their counts
    std::erase_if(cpu_, [&](const auto& kv) { return !names.contains(kv.first); });
  return out;
}

void CpuCollector::account_cpu(CpuState& st, const procfs::TreeUsage& tree,
                               const procfs::ProcessTable& table) {
  std::map<Member, Times> now;
  std::map<pid_t, Member> live;
  for (const procfs::ProcStat* p : tree.live) {
    const Member m{p->pid, p->start_ticks};
    now[m] = {p->ppid, p->utime_ticks, p->stime_ticks, p->cutime_ticks, p->cstime_ticks};
    live[p->pid] = m;
  }
  // Members that left since the last sample: their times go to their
  // parent's reaped-children times when (if) it reaps them. One whose parent
  // left too was orphaned: its reaper is the nearest subreaper above it (or
  // init); its nearest ancestor still here, as last seen, stands for it.
  std::map<pid_t, pid_t> last_parent;  // made when a parent left too
  for (const auto& [m, t] : st.members) {
    if (now.contains(m)) continue;
    pid_t up_pid = t.ppid;
    auto parent = live.find(up_pid);
    if (parent == live.end() && last_parent.empty())
      for (const auto& [was, times] : st.members) last_parent[was.first] = times.ppid;
    for (int depth = 0; parent == live.end() && depth < 64; ++depth) {
      auto above = last_parent.find(up_pid);
      if (above == last_parent.end() || above->second == up_pid) break;
      up_pid = above->second;
      parent = live.find(up_pid);
    }
    if (parent == live.end()) continue;  // init reaps it, not the tree
    st.departed[m] = {parent->second, t.user + t.child_user, t.system + t.child_system};
  }
  // Increments of every live member.
  std::map<Member, std::pair<uint64_t, uint64_t>> child_delta;
  auto up = [](uint64_t now, uint64_t before) { return now > before ? now - before : 0; };
  for (const auto& [m, t] : now) {
    auto before = st.members.find(m);
    const Times b = before == st.members.end() ? Times{} : before->second;
    st.user += up(t.user, b.user);
    st.system += up(t.system, b.system);
    child_delta[m] = {up(t.child_user, b.child_user), up(t.child_system, b.child_system)};
  }
  // A departed member that is no longer in the table was reaped since: by
  // its parent, whose reaped-children times took its times, counted before.
  for (auto it = st.departed.begin(); it != st.departed.end();) {
    const auto& [m, d] = *it;
    if (table.find(m.first, m.second) != nullptr) {  // a zombie still
      ++it;
      continue;
    }
    auto delta = child_delta.find(d.parent);
    if (delta != child_delta.end()) {
      delta->second.first -= std::min(delta->second.first, d.user);
      delta->second.second -= std::min(delta->second.second, d.system);
    }
    it = st.departed.erase(it);
  }
  for (const auto& [m, d] : child_delta) {
    st.user += d.first;
    st.system += d.second;
  }
  st.members = std::move(now);
}

void CpuCollector::serve(const CpuSample& s, const Emit& emit) const {
  if (s.servers.empty()) return;
  Families out;
  auto [cpu, threads, fds] = add_families(
      out, {"gym_server_cpu_seconds_total", "gym_server_threads", "gym_server_open_fds"});
  FamilyExtras cpu_since;
  for (const ServerCpu& c : s.servers) {
    const LabelPairs l = server_labels(c.name, c.server_type);
    for (const auto& [mode, ticks] :
         {std::pair{"user", c.user_ticks}, std::pair{"system", c.system_ticks}}) {
      LabelPairs lc = l;
      lc.emplace_back("mode", mode);
      add_metric(*cpu, lc).counter.value = double(ticks) / procfs::ticks_per_second();
      cpu_since.created.push_back(c.since);
    }
    add_metric(*threads, l).gauge.value = double(c.threads);
    if (c.open_fds) add_metric(*fds, l).gauge.value = double(*c.open_fds);
  }
  for (const Family& f : out)
    if (!f.metric.empty()) emit(f, &f == cpu ? &cpu_since : nullptr);
}

}  // namespace gym::exporter
