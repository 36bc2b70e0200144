#include "collectors/memory.h"

#include <unistd.h>

#include <algorithm>

#include "config.h"
#include "exposition/families.h"
#include "gym/contract.h"
#include "yaml_reader.h"

using prometheus::MetricFamily;

namespace gym::exporter {

namespace {

LabelPairs server_labels(const std::string& name, const std::string& type) {
  return {{std::string(label::kServerName), name}, {std::string(label::kServerType), type}};
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
      {{"interval_seconds",
        [&](const YAML::Node& v) {
          rd.number(v, "memory.interval_seconds", c.interval_seconds, 0.01);
        }},
       {"pss_interval_seconds",
        [&](const YAML::Node& v) {
          rd.number(v, "memory.pss_interval_seconds", c.pss_interval_seconds, 0);
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
      log_(std::move(log)) {
  for (const char* r : kReasons) errors_[r] = 0;
}

MemoryCollector::~MemoryCollector() {
  stop();
}

void MemoryCollector::count_error(const std::string& reason, const std::string& detail) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++errors_[reason];
  }
  log_("memory sample: " + detail);
}

std::optional<uint64_t> MemoryCollector::read_pss(
    const std::vector<const procfs::ProcStat*>& live, const procfs::ProcessTable& table,
    std::vector<std::pair<pid_t, uint64_t>>& read_members) {
  uint64_t pss = 0;
  bool complete = true;
  std::string text;
  for (const procfs::ProcStat* p : live) {
    const std::string path = table.proc_root() + "/" + std::to_string(p->pid) + "/smaps_rollup";
    switch (procfs::read_file(path, text)) {
      case procfs::ReadStatus::kOk:
        if (auto v = procfs::parse_smaps_rollup_pss(text)) {
          pss += *v;
          read_members.emplace_back(p->pid, p->start_ticks);
        } else {
          complete = false;
          count_error("parse", "no Pss line in " + path);
        }
        break;
      case procfs::ReadStatus::kGone:
        break;  // exited while we read: it uses nothing now
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
  std::sort(read_members.begin(), read_members.end());
  return pss;
}

MemoryCollector::ServerMemory MemoryCollector::measure(const ServerTrees::Server& server,
                                                       const procfs::ProcessTable& table,
                                                       bool pss_due) {
  ServerMemory m;
  m.name = server.name;
  m.server_type = server.server_type;
  PssState& state = pss_[server.name];
  if (server.root == nullptr) {  // gone: 0 processes and 0 bytes
    if (server.pss) m.pss = 0;
    state.last_pss.reset();
    return m;
  }
  m.root_pid = server.root->pid;
  procfs::TreeUsage tree = procfs::tree_usage(table, *server.root);
  m.rss = tree.rss_bytes;
  m.processes = tree.live.size();
  const std::vector<const procfs::ProcStat*>& live = tree.live;
  const std::vector<std::pair<pid_t, uint64_t>>& members = tree.members;
  if (!server.pss) return m;
  if (pss_due) {
    std::vector<std::pair<pid_t, uint64_t>> read_members;
    state.last_pss = read_pss(live, table, read_members);
    state.members = std::move(read_members);
    m.pss = state.last_pss;
    return m;
  }
  // Between PSS reads the last value stands, while the tree is the same.
  if (state.last_pss && state.members == members) m.pss = state.last_pss;
  return m;
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
  if (!table.scan()) count_error("proc", "cannot list " + config_.proc_root);
  std::optional<procfs::MemInfo> host = read_host();
  const bool pss_due =
      !pss_ever_ || config_.pss_interval_seconds <= 0 ||
      std::chrono::duration<double>(started - last_pss_).count() >= config_.pss_interval_seconds;
  std::vector<ServerMemory> servers;
  for (const ServerTrees::Server& s : trees_.resolve(table))
    servers.push_back(measure(s, table, pss_due));
  if (pss_due) {
    last_pss_ = started;
    pss_ever_ = true;
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  record(std::move(servers), host, took);
}

void MemoryCollector::record(std::vector<ServerMemory> servers, std::optional<procfs::MemInfo> host,
                             double took) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const ServerMemory& s : servers) {
    uint64_t& rss_peak = peaks_[{s.name, s.server_type, "rss"}];
    rss_peak = std::max(rss_peak, s.rss);
    if (s.pss) {
      uint64_t& pss_peak = peaks_[{s.name, s.server_type, "pss"}];
      pss_peak = std::max(pss_peak, *s.pss);
    }
  }
  if (host)
    host_peak_ = std::max(host_peak_, *host->total - std::min(*host->total, *host->available));
  host_ = host;
  servers_ = std::move(servers);
  last_duration_ = took;
}

std::vector<MemoryCollector::ServerMemory> MemoryCollector::servers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return servers_;
}

void MemoryCollector::collect(const Emit& emit) {
  Families out;
  out.reserve(12);  // references to families stay valid while others are added
  std::lock_guard<std::mutex> lock(mu_);
  if (!servers_.empty()) {
    MetricFamily& usage = add_family(out, "gym_server_memory_usage_bytes");
    MetricFamily& processes = add_family(out, "gym_server_processes");
    MetricFamily& info = add_family(out, "gym_server_info");
    for (const ServerMemory& s : servers_) {
      LabelPairs l = server_labels(s.name, s.server_type);
      add_metric(processes, l).gauge.value = double(s.processes);
      if (s.root_pid) {
        LabelPairs li = l;
        li.emplace_back("process_pid", std::to_string(*s.root_pid));
        add_metric(info, li).gauge.value = 1;
      }
      l.emplace_back("memory_type", "rss");
      add_metric(usage, l).gauge.value = double(s.rss);
      if (s.pss) {
        l.back().second = "pss";
        add_metric(usage, l).gauge.value = double(*s.pss);
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
  add_simple(out, "gym_exporter_memory_sample_duration_seconds", last_duration_);
  MetricFamily& errors = add_family(out, "gym_exporter_memory_sample_errors_total");
  for (const auto& [reason, n] : errors_)
    add_metric(errors, {{"reason", reason}}).counter.value = double(n);
  for (const MetricFamily& f : out) emit(f);
}

}  // namespace gym::exporter
