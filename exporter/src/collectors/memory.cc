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

// A server's memory by memory_type, those it has.
std::vector<std::pair<const char*, uint64_t>> memory_types(const MemoryCollector::ServerMemory& s) {
  std::vector<std::pair<const char*, uint64_t>> out{{"rss", s.rss}};
  if (s.pss) out.emplace_back("pss", *s.pss);
  if (s.uss) out.emplace_back("uss", *s.uss);
  if (s.swap) out.emplace_back("swap", *s.swap);
  return out;
}

// Error reasons, all reported (0 until they happen).
const char* const kReasons[] = {"permission", "read",    "parse",  "pidfile",
                                "proc",       "meminfo", "cgroup", "adoption"};

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
                              static_cast<const MemorySettings*>(s)->config, c.registry, c.warn,
                              c.servers);
                        }});

}  // namespace

MemoryConfig memory_config(const Config& c) {
  auto it = c.collectors.find("memory");
  if (it == c.collectors.end() || !it->second.settings) return {};
  return static_cast<const MemorySettings&>(*it->second.settings).config;
}

WatcherConfig watcher_config(const MemoryConfig& m, std::optional<cgroup::Mounts> mounts) {
  return {m.proc_root, m.targets, m.gone_server_ttl_seconds, std::move(mounts)};
}

MemoryCollector::MemoryCollector(MemoryConfig config, std::shared_ptr<SharedRegistry> registry,
                                 Log log, std::shared_ptr<ServerWatcher> servers)
    : IntervalCollector(std::chrono::duration<double>(config.interval_seconds)),
      config_(std::move(config)),
      watcher_(servers ? std::move(servers)
                       : std::make_shared<ServerWatcher>(watcher_config(config_, std::nullopt),
                                                         std::move(registry))),
      log_(std::move(log)),
      resolver_(config_.proc_root, watcher_->config().mounts) {
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

MemoryCollector::ServerMemory MemoryCollector::measure(const ServerProcesses::Tree& tree,
                                                       const procfs::ProcessTable& table,
                                                       bool pss_due) {
  ServerMemory m;
  m.name = tree.name;
  m.server_type = tree.server_type;
  if (tree.root == nullptr) {  // gone: 0 processes and 0 bytes
    if (tree.pss) m.pss = m.uss = m.swap = 0;
    rollups_.erase(tree.name);
    return m;
  }
  m.root_pid = tree.root->pid;
  for (const procfs::ProcStat* r : tree.roots) m.root_pids.push_back(r->pid);
  m.rss = tree.usage.rss_bytes;
  m.processes = tree.usage.live.size();
  m.escaped = tree.escaped;
  if (!tree.pss) return m;
  if (pss_due) {
    rollups_.erase(tree.name);
    std::optional<Rollups> r = read_rollups(tree.usage.live, table);
    if (!r) return m;  // RSS only
    // All of one read: RSS too, and only the processes that were read.
    m.rss = r->rss;
    m.processes = r->members.size();
    rollups_[tree.name] = std::move(*r);
  }
  // Between PSS reads the last values stand while the tree is the same and
  // they still fit in its RSS.
  auto it = rollups_.find(tree.name);
  if (it == rollups_.end()) return m;
  const Rollups& r = it->second;
  if (!pss_due && (r.members != tree.usage.members || r.pss > m.rss)) return m;
  m.pss = r.pss;
  m.uss = r.uss;
  m.swap = r.swap;
  return m;
}

void MemoryCollector::track_exit(const ServerProcesses::Tree& tree) {
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
  const std::shared_ptr<const ServersView> view =
      watcher_->view(std::chrono::duration<double>(config_.interval_seconds / 2), view_);
  view_ = view;
  {  // its problems (a view is never handed to a collector twice)
    for (const auto& [reason, detail] : view->errors) {
      if (reason == "namespace") {  // not an error of ours: said once, counted as unseen
        log_("memory sample: " + detail);
        continue;
      }
      count_error(reason, detail);
    }
  }
  std::optional<procfs::MemInfo> host = read_host();
  const bool pss_due =
      !pss_ever_ || config_.pss_interval_seconds <= 0 ||
      std::chrono::duration<double>(started - last_pss_).count() >= config_.pss_interval_seconds;
  std::vector<ServerMemory> servers;
  std::set<std::string> names;
  for (const ServerProcesses::Tree& t : view->trees) {
    servers.push_back(measure(t, view->table, pss_due));
    track_exit(t);
    names.insert(t.name);
  }
  // Servers that went (past their TTL, or out of sight) take their state.
  if (view->proc_ok) {
    std::erase_if(rollups_, [&](const auto& kv) { return !names.contains(kv.first); });
    std::erase_if(roots_, [&](const auto& kv) { return !names.contains(kv.first); });
  }
  for (ServerMemory& m : servers)
    if (auto r = roots_.find(m.name); r != roots_.end()) {
      m.exits = r->second.exits;
      m.oom_kill_exits = r->second.oom_kill_exits;
      m.exits_since = r->second.since;
    }
  std::optional<uint64_t> host_oom_kills;
  if (procfs::read_file(config_.proc_root + "/vmstat", scratch_) == procfs::ReadStatus::kOk)
    host_oom_kills = cgroup::find_count(scratch_, "oom_kill");  // Linux 4.13 or later
  if (boot_seconds_ == 0 &&
      procfs::read_file(config_.proc_root + "/stat", scratch_) == procfs::ReadStatus::kOk)
    if (const std::optional<uint64_t> btime = procfs::parse_btime(scratch_)) boot_seconds_ = *btime;
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
               {"processes", std::to_string(view->table.processes().size())},
               {"pss", pss_due ? "read" : "kept"},
               {"took_seconds", fmt::format("{:.6f}", took)}});
  record(std::move(servers), host, host_oom_kills, took);
  record_unseen(view->unseen_declarers);
}

void MemoryCollector::record_unseen(uint64_t unseen) {
  std::lock_guard<std::mutex> lock(mu_);
  unseen_ = unseen;
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
  host_oom_since_ = boot_seconds_;
  servers_ = std::move(servers);
  last_duration_ = took;
}

std::vector<MemoryCollector::ServerMemory> MemoryCollector::servers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return servers_;
}

void MemoryCollector::collect(const Emit& emit) {
  FamilyExtras exits_created;
  Families out;
  std::lock_guard<std::mutex> lock(mu_);
  if (!servers_.empty()) {
    MetricFamily& usage = add_family(out, "gym_server_memory_usage_bytes");
    MetricFamily& processes = add_family(out, "gym_server_processes");
    MetricFamily& info = add_family(out, "gym_server_info");
    MetricFamily& up = add_family(out, "gym_server_up");
    MetricFamily& exits = add_family(out, "gym_server_exits_total");
    MetricFamily& escaped = add_family(out, "gym_server_escaped_processes");
    exits_created.created.clear();
    for (const ServerMemory& s : servers_) {
      LabelPairs l = server_labels(s.name, s.server_type);
      add_metric(processes, l).gauge.value = double(s.processes);
      for (pid_t pid : s.root_pids) {
        LabelPairs li = l;
        li.emplace_back("process_pid", std::to_string(pid));
        add_metric(info, li).gauge.value = 1;
      }
      add_metric(up, l).gauge.value = s.root_pid ? 1 : 0;
      add_metric(escaped, l).gauge.value = double(s.escaped);
      for (const auto& [reason, n] :
           {std::pair{"exited", s.exits}, std::pair{"oom_kill", s.oom_kill_exits}}) {
        LabelPairs le = l;
        le.emplace_back("reason", reason);
        add_metric(exits, le).counter.value = double(n);
        exits_created.created.push_back(s.exits_since);
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
  add_simple(out, "gym_exporter_unseen_server_processes", double(unseen_));
  MetricFamily& errors = add_family(out, "gym_exporter_memory_sample_errors_total");
  for (const auto& [reason, n] : errors_)
    add_metric(errors, {{"reason", reason}}).counter.value = double(n);
  add_metric(add_family(out, "gym_exporter_memory_sample_overruns_total"), {}).counter.value =
      double(overruns());
  // Since when each counter counts: exits per server from when it was first
  // tracked, the host's OOM kills from the boot, this collector's own from
  // its start.
  for (const Family& f : out) {
    if (f.name == "gym_server_exits_total")
      emit(f, &exits_created);
    else
      emit_since(emit, f, f.name == "gym_host_oom_kills_total" ? host_oom_since_ : since_);
  }
}

}  // namespace gym::exporter
