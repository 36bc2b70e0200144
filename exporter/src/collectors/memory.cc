#include "collectors/memory.h"

#include <unistd.h>

#include <algorithm>

#include "config.h"
#include "exposition/families.h"
#include "gym/contract.h"
#include "logging.h"
#include "yaml_reader.h"

using prometheus::MetricFamily;

namespace gym::exporter {

namespace {

LabelPairs server_labels(const std::string& name, const std::string& type) {
  return {{std::string(label::kServerName), name}, {std::string(label::kServerType), type}};
}

// A server's memory by memory_type, those it has.
std::vector<std::pair<const char*, uint64_t>> memory_types(const MemoryCollector::ServerMemory& s) {
  std::vector<std::pair<const char*, uint64_t>> out{{"rss", s.rss}};
  if (s.pss) out.emplace_back("pss", *s.pss);
  if (s.uss) out.emplace_back("uss", *s.uss);
  if (s.swap) out.emplace_back("swap", *s.swap);
  return out;
}

// Error reasons, all reported (0 until they happen).
const char* const kReasons[] = {"permission", "read", "parse", "pidfile", "proc", "meminfo"};

struct MemorySettings : CollectorSettings {
  MemoryConfig config;
};

std::shared_ptr<const CollectorSettings> parse_memory(YamlReader& rd, const YAML::Node& n) {
  auto s = std::make_shared<MemorySettings>();
  MemoryConfig& c = s->config;
  rd.mapping(
      n, "memory",
      {{"enabled", [&](const YAML::Node& v) { rd.boolean(v, "memory.enabled", s->enabled); }},
       {"interval_seconds",
        [&](const YAML::Node& v) {
          rd.number(v, "memory.interval_seconds", c.interval_seconds, 0.01);
        }},
       {"pss_interval_seconds",
        [&](const YAML::Node& v) {
          rd.number(v, "memory.pss_interval_seconds", c.pss_interval_seconds, 0);
        }},
       {"gone_server_ttl_seconds",
        [&](const YAML::Node& v) {
          rd.number(v, "memory.gone_server_ttl_seconds", c.gone_server_ttl_seconds, 0);
        }},
       {"proc_root", [&](const YAML::Node& v) { rd.string(v, "memory.proc_root", c.proc_root); }},
       {"targets",
        [&](const YAML::Node& v) { c.targets = read_server_targets(rd, v, "memory.targets"); }}});
  return s;
}

GYM_REGISTER_COLLECTOR({.name = "memory",
                        .order = 50,
                        .parse = parse_memory,
                        .make = [](const CollectorSettings* s, const CollectorContext& c) {
                          return std::make_unique<MemoryCollector>(
                              static_cast<const MemorySettings*>(s)->config, c.registry, c.warn);
                        }});

}  // namespace

MemoryConfig memory_config(const Config& c) {
  auto it = c.collectors.find("memory");
  if (it == c.collectors.end() || !it->second.settings) return {};
  return static_cast<const MemorySettings&>(*it->second.settings).config;
}

MemoryCollector::MemoryCollector(MemoryConfig config, std::shared_ptr<SharedRegistry> registry,
                                 Log log)
    : IntervalCollector(std::chrono::duration<double>(config.interval_seconds)),
      config_(std::move(config)),
      trees_(config_.targets, std::move(registry),
             [this](const std::string& reason, const std::string& detail) {
               count_error(reason, detail);
             }),
      log_(std::move(log)),
      resolver_(config_.proc_root) {
  for (const char* r : kReasons) errors_[r] = 0;
}

MemoryCollector::~MemoryCollector() {
  stop();
}

// Counted every time; logged once while it repeats sample after sample (a
// missing pidfile is one line, not one per interval).
void MemoryCollector::count_error(const std::string& reason, const std::string& detail) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++errors_[reason];
  }
  failing_now_.insert(detail);
  if (!failing_.contains(detail)) log_("memory sample: " + detail);
}

std::optional<MemoryCollector::Rollups> MemoryCollector::read_rollups(
    const std::vector<const procfs::ProcStat*>& live, const procfs::ProcessTable& table) {
  static const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  Rollups r;
  bool complete = true;
  std::string text;
  for (const procfs::ProcStat* p : live) {
    const std::string dir = table.proc_root() + "/" + std::to_string(p->pid);
    const std::string path = dir + "/smaps_rollup";
    switch (procfs::read_file(path, text)) {
      case procfs::ReadStatus::kOk: {
        const procfs::SmapsRollup one = procfs::parse_smaps_rollup(text);
        if (!one.pss) {
          complete = false;
          count_error("parse", "no Pss line in " + path);
          break;
        }
        r.rss += one.rss.value_or(p->rss_pages * page);
        r.pss += *one.pss;
        r.uss += one.uss;
        r.swap += one.swap;
        r.members.emplace_back(p->pid, p->start_ticks);
        break;
      }
      case procfs::ReadStatus::kGone: {
        // Exited while we read (gone, exiting, or a zombie until reaped): it
        // uses nothing now, in any type. A process that still runs has no
        // smaps_rollup (Linux before 4.14).
        if (procfs::read_file(dir + "/stat", text) != procfs::ReadStatus::kOk) break;
        const std::optional<procfs::ProcStat> now = procfs::parse_stat(text);
        if (!now || now->exiting() || now->start_ticks != p->start_ticks) break;
        complete = false;
        count_error("read", "no " + path + " (Linux 4.14 or later has it): RSS only");
        break;
      }
      case procfs::ReadStatus::kPermission:
        complete = false;
        count_error("permission", "cannot read " + path + " (permission)");
        break;
      case procfs::ReadStatus::kError:
        complete = false;
        count_error("read", "cannot read " + path);
        break;
    }
  }
  if (!complete) return std::nullopt;
  std::sort(r.members.begin(), r.members.end());
  return r;
}

MemoryCollector::ServerMemory MemoryCollector::measure(const ServerTrees::Server& server,
                                                       const procfs::ProcessTable& table,
                                                       bool pss_due) {
  ServerMemory m;
  m.name = server.name;
  m.server_type = server.server_type;
  if (server.root == nullptr) {  // gone: 0 processes and 0 bytes; CPU as counted
    if (server.pss) m.pss = m.uss = m.swap = 0;
    rollups_.erase(server.name);
    lineage_.erase(server.name);
    if (auto it = cpu_.find(server.name); it != cpu_.end()) {
      m.cpu_user_ticks = it->second.user;
      m.cpu_system_ticks = it->second.system;
      it->second.members.clear();
      it->second.departed.clear();
    }
    return m;
  }
  m.root_pid = server.root->pid;
  procfs::TreeUsage tree = procfs::tree_usage(table, *server.root);
  // Lineage: members of the last sample that left the tree (handed to init
  // or a subreaper when their parent exited) are still the server's, with
  // their descendants.
  std::vector<Member>& lineage = lineage_[server.name];
  std::vector<const procfs::ProcStat*> roots{server.root};
  for (const Member& was : lineage) {
    if (std::binary_search(tree.members.begin(), tree.members.end(), was)) continue;
    const procfs::ProcStat* p = table.find(was.first, was.second);
    if (p != nullptr && !p->zombie() && !p->kernel_thread()) roots.push_back(p);
  }
  if (roots.size() > 1) {
    const size_t in_tree = tree.live.size();
    tree = procfs::tree_usage(table, roots);
    m.escaped = tree.live.size() - in_tree;
  }
  lineage = tree.members;
  m.rss = tree.rss_bytes;
  m.processes = tree.live.size();
  m.threads = tree.threads;
  uint64_t fds = 0;
  bool all_fds = true;
  for (const procfs::ProcStat* p : tree.live) {
    const std::optional<uint64_t> n = procfs::count_open_fds(table.proc_root(), p->pid);
    if (n)
      fds += *n;
    else if (procfs::read_file(table.proc_root() + "/" + std::to_string(p->pid) + "/stat",
                               scratch_) != procfs::ReadStatus::kGone)
      all_fds = false;  // there, but not ours to list
  }
  if (all_fds) m.open_fds = fds;
  CpuState& cpu = cpu_[server.name];
  account_cpu(cpu, tree, table);
  m.cpu_user_ticks = cpu.user;
  m.cpu_system_ticks = cpu.system;
  if (!server.pss) return m;
  if (pss_due) {
    rollups_.erase(server.name);
    std::optional<Rollups> r = read_rollups(tree.live, table);
    if (!r) return m;  // RSS only
    // All of one read: RSS too, and only the processes that were read.
    m.rss = r->rss;
    m.processes = r->members.size();
    rollups_[server.name] = std::move(*r);
  }
  // Between PSS reads the last values stand while the tree is the same and
  // they still fit in its RSS.
  auto it = rollups_.find(server.name);
  if (it == rollups_.end()) return m;
  const Rollups& r = it->second;
  if (!pss_due && (r.members != tree.members || r.pss > m.rss)) return m;
  m.pss = r.pss;
  m.uss = r.uss;
  m.swap = r.swap;
  return m;
}

void MemoryCollector::account_cpu(CpuState& st, const procfs::TreeUsage& tree,
                                  const procfs::ProcessTable& table) {
  std::map<Member, Times> now;
  std::map<pid_t, Member> live;
  for (const procfs::ProcStat* p : tree.live) {
    const Member m{p->pid, p->start_ticks};
    now[m] = {p->ppid, p->utime_ticks, p->stime_ticks, p->cutime_ticks, p->cstime_ticks};
    live[p->pid] = m;
  }
  // Members that left since the last sample: their times go to their
  // parent's reaped-children times when (if) it reaps them.
  for (const auto& [m, t] : st.members) {
    if (now.contains(m)) continue;
    auto parent = live.find(t.ppid);
    if (parent == live.end()) continue;  // orphaned: init reaps it, not the tree
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

void MemoryCollector::track_exit(const ServerTrees::Server& server) {
  RootState& r = roots_[server.name];
  std::optional<Member> now;
  if (server.root != nullptr) now = Member{server.root->pid, server.root->start_ticks};
  if (r.root && r.root != now) {
    const std::optional<uint64_t> ooms =
        r.place ? cgroup::read_oom_kills(*r.place) : std::optional<uint64_t>();
    if (ooms && r.oom_kills && *ooms > *r.oom_kills)
      ++r.oom_kill_exits;
    else
      ++r.exits;
    r.looked = false;
    r.place.reset();
    r.oom_kills.reset();
  }
  r.root = now;
  if (!now) return;
  if (!r.looked) {
    r.place = resolver_.own(now->first);
    r.looked = true;
  }
  if (r.place) r.oom_kills = cgroup::read_oom_kills(*r.place);
}

void MemoryCollector::add_gone(std::vector<ServerMemory>& servers,
                               std::chrono::steady_clock::time_point now) {
  std::set<std::string> reported;
  for (const ServerMemory& s : servers) reported.insert(s.name);
  const auto ttl = std::chrono::duration<double>(config_.gone_server_ttl_seconds);
  for (auto it = declared_.begin(); it != declared_.end();) {
    const std::string& name = it->first;  // (lambdas cannot capture structured bindings)
    Declared& d = it->second;
    auto up = std::find_if(servers.begin(), servers.end(), [&](const ServerMemory& s) {
      return s.name == name && s.root_pid.has_value();
    });
    if (up != servers.end()) {
      d.gone_since.reset();
      ++it;
      continue;
    }
    if (!d.gone_since) d.gone_since = now;
    if (now - *d.gone_since > ttl) {
      rollups_.erase(name);
      cpu_.erase(name);
      roots_.erase(name);
      lineage_.erase(name);
      std::erase_if(servers, [&](const ServerMemory& s) { return s.name == name; });
      it = declared_.erase(it);
      continue;
    }
    if (!reported.contains(name)) {  // its segment is gone too
      ServerMemory zero;
      zero.name = name;
      zero.server_type = d.server_type;
      zero.pss = zero.uss = zero.swap = 0;
      if (auto c = cpu_.find(name); c != cpu_.end()) {
        zero.cpu_user_ticks = c->second.user;
        zero.cpu_system_ticks = c->second.system;
      }
      servers.push_back(std::move(zero));
    }
    ++it;
  }
}

std::optional<procfs::MemInfo> MemoryCollector::read_host() {
  std::string text;
  const std::string path = config_.proc_root + "/meminfo";
  if (procfs::read_file(path, text) != procfs::ReadStatus::kOk) {
    count_error("meminfo", "cannot read " + path);
    return std::nullopt;
  }
  procfs::MemInfo mi = procfs::parse_meminfo(text);
  if (mi.total && mi.available) return mi;
  count_error("meminfo", "no MemTotal or MemAvailable in " + path);
  return std::nullopt;
}

void MemoryCollector::sample() {
  const auto started = std::chrono::steady_clock::now();
  procfs::ProcessTable table(config_.proc_root);
  if (!table.scan(&stat_files_)) count_error("proc", "cannot list " + config_.proc_root);
  std::optional<procfs::MemInfo> host = read_host();
  const bool pss_due =
      !pss_ever_ || config_.pss_interval_seconds <= 0 ||
      std::chrono::duration<double>(started - last_pss_).count() >= config_.pss_interval_seconds;
  std::vector<ServerMemory> servers;
  for (const ServerTrees::Server& s : trees_.resolve(table)) {
    servers.push_back(measure(s, table, pss_due));
    track_exit(s);
    if (!s.configured) declared_[s.name].server_type = s.server_type;
  }
  add_gone(servers, started);
  for (ServerMemory& m : servers)
    if (auto r = roots_.find(m.name); r != roots_.end()) {
      m.exits = r->second.exits;
      m.oom_kill_exits = r->second.oom_kill_exits;
    }
  std::optional<uint64_t> host_oom_kills;
  if (procfs::read_file(config_.proc_root + "/vmstat", scratch_) == procfs::ReadStatus::kOk)
    host_oom_kills = cgroup::find_count(scratch_, "oom_kill");  // Linux 4.13 or later
  failing_.swap(failing_now_);
  failing_now_.clear();
  if (pss_due) {
    last_pss_ = started;
    pss_ever_ = true;
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (log_enabled(spdlog::level::debug))
    log_event(spdlog::level::debug, "memory sample",
              {{"servers", std::to_string(servers.size())},
               {"processes", std::to_string(table.processes().size())},
               {"pss", pss_due ? "read" : "kept"},
               {"took_seconds", fmt::format("{:.6f}", took)}});
  record(std::move(servers), host, host_oom_kills, took);
}

void MemoryCollector::record(std::vector<ServerMemory> servers, std::optional<procfs::MemInfo> host,
                             std::optional<uint64_t> host_oom_kills, double took) {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::pair<std::string, std::string>> reported;
  for (const ServerMemory& s : servers) {
    reported.emplace(s.name, s.server_type);
    for (const auto& [type, value] : memory_types(s)) {
      uint64_t& peak = peaks_[{s.name, s.server_type, type}];
      peak = std::max(peak, value);
    }
  }
  // Peaks go with their servers.
  std::erase_if(peaks_, [&](const auto& kv) {
    return !reported.contains({std::get<0>(kv.first), std::get<1>(kv.first)});
  });
  if (host)
    host_peak_ = std::max(host_peak_, *host->total - std::min(*host->total, *host->available));
  host_ = host;
  host_oom_kills_ = host_oom_kills;
  servers_ = std::move(servers);
  last_duration_ = took;
}

std::vector<MemoryCollector::ServerMemory> MemoryCollector::servers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return servers_;
}

void MemoryCollector::collect(const Emit& emit) {
  Families out;
  out.reserve(20);  // references to families stay valid while others are added
  std::lock_guard<std::mutex> lock(mu_);
  if (!servers_.empty()) {
    MetricFamily& usage = add_family(out, "gym_server_memory_usage_bytes");
    MetricFamily& processes = add_family(out, "gym_server_processes");
    MetricFamily& info = add_family(out, "gym_server_info");
    MetricFamily& up = add_family(out, "gym_server_up");
    MetricFamily& threads = add_family(out, "gym_server_threads");
    MetricFamily& fds = add_family(out, "gym_server_open_fds");
    MetricFamily& cpu = add_family(out, "gym_server_cpu_seconds_total");
    MetricFamily& exits = add_family(out, "gym_server_exits_total");
    MetricFamily& escaped = add_family(out, "gym_server_escaped_processes");
    static const double ticks_per_second = double(::sysconf(_SC_CLK_TCK));
    for (const ServerMemory& s : servers_) {
      LabelPairs l = server_labels(s.name, s.server_type);
      add_metric(processes, l).gauge.value = double(s.processes);
      if (s.root_pid) {
        LabelPairs li = l;
        li.emplace_back("process_pid", std::to_string(*s.root_pid));
        add_metric(info, li).gauge.value = 1;
      }
      add_metric(up, l).gauge.value = s.root_pid ? 1 : 0;
      add_metric(threads, l).gauge.value = double(s.threads);
      add_metric(escaped, l).gauge.value = double(s.escaped);
      if (s.open_fds) add_metric(fds, l).gauge.value = double(*s.open_fds);
      for (const auto& [mode, ticks] :
           {std::pair{"user", s.cpu_user_ticks}, std::pair{"system", s.cpu_system_ticks}}) {
        LabelPairs lc = l;
        lc.emplace_back("mode", mode);
        add_metric(cpu, lc).counter.value = double(ticks) / ticks_per_second;
      }
      for (const auto& [reason, n] :
           {std::pair{"exited", s.exits}, std::pair{"oom_kill", s.oom_kill_exits}}) {
        LabelPairs le = l;
        le.emplace_back("reason", reason);
        add_metric(exits, le).counter.value = double(n);
      }
      l.emplace_back("memory_type", "");
      for (const auto& [type, value] : memory_types(s)) {
        l.back().second = type;
        add_metric(usage, l).gauge.value = double(value);
      }
    }
    MetricFamily& peaks = add_family(out, "gym_server_memory_sampled_peak_bytes");
    for (const auto& [key, value] : peaks_) {
      const auto& [name, type, memory_type] = key;
      LabelPairs l = server_labels(name, type);
      l.emplace_back("memory_type", memory_type);
      add_metric(peaks, l).gauge.value = double(value);
    }
  }
  if (host_) {
    const uint64_t used = *host_->total - std::min(*host_->total, *host_->available);
    add_simple(out, "gym_host_memory_usage_bytes", double(used));
    add_simple(out, "gym_host_memory_available_bytes", double(*host_->available));
    add_simple(out, "gym_host_memory_total_bytes", double(*host_->total));
    add_simple(out, "gym_host_memory_sampled_peak_bytes", double(host_peak_));
  }
  if (host_oom_kills_) {
    add_metric(add_family(out, "gym_host_oom_kills_total"), {}).counter.value =
        double(*host_oom_kills_);
  }
  add_simple(out, "gym_exporter_memory_sample_duration_seconds", last_duration_);
  MetricFamily& errors = add_family(out, "gym_exporter_memory_sample_errors_total");
  for (const auto& [reason, n] : errors_)
    add_metric(errors, {{"reason", reason}}).counter.value = double(n);
  add_metric(add_family(out, "gym_exporter_memory_sample_overruns_total"), {}).counter.value =
      double(overruns());
  for (const MetricFamily& f : out) emit(f);
}

}  // namespace gym::exporter
