#include "collectors/cgroups.h"

#include "exposition/families.h"
#include "gym/contract.h"

using prometheus::MetricFamily;

namespace gym::exporter {

namespace {

GYM_REGISTER_COLLECTOR(per_server_kind<CgroupCollector>("cgroup", 55));

}  // namespace

void CgroupCollector::Counter::add(std::optional<uint64_t> now) {
  if (!now) return;
  total += last && *now >= *last ? *now - *last : *now;
  last = now;
}

CgroupCollector::CgroupCollector(std::shared_ptr<ServerWatcher> servers, Log log,
                                 double interval_seconds)
    : SampledCollector(std::chrono::duration<double>(interval_seconds), "cgroup", std::move(log)),
      interval_seconds_(interval_seconds),
      watcher_(std::move(servers)),
      resolver_(watcher_->config().proc_root, watcher_->config().mounts) {
  error_reasons({"read"});
}

CgroupCollector::~CgroupCollector() {
  stop();
}

CgroupSample CgroupCollector::take() {
  const std::shared_ptr<const ServersView> view =
      watcher_->view(std::chrono::duration<double>(interval_seconds_ / 2), view_);
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
    if (!c.memory.current)
      count_error("read", "cannot read the memory usage of cgroup " + place->dir);
    c.oom_kills.add(c.memory.oom_kills);
    c.pressure_some_us.add(c.memory.pressure.some ? std::optional(c.memory.pressure.some->total_us)
                                                  : std::nullopt);
    c.pressure_full_us.add(c.memory.pressure.full ? std::optional(c.memory.pressure.full->total_us)
                                                  : std::nullopt);
    next[s.name] = std::move(c);
  }
  state_ = next;
  CgroupSample out;
  for (auto& [name, c] : next) out.servers.push_back(std::move(c));
  take_cpu(*view, out.cpu);
  return out;
}

uint64_t CgroupCollector::ServerCpu::sum(Counter CpuCounters::*which, uint64_t gone) const {
  for (const auto& [dir, c] : cgroups) gone += (c.*which).total;
  return gone;
}

// Each server's cpu cgroups: those of its live processes, each read once.
void CgroupCollector::take_cpu(const ServersView& view, std::vector<ServerCpu>& out) {
  std::map<std::string, cgroup::CpuState> read;  // by directory, this sample
  std::map<std::string, ServerCpu> next;
  for (const ServerProcesses::Tree& s : view.trees) {
    if (s.root == nullptr) continue;
    std::map<std::string, cgroup::Place> places;
    for (const auto& [pid, start] : s.usage.members)
      if (std::optional<cgroup::Place> p = resolver_.own_cpu(pid)) places.emplace(p->dir, *p);
    auto before = cpu_state_.find(s.name);
    ServerCpu c = before == cpu_state_.end() ? ServerCpu{} : std::move(before->second);
    c.name = s.name;
    c.server_type = s.server_type;
    c.limit_cores.reset();
    std::map<std::string, CpuCounters> now;
    for (const auto& [dir, place] : places) {
      auto [it, fresh] = read.try_emplace(dir);
      if (fresh) it->second = cgroup::read_cpu(place);
      const cgroup::CpuState& st = it->second;
      if (!st.exists) continue;  // removed since its process was looked up
      if (st.limit_cores) c.limit_cores = c.limit_cores.value_or(0) + *st.limit_cores;
      auto seen = c.cgroups.find(dir);
      CpuCounters k = seen == c.cgroups.end() ? CpuCounters{} : seen->second;
      k.periods.add(st.periods);
      k.throttled_periods.add(st.throttled_periods);
      k.throttled_us.add(st.throttled_us);
      c.counted = c.counted || st.periods.has_value();
      now[dir] = k;
    }
    // Cgroups gone (or no longer holding its processes) keep what they counted.
    for (const auto& [dir, k] : c.cgroups) {
      if (now.count(dir)) continue;
      c.gone_periods += k.periods.total;
      c.gone_throttled_periods += k.throttled_periods.total;
      c.gone_throttled_us += k.throttled_us.total;
    }
    c.cgroups = std::move(now);
    if (c.cgroups.empty() && !c.counted) continue;
    next[s.name] = std::move(c);
  }
  cpu_state_ = next;
  for (auto& [name, c] : next) out.push_back(std::move(c));
}

void CgroupCollector::serve(const CgroupSample& s, const Emit& emit) const {
  Families out;
  if (!s.servers.empty()) {
    auto [info, usage, peak, limit, ooms, stalled, ratio] = add_families(
        out,
        {"gym_server_cgroup_info", "gym_server_cgroup_memory_usage_bytes",
         "gym_server_cgroup_memory_peak_bytes", "gym_server_cgroup_memory_limit_bytes",
         "gym_server_cgroup_oom_kills_total", "gym_server_cgroup_memory_pressure_seconds_total",
         "gym_server_cgroup_memory_pressure_ratio"});
    for (const ServerCgroup& c : s.servers) {
      const LabelPairs l = server_labels(c.name, c.server_type);
      LabelPairs li = l;
      li.emplace_back("cgroup", c.place.path);
      li.emplace_back("cgroup_version", std::to_string(c.place.version));
      add_metric(*info, li).gauge.value = 1;
      if (c.memory.current) add_metric(*usage, l).gauge.value = double(*c.memory.current);
      if (c.memory.peak) add_metric(*peak, l).gauge.value = double(*c.memory.peak);
      if (c.memory.limit) add_metric(*limit, l).gauge.value = double(*c.memory.limit);
      if (c.oom_kills.last) add_metric(*ooms, l).counter.value = double(c.oom_kills.total);
      for (const auto& [kind, p, total] :
           {std::tuple{"some", &c.memory.pressure.some, &c.pressure_some_us},
            std::tuple{"full", &c.memory.pressure.full, &c.pressure_full_us}}) {
        if (!*p) continue;
        LabelPairs lk = l;
        lk.emplace_back("kind", kind);
        add_metric(*stalled, lk).counter.value = double(total->total) / 1e6;
        lk.emplace_back("window", "");
        for (const auto& [window, avg] :
             {std::pair{"10s", (*p)->avg10}, std::pair{"60s", (*p)->avg60},
              std::pair{"300s", (*p)->avg300}}) {
          lk.back().second = window;
          add_metric(*ratio, lk).gauge.value = avg / 100;
        }
      }
    }
  }
  if (!s.cpu.empty()) {
    auto [limit, periods, throttled, throttled_s] = add_families(
        out, {"gym_server_cgroup_cpu_limit_cores", "gym_server_cgroup_cpu_periods_total",
              "gym_server_cgroup_cpu_throttled_periods_total",
              "gym_server_cgroup_cpu_throttled_seconds_total"});
    for (const ServerCpu& c : s.cpu) {
      const LabelPairs l = server_labels(c.name, c.server_type);
      if (c.limit_cores) add_metric(*limit, l).gauge.value = *c.limit_cores;
      if (!c.counted) continue;
      add_metric(*periods, l).counter.value = double(c.periods());
      add_metric(*throttled, l).counter.value = double(c.throttled_periods());
      add_metric(*throttled_s, l).counter.value = double(c.throttled_us()) / 1e6;
    }
  }
  // An alias of gym_exporter_collector_sample_errors_total{collector="cgroup"}
  // for one release.
  uint64_t errors = 0;
  for (const auto& [reason, n] : error_counts()) errors += n;
  add_metric(add_family(out, "gym_exporter_cgroup_sample_errors_total"), {}).counter.value =
      double(errors);
  // Families without samples (no server has a peak file, say) are left out.
  // The kernel's counts carry no start (a cgroup's creation is not kept):
  // only this collector's own errors say since when they count.
  for (const Family& f : out)
    if (!f.metric.empty())
      emit_since(emit, f, f.name == "gym_exporter_cgroup_sample_errors_total" ? since() : 0);
}

}  // namespace gym::exporter
