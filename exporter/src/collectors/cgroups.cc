#include "collectors/cgroups.h"

#include "collectors/memory.h"
#include "config.h"
#include "exposition/families.h"
#include "gym/contract.h"
#include "yaml_reader.h"

using prometheus::MetricFamily;

namespace gym::exporter {

namespace {

struct CgroupSettings : CollectorSettings {
  CgroupConfig config;
};

std::shared_ptr<const CollectorSettings> parse_cgroup(YamlReader& rd, const YAML::Node& n) {
  auto s = std::make_shared<CgroupSettings>();
  CgroupConfig& c = s->config;
  rd.mapping(
      n, "cgroup",
      {{"enabled", [&](const YAML::Node& v) { rd.boolean(v, "cgroup.enabled", s->enabled); }},
       {"interval_seconds",
        [&](const YAML::Node& v) {
          rd.number(v, "cgroup.interval_seconds", c.interval_seconds, 0.01);
        }},
       {"v2_mount", [&](const YAML::Node& v) { rd.string(v, "cgroup.v2_mount", c.v2_mount); }},
       {"v1_memory_mount",
        [&](const YAML::Node& v) { rd.string(v, "cgroup.v1_memory_mount", c.v1_memory_mount); }}});
  return s;
}

GYM_REGISTER_COLLECTOR({.name = "cgroup",
                        .order = 55,
                        .parse = parse_cgroup,
                        .make = [](const CollectorSettings* s, const CollectorContext& c) {
                          CgroupConfig config = static_cast<const CgroupSettings*>(s)->config;
                          const MemoryConfig memory =
                              c.config ? memory_config(*c.config) : MemoryConfig{};
                          config.proc_root = memory.proc_root;
                          config.targets = memory.targets;
                          return std::make_unique<CgroupCollector>(std::move(config), c.registry,
                                                                   c.warn, c.servers);
                        }});

std::optional<cgroup::Mounts> mounts_of(const CgroupConfig& c) {
  if (c.v2_mount.empty() && c.v1_memory_mount.empty()) return std::nullopt;
  cgroup::Mounts m;
  m.v2 = c.v2_mount;
  m.v1_memory = c.v1_memory_mount;
  return m;
}

}  // namespace

std::optional<cgroup::Mounts> cgroup_mounts(const Config& c) {
  auto it = c.collectors.find("cgroup");
  if (it == c.collectors.end() || !it->second.settings) return std::nullopt;
  return mounts_of(static_cast<const CgroupSettings&>(*it->second.settings).config);
}

void CgroupCollector::Counter::add(std::optional<uint64_t> now) {
  if (!now) return;
  total += last && *now >= *last ? *now - *last : *now;
  last = now;
}

CgroupCollector::CgroupCollector(CgroupConfig config, std::shared_ptr<SharedRegistry> registry,
                                 Log log, std::shared_ptr<ServerWatcher> servers)
    : IntervalCollector(std::chrono::duration<double>(config.interval_seconds)),
      config_(std::move(config)),
      // Problems of the watcher are the memory collector's to count and log.
      watcher_(servers
                   ? std::move(servers)
                   : std::make_shared<ServerWatcher>(
                         WatcherConfig{config_.proc_root, config_.targets, 300, mounts_of(config_)},
                         std::move(registry))),
      resolver_(config_.proc_root, mounts_of(config_)),
      log_(std::move(log)) {}

CgroupCollector::~CgroupCollector() {
  stop();
}

void CgroupCollector::count_error(const std::string& detail) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++errors_;
  }
  failing_now_.insert(detail);
  if (!failing_.contains(detail)) log_("cgroup sample: " + detail);
}

void CgroupCollector::sample() {
  const std::shared_ptr<const ServersView> view =
      watcher_->view(std::chrono::duration<double>(config_.interval_seconds / 2), view_);
  view_ = view;
  std::map<std::string, ServerCgroup> next;
  for (const ServerProcesses::Tree& s : view->trees) {
    if (s.root == nullptr) continue;
    std::optional<cgroup::Place> place = resolver_.own(s.root->pid);
    if (!place) continue;
    auto before = state_.find(s.name);
    ServerCgroup c = before == state_.end() ? ServerCgroup{} : before->second;
    if (!(c.place == *place)) {  // a cgroup new to this server adds all of its counts
      c.oom_kills.last.reset();
      c.pressure_some_us.last.reset();
      c.pressure_full_us.last.reset();
    }
    c.name = s.name;
    c.server_type = s.server_type;
    c.place = *place;
    c.memory = cgroup::read_memory(*place);
    if (!c.memory.exists) continue;  // removed since the process was looked up
    if (!c.memory.current) count_error("cannot read the memory usage of cgroup " + place->dir);
    c.oom_kills.add(c.memory.oom_kills);
    c.pressure_some_us.add(c.memory.pressure.some ? std::optional(c.memory.pressure.some->total_us)
                                                  : std::nullopt);
    c.pressure_full_us.add(c.memory.pressure.full ? std::optional(c.memory.pressure.full->total_us)
                                                  : std::nullopt);
    next[s.name] = std::move(c);
  }
  state_ = next;
  failing_.swap(failing_now_);
  failing_now_.clear();
  std::vector<ServerCgroup> servers;
  for (auto& [name, c] : next) servers.push_back(std::move(c));
  std::lock_guard<std::mutex> lock(mu_);
  servers_ = std::move(servers);
}

std::vector<CgroupCollector::ServerCgroup> CgroupCollector::servers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return servers_;
}

void CgroupCollector::collect(const Emit& emit) {
  Families out;
  std::lock_guard<std::mutex> lock(mu_);
  if (!servers_.empty()) {
    MetricFamily& info = add_family(out, "gym_server_cgroup_info");
    MetricFamily& usage = add_family(out, "gym_server_cgroup_memory_usage_bytes");
    MetricFamily& peak = add_family(out, "gym_server_cgroup_memory_peak_bytes");
    MetricFamily& limit = add_family(out, "gym_server_cgroup_memory_limit_bytes");
    MetricFamily& ooms = add_family(out, "gym_server_cgroup_oom_kills_total");
    MetricFamily& stalled = add_family(out, "gym_server_cgroup_memory_pressure_seconds_total");
    MetricFamily& ratio = add_family(out, "gym_server_cgroup_memory_pressure_ratio");
    for (const ServerCgroup& c : servers_) {
      const LabelPairs l = server_labels(c.name, c.server_type);
      LabelPairs li = l;
      li.emplace_back("cgroup", c.place.path);
      li.emplace_back("cgroup_version", std::to_string(c.place.version));
      add_metric(info, li).gauge.value = 1;
      if (c.memory.current) add_metric(usage, l).gauge.value = double(*c.memory.current);
      if (c.memory.peak) add_metric(peak, l).gauge.value = double(*c.memory.peak);
      if (c.memory.limit) add_metric(limit, l).gauge.value = double(*c.memory.limit);
      if (c.oom_kills.last) add_metric(ooms, l).counter.value = double(c.oom_kills.total);
      for (const auto& [kind, p, total] :
           {std::tuple{"some", &c.memory.pressure.some, &c.pressure_some_us},
            std::tuple{"full", &c.memory.pressure.full, &c.pressure_full_us}}) {
        if (!*p) continue;
        LabelPairs lk = l;
        lk.emplace_back("kind", kind);
        add_metric(stalled, lk).counter.value = double(total->total) / 1e6;
        lk.emplace_back("window", "");
        for (const auto& [window, avg] :
             {std::pair{"10s", (*p)->avg10}, std::pair{"60s", (*p)->avg60},
              std::pair{"300s", (*p)->avg300}}) {
          lk.back().second = window;
          add_metric(ratio, lk).gauge.value = avg / 100;
        }
      }
    }
  }
  add_metric(add_family(out, "gym_exporter_cgroup_sample_errors_total"), {}).counter.value =
      double(errors_);
  // Families without samples (no server has a peak file, say) are left out.
  // The kernel's counts carry no start (a cgroup's creation is not kept):
  // only this collector's own errors say since when they count.
  for (const Family& f : out)
    if (!f.metric.empty())
      emit_since(emit, f, f.name == "gym_exporter_cgroup_sample_errors_total" ? since_ : 0);
}

}  // namespace gym::exporter
