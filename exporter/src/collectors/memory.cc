#include "collectors/memory.h"

#include <unistd.h>

#include <algorithm>

#include "config.h"
#include "contract/families.h"
#include "gym/contract.h"
#include "logging.h"

using prometheus::MetricFamily;

namespace gym::exporter {

namespace {

// A server's memory by memory_type, those it has.
std::vector<std::pair<const char*, uint64_t>> memory_types(const MemoryCollector::ServerMemory& s) {
  std::vector<std::pair<const char*, uint64_t>> out{{"rss", s.rss}};
  const std::pair<const char*, const std::optional<uint64_t>*> kinds[] = {
      {"pss", &s.pss},           {"uss", &s.uss},           {"swap", &s.swap},
      {"rss_anon", &s.rss_anon}, {"rss_file", &s.rss_file}, {"rss_shmem", &s.rss_shmem}};
  for (const auto& [type, value] : kinds)
    if (*value) out.emplace_back(type, **value);
  return out;
}

GYM_REGISTER_COLLECTOR(sampled_kind<MemorySettings>(
    "memory", 50,
    {{"pss_interval_seconds", &MemorySettings::pss_interval_seconds},
     {"pss_max_stall_seconds", &MemorySettings::max_stall},
     {"pss_max_stall_fraction", &MemorySettings::max_fraction},
     {"pss_stall_seconds_per_gib", &MemorySettings::per_gib},
     {"pss_max_cpu_fraction", &MemorySettings::max_cpu}},
    [](const MemorySettings& m, const CollectorContext& c) {
      return std::make_unique<MemoryCollector>(m.config(), c.servers, c.warn, c.board);
    }));

}  // namespace

MemoryCollector::MemoryCollector(MemoryConfig config, std::shared_ptr<ServerWatcher> servers,
                                 Log log, std::shared_ptr<ServerBoard> board)
    : SampledCollector(std::chrono::duration<double>(config.interval_seconds), "memory",
                       std::move(log), std::move(board)),
      config_(config),
      watcher_(std::move(servers)),
      stall_(config.budget.prior_seconds_per_gib) {
  error_reasons({"permission", "read", "parse", "meminfo"});
}

MemoryCollector::~MemoryCollector() {
  stop();
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
    const auto began = std::chrono::steady_clock::now();
    const procfs::ReadStatus read = procfs::read_file(path, text);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - began;
    switch (read) {
      case procfs::ReadStatus::kOk: {
        const procfs::SmapsRollup one = procfs::parse_smaps_rollup(text);
        stall_.observe(one.rss.value_or(p->rss_pages * page), took.count());
        pss_spent_ += took.count();
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

namespace {
// The RSS of `live` into `m`, with its split into anonymous, file and shared
// memory, from each one's status: Linux 6.x sums its counters exactly (as
// statm and smaps_rollup), without the memory lock; stat's field 24, read
// by the walk, reads per-CPU counters without summing them (0.25-0.45% low).
// A process gone since the walk counts nothing; one without a status that
// has the four lines counts its statm's (or, with no statm either while its
// directory is there: a fixture tree, its stat's), and leaves the split out.
void read_resident(const std::vector<const procfs::ProcStat*>& live,
                   const procfs::ProcessTable& table, MemoryCollector::ServerMemory& m) {
  static const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  uint64_t anon = 0, file = 0, shmem = 0;
  bool split = true;
  m.rss = 0;
  std::string text;
  for (const procfs::ProcStat* p : live) {
    const std::string dir = table.proc_root() + "/" + std::to_string(p->pid);
    procfs::ReadStatus read = procfs::read_file(dir + "/status", text);
    if (read == procfs::ReadStatus::kOk) {
      const procfs::StatusMemory st = procfs::parse_status_memory(text);
      if (st.rss && st.anon && st.file && st.shmem) {
        m.rss += *st.rss;
        anon += *st.anon;
        file += *st.file;
        shmem += *st.shmem;
        continue;
      }
    }
    // Gone since the walk: it uses nothing now, in any kind.
    if (read == procfs::ReadStatus::kGone && ::access(dir.c_str(), F_OK) != 0) continue;
    split = false;
    read = procfs::read_file(dir + "/statm", text);
    const std::optional<procfs::Statm> sm =
        read == procfs::ReadStatus::kOk ? procfs::parse_statm(text) : std::nullopt;
    if (sm)
      m.rss += sm->resident_pages * page;
    else if (read != procfs::ReadStatus::kGone || ::access(dir.c_str(), F_OK) == 0)
      m.rss += p->rss_pages * page;
  }
  if (!split) return;
  m.rss_anon = anon;
  m.rss_file = file;
  m.rss_shmem = shmem;
}
}  // namespace

PssVerdict MemoryCollector::judge(const ServerProcesses::Tree& tree, PssState& state) {
  static const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  // Each read stops only its own process: the tree's largest member sets its
  // pace (its RSS as the walk read it, from statm: no lock taken).
  double worst = 0;
  for (const procfs::ProcStat* p : tree.usage.live)
    worst = std::max(worst, stall_.predict(p->rss_pages * page));
  std::optional<double> since;
  if (state.last_read)
    since = std::chrono::duration<double>(sample_started_ - *state.last_read).count();
  const bool budget_left = pss_spent_ < config_.budget.max_cpu_fraction * config_.interval_seconds;
  const PssVerdict v =
      pss_verdict(config_.budget, worst, since, tree.pss.value_or(false), budget_left);
  if (v == PssVerdict::kRefused) ++state.refused;
  if (v == PssVerdict::kDeferred) ++state.deferred;
  if (v == PssVerdict::kBusy) ++state.busy;
  return v;
}

MemoryCollector::ServerMemory MemoryCollector::measure(const ServerProcesses::Tree& tree,
                                                       const procfs::ProcessTable& table,
                                                       bool pss_due) {
  ServerMemory m;
  m.name = tree.name;
  m.server_type = tree.server_type;
  m.pss_wanted = tree.pss.value_or(true);
  if (tree.root == nullptr) {  // gone: 0 processes and 0 bytes
    if (m.pss_wanted) m.pss = m.uss = m.swap = 0;
    rollups_.erase(tree.name);
  } else {
    m.up = true;
    m.processes = tree.usage.live.size();
    read_resident(tree.usage.live, table, m);
    if (m.pss_wanted) measure_pss(tree, table, pss_due, m);
  }
  const PssState& state = pss_[tree.name];
  m.pss_reads = state.reads;
  m.pss_refused = state.refused;
  m.pss_deferred = state.deferred;
  m.pss_busy = state.busy;
  return m;
}

void MemoryCollector::measure_pss(const ServerProcesses::Tree& tree,
                                  const procfs::ProcessTable& table, bool pss_due,
                                  ServerMemory& m) {
  PssState& state = pss_[tree.name];
  const PssVerdict verdict = pss_due ? judge(tree, state) : PssVerdict::kDeferred;
  if (verdict == PssVerdict::kRefused) rollups_.erase(tree.name);
  const bool fresh = pss_due && verdict == PssVerdict::kRead;
  if (fresh) {
    rollups_.erase(tree.name);
    state.last_read = sample_started_;
    ++state.reads;
    std::optional<Rollups> r = read_rollups(tree.usage.live, table);
    if (!r) return;  // RSS only
    // All of one read: RSS too, and only the processes that were read.
    m.rss = r->rss;
    m.processes = r->members.size();
    rollups_[tree.name] = std::move(*r);
  }
  // Between PSS reads the last values stand while the tree is the same and
  // they still fit in its RSS.
  auto it = rollups_.find(tree.name);
  if (it == rollups_.end()) return;
  const Rollups& r = it->second;
  if (!fresh && (r.members != tree.usage.members || r.pss > m.rss)) return;
  m.pss = r.pss;
  m.uss = r.uss;
  m.swap = r.swap;
}

std::optional<procfs::MemInfo> MemoryCollector::read_host() {
  std::string text;
  const std::string path = watcher_->config().proc_root + "/meminfo";
  if (procfs::read_file(path, text) != procfs::ReadStatus::kOk) {
    count_error("meminfo", "cannot read " + path);
    return std::nullopt;
  }
  procfs::MemInfo mi = procfs::parse_meminfo(text);
  if (mi.total && mi.available) return mi;
  count_error("meminfo", "no MemTotal or MemAvailable in " + path);
  return std::nullopt;
}

MemorySample MemoryCollector::take() {
  const auto started = std::chrono::steady_clock::now();
  sample_started_ = started;
  MemorySample out;
  out.time_seconds = unix_now_seconds();
  const std::shared_ptr<const ServersView> view =
      watcher_->view(std::chrono::duration<double>(config_.interval_seconds / 2), view_);
  view_ = view;
  const std::string& proc_root = watcher_->config().proc_root;
  out.host = read_host();
  const bool pss_due =
      !pss_ever_ || config_.pss_interval_seconds <= 0 ||
      std::chrono::duration<double>(started - last_pss_).count() >= config_.pss_interval_seconds;
  std::set<std::string> names;
  pss_spent_ = 0;
  // The trees read longest ago (or never) first: they get this sample's
  // reading budget; the servers keep the view's order.
  std::vector<size_t> order(view->trees.size());
  std::vector<std::optional<std::chrono::steady_clock::time_point>> last(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
    if (auto it = pss_.find(view->trees[i].name); it != pss_.end()) last[i] = it->second.last_read;
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return last[a] < last[b]; });
  out.servers.resize(order.size());
  for (size_t i : order) {
    out.servers[i] = measure(view->trees[i], view->table, pss_due);
    names.insert(view->trees[i].name);
  }
  // Servers that went (past their TTL, or out of sight) take their state.
  if (view->proc_ok) {
    std::erase_if(rollups_, [&](const auto& kv) { return !names.contains(kv.first); });
    std::erase_if(pss_, [&](const auto& kv) { return !names.contains(kv.first); });
  }
  out.pss_seconds_per_gib = stall_.seconds_per_gib();
  if (procfs::read_file(proc_root + "/vmstat", scratch_) == procfs::ReadStatus::kOk)
    out.host_oom_kills = cgroup::find_count(scratch_, "oom_kill");  // Linux 4.13 or later
  out.host_oom_since = view->boot_seconds;
  if (pss_due) {
    last_pss_ = started;
    pss_ever_ = true;
  }
  // Peaks go with their servers.
  std::set<std::pair<std::string, std::string>> reported;
  for (const ServerMemory& s : out.servers) {
    reported.emplace(s.name, s.server_type);
    for (const auto& [type, value] : memory_types(s)) {
      uint64_t& peak = peaks_[{s.name, s.server_type, type}];
      peak = std::max(peak, value);
    }
  }
  std::erase_if(peaks_, [&](const auto& kv) {
    return !reported.contains({std::get<0>(kv.first), std::get<1>(kv.first)});
  });
  out.peaks = peaks_;
  if (out.host)
    host_peak_ =
        std::max(host_peak_, *out.host->total - std::min(*out.host->total, *out.host->available));
  out.host_peak = host_peak_;
  out.watcher_errors = watcher_->errors();
  if (log_enabled(spdlog::level::debug))
    log_event(
        spdlog::level::debug, "memory sample",
        {{"servers", std::to_string(out.servers.size())},
         {"processes", std::to_string(view->table.processes().size())},
         {"pss", pss_due ? "read" : "kept"},
         {"took_seconds",
          fmt::format(
              "{:.6f}",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count())}});
  return out;
}

std::shared_ptr<const ServerFigures> MemoryCollector::figures(const MemorySample& s) const {
  auto f = std::make_shared<ServerFigures>();
  f->time_seconds = s.time_seconds;
  for (const ServerMemory& m : s.servers) {
    if (!m.up) continue;  // gone: not a live server's figures
    ServerFigures::Row& row = f->servers[m.name];
    row.server_type = m.server_type;
    row.rss_bytes = m.rss;
    row.processes = m.processes;
  }
  return f;
}

void MemoryCollector::serve(const MemorySample& s, const Emit& emit) const {
  Families out;
  if (!s.servers.empty()) {
    auto [usage, processes] =
        add_families(out, {"gym_server_memory_usage_bytes", "gym_server_processes"});
    for (const ServerMemory& m : s.servers) {
      LabelPairs l = server_labels(m.name, m.server_type);
      add_metric(*processes, l).gauge.value = double(m.processes);
      l.emplace_back("memory_type", "");
      for (const auto& [type, value] : memory_types(m)) {
        l.back().second = type;
        add_metric(*usage, l).gauge.value = double(value);
      }
    }
    auto [reads, skips] = add_families(
        out, {"gym_server_memory_pss_reads_total", "gym_server_memory_pss_skips_total"});
    for (const ServerMemory& m : s.servers) {
      if (!m.pss_wanted) continue;
      LabelPairs l = server_labels(m.name, m.server_type);
      add_metric(*reads, l).counter.value = double(m.pss_reads);
      l.emplace_back("reason", "stall_cap");
      add_metric(*skips, l).counter.value = double(m.pss_refused);
      l.back().second = "stall_budget";
      add_metric(*skips, l).counter.value = double(m.pss_deferred);
      l.back().second = "exporter_budget";
      add_metric(*skips, l).counter.value = double(m.pss_busy);
    }
    MetricFamily& peaks = add_family(out, "gym_server_memory_sampled_peak_bytes");
    for (const auto& [key, value] : s.peaks) {
      const auto& [name, type, memory_type] = key;
      LabelPairs l = server_labels(name, type);
      l.emplace_back("memory_type", memory_type);
      add_metric(peaks, l).gauge.value = double(value);
    }
  }
  if (s.host) {
    const uint64_t used = *s.host->total - std::min(*s.host->total, *s.host->available);
    add_simple(out, "gym_host_memory_usage_bytes", double(used));
    add_simple(out, "gym_host_memory_available_bytes", double(*s.host->available));
    add_simple(out, "gym_host_memory_total_bytes", double(*s.host->total));
    add_simple(out, "gym_host_memory_sampled_peak_bytes", double(s.host_peak));
  }
  add_simple(out, "gym_exporter_pss_stall_seconds_per_gib", s.pss_seconds_per_gib);
  if (s.host_oom_kills)
    add_metric(add_family(out, "gym_host_oom_kills_total"), {}).counter.value =
        double(*s.host_oom_kills);
  // Aliases of gym_exporter_collector_sample_*{collector="memory"} (and the
  // servers unit's errors, which this family counted) for one release.
  add_simple(out, "gym_exporter_memory_sample_duration_seconds", last_duration());
  MetricFamily& errors = add_family(out, "gym_exporter_memory_sample_errors_total");
  std::map<std::string, uint64_t> all = error_counts();
  for (const auto& [reason, n] : s.watcher_errors) all[reason] += n;
  for (const auto& [reason, n] : all)
    add_metric(errors, {{"reason", reason}}).counter.value = double(n);
  add_metric(add_family(out, "gym_exporter_memory_sample_overruns_total"), {}).counter.value =
      double(overruns());
  // Since when each counter counts: the host's OOM kills from the boot, this
  // collector's own from its start.
  for (const Family& f : out)
    emit_since(emit, f, f.name == "gym_host_oom_kills_total" ? s.host_oom_since : since());
}

}  // namespace gym::exporter
