#include "collectors/servers.h"

#include <charconv>
#include <set>

#include "contract/families.h"
#include "gym/contract.h"

using prometheus::MetricFamily;

namespace gym::exporter {

namespace {

// Its section is the servers unit's (Config::servers), read by the
// configuration itself: this kind has none of its own.
GYM_REGISTER_COLLECTOR({.name = "servers",
                        .order = 49,
                        .parse = nullptr,
                        .make = [](const CollectorSettings*, const CollectorContext& c) {
                          return std::make_unique<ServersCollector>(c.servers, c.warn, c.board);
                        }});

// When `t`'s oldest process other than its roots started, in seconds since
// boot; none when it has none.
std::optional<double> oldest_start(const ServerProcesses::Tree& t) {
  std::optional<uint64_t> oldest;
  for (const auto& [pid, start] : t.usage.members) {
    bool root = false;
    for (const procfs::ProcStat* r : t.roots)
      root = root || (r->pid == pid && r->start_ticks == start);
    if (!root && (!oldest || start < *oldest)) oldest = start;
  }
  return oldest ? std::optional(double(*oldest) / procfs::ticks_per_second()) : std::nullopt;
}

// Seconds since boot (the first number of /proc/uptime).
std::optional<double> uptime_seconds(const std::string& proc_root) {
  std::string text;
  if (procfs::read_file(proc_root + "/uptime", text) != procfs::ReadStatus::kOk)
    return std::nullopt;
  double v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  return r.ec == std::errc() && v >= 0 ? std::optional(v) : std::nullopt;
}

}  // namespace

ServersCollector::ServersCollector(std::shared_ptr<ServerWatcher> servers, Log log,
                                   std::shared_ptr<ServerBoard> board)
    : SampledCollector(std::chrono::duration<double>(servers->config().interval_seconds), "servers",
                       std::move(log), std::move(board)),
      watcher_(std::move(servers)),
      resolver_(watcher_->config().proc_root, watcher_->config().mounts) {}

ServersCollector::~ServersCollector() {
  stop();
}

std::optional<SampleStats> ServersCollector::sample_stats() const {
  std::optional<SampleStats> s = IntervalCollector::sample_stats();
  for (const auto& [reason, n] : watcher_->errors()) s->errors[reason] += n;
  return s;
}

void ServersCollector::track_exits(const ServerProcesses::Tree& tree, Server& out) {
  RootState& r = roots_[tree.name];
  if (r.since == 0) r.since = unix_now_seconds();
  std::map<Member, RootTrack> now;
  for (const procfs::ProcStat* p : tree.roots) now[{p->pid, p->start_ticks}];
  for (const auto& [root, track] : r.roots) {
    if (now.contains(root)) continue;
    // Gone (or a zombie, or exiting): its cgroup's OOM kills since the last
    // sample say why.
    const std::optional<uint64_t> ooms =
        track.place ? cgroup::read_oom_kills(*track.place) : std::optional<uint64_t>();
    if (ooms && track.oom_kills && *ooms > *track.oom_kills)
      ++r.oom_kill_exits;
    else
      ++r.exits;
  }
  // The cgroup of each root is looked up at every sample: a server may move
  // into a cgroup of its own after it started.
  for (auto& [root, track] : now) {
    track.place = resolver_.own(root.first);
    if (track.place) track.oom_kills = cgroup::read_oom_kills(*track.place);
  }
  r.roots = std::move(now);
  out.exits = r.exits;
  out.oom_kill_exits = r.oom_kill_exits;
  out.exits_since = r.since;
}

ServersSample ServersCollector::take() {
  ServersSample out;
  out.time_seconds = unix_now_seconds();
  const std::shared_ptr<const ServersView> view =
      watcher_->view(std::chrono::duration<double>(watcher_->config().interval_seconds / 2), view_);
  view_ = view;
  out.boot_seconds = view->boot_seconds;
  std::set<std::string> names;
  const std::optional<double> uptime = uptime_seconds(watcher_->config().proc_root);
  for (const ServerProcesses::Tree& t : view->trees) {
    Server s;
    s.name = t.name;
    s.server_type = t.server_type;
    if (t.root != nullptr) s.root_pid = t.root->pid;
    for (const procfs::ProcStat* r : t.roots) s.root_pids.push_back(r->pid);
    s.escaped = t.escaped;
    if (const std::optional<double> start = oldest_start(t); start && uptime)
      s.oldest_process_seconds = std::max(0.0, *uptime - *start);
    track_exits(t, s);
    names.insert(t.name);
    out.servers.push_back(std::move(s));
  }
  // Servers that went (past their TTL, or out of sight) take their state.
  if (view->proc_ok)
    std::erase_if(roots_, [&](const auto& kv) { return !names.contains(kv.first); });
  out.unseen = view->unseen_declarers;
  return out;
}

std::shared_ptr<const ServerFigures> ServersCollector::figures(const ServersSample& s) const {
  auto f = std::make_shared<ServerFigures>();
  f->time_seconds = s.time_seconds;
  f->boot_seconds = s.boot_seconds;
  for (const Server& srv : s.servers) {
    if (!srv.root_pid) continue;  // gone: not a live server
    ServerFigures::Row& row = f->servers[srv.name];
    row.server_type = srv.server_type;
    row.pid = srv.root_pid;
    row.oldest_process_seconds = srv.oldest_process_seconds;
  }
  return f;
}

void ServersCollector::serve(const ServersSample& s, const Emit& emit) const {
  Families out;
  FamilyExtras exits_created;
  if (!s.servers.empty()) {
    auto [info, up, exits, escaped, oldest] =
        add_families(out, {"gym_server_info", "gym_server_up", "gym_server_exits_total",
                           "gym_server_escaped_processes", "gym_server_oldest_process_seconds"});
    for (const Server& srv : s.servers) {
      const LabelPairs l = server_labels(srv.name, srv.server_type);
      for (pid_t pid : srv.root_pids) {
        LabelPairs li = l;
        li.emplace_back("process_pid", std::to_string(pid));
        add_metric(*info, li).gauge.value = 1;
      }
      add_metric(*up, l).gauge.value = srv.root_pid ? 1 : 0;
      add_metric(*escaped, l).gauge.value = double(srv.escaped);
      if (srv.oldest_process_seconds)
        add_metric(*oldest, l).gauge.value = *srv.oldest_process_seconds;
      for (const auto& [reason, n] :
           {std::pair{"exited", srv.exits}, std::pair{"oom_kill", srv.oom_kill_exits}}) {
        LabelPairs le = l;
        le.emplace_back("reason", reason);
        add_metric(*exits, le).counter.value = double(n);
        exits_created.created.push_back(srv.exits_since);
      }
    }
  }
  add_simple(out, "gym_exporter_unseen_server_processes", double(s.unseen));
  for (const Family& f : out) {
    if (f.metric.empty()) continue;  // no root: no gym_server_info
    if (f.name == "gym_server_exits_total")
      emit(f, &exits_created);
    else
      emit(f);
  }
}

}  // namespace gym::exporter
