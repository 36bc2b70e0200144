#include "collectors/gpu.h"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

#include "collectors/memory.h"
#include "config.h"
#include "exposition/families.h"
#include "yaml_reader.h"

using prometheus::MetricFamily;

namespace gym::exporter {

namespace {

// Every reason Nvml::read() gives (nvml.h), served from 0.
const char* const kReasons[] = {"gpu_lost", "no_permission", "insufficient_size", "not_available",
                                "error"};

struct GpuSettings : CollectorSettings {
  GpuConfig config;
};

std::shared_ptr<const CollectorSettings> parse_gpu(YamlReader& rd, const YAML::Node& n) {
  auto s = std::make_shared<GpuSettings>();
  GpuConfig& c = s->config;
  rd.mapping(n, "gpu",
             {{"enabled", [&](const YAML::Node& v) { rd.boolean(v, "gpu.enabled", s->enabled); }},
              {"interval_seconds",
               [&](const YAML::Node& v) {
                 rd.number(v, "gpu.interval_seconds", c.interval_seconds, 0.01);
               }},
              {"library", [&](const YAML::Node& v) { rd.string(v, "gpu.library", c.library); }}});
  return s;
}

GYM_REGISTER_COLLECTOR({.name = "gpu",
                        .order = 57,
                        .parse = parse_gpu,
                        .make = [](const CollectorSettings* s, const CollectorContext& c) {
                          GpuConfig config = static_cast<const GpuSettings*>(s)->config;
                          std::shared_ptr<ServerWatcher> servers = c.servers;
                          if (!servers) {
                            const MemoryConfig memory =
                                c.config ? memory_config(*c.config) : MemoryConfig{};
                            servers = std::make_shared<ServerWatcher>(
                                watcher_config(memory, std::nullopt), c.registry);
                          }
                          return std::make_unique<GpuCollector>(std::move(config),
                                                                std::move(servers), c.warn);
                        }});

}  // namespace

std::optional<GpuConfig> gpu_config(const Config& c) {
  auto it = c.collectors.find("gpu");
  if (it == c.collectors.end() || !it->second.settings) return GpuConfig{};
  const auto& s = static_cast<const GpuSettings&>(*it->second.settings);
  if (!s.enabled) return std::nullopt;
  return s.config;
}

GpuCollector::GpuCollector(GpuConfig config, std::shared_ptr<ServerWatcher> servers, Log log)
    : IntervalCollector(std::chrono::duration<double>(config.interval_seconds)),
      config_(std::move(config)),
      watcher_(std::move(servers)),
      log_(std::move(log)),
      nvml_(config_.library),
      since_(unix_now_seconds()) {
  for (const char* r : kReasons) errors_[r] = 0;
  if (nvml_.loaded()) return;
  const std::string why = "gpu: NVML is not available (" + nvml_.error() +
                          "); no GPU memory is reported (gym_exporter_gpu_up 0)";
  if (!nvml_.found()) {          // no NVIDIA driver here: a CPU host, as expected
    static std::once_flag said;  // once a process, not at each reload
    std::call_once(said, [&] {
      spdlog::info(
          "{}. On a host with NVIDIA GPUs, make the driver's libnvidia-ml.so.1 visible to the "
          "exporter (the NVIDIA container toolkit does) or set gpu.library; gpu.enabled: false "
          "turns this collector off",
          why);
    });
    return;
  }
  log_(why +
       ": the driver's library is there but unusable (too old a driver, or no device "
       "access)");
}

GpuCollector::~GpuCollector() {
  stop();
}

void GpuCollector::sample() {
  if (!nvml_.loaded()) {  // nothing will change: said once at start
    std::lock_guard<std::mutex> lock(mu_);
    up_ = false;
    return;
  }
  Nvml::Sample s = nvml_.read();
  std::shared_ptr<const ServersView> view;
  if (watcher_) {
    view = watcher_->view(std::chrono::duration<double>(config_.interval_seconds / 2), view_);
    view_ = view;
  }
  // Host pid -> the server whose member it is.
  std::map<pid_t, const ServerProcesses::Tree*> owner;
  if (view && view->proc_ok)
    for (const ServerProcesses::Tree& t : view->trees)
      for (const procfs::ProcStat* p : t.usage.live) owner.emplace(p->pid, &t);
  std::vector<Gpu> gpus;
  struct Use {
    uint64_t bytes = 0;
    std::optional<double> utilization;
  };
  std::map<std::pair<const ServerProcesses::Tree*, unsigned>, Use> per_server;
  for (const Nvml::Device& d : s.devices) {
    Gpu g{d.index, d.uuid, d.mig, d.total_bytes, d.used_bytes, false, 0};
    // Attributed only when every process's memory is known, and the servers'
    // processes are (a proc root that cannot be read attributes nothing).
    g.attributed = d.processes_ok && (!watcher_ || (view && view->proc_ok));
    if (g.attributed) {
      uint64_t attributed = 0;
      for (const Nvml::Process& p : d.processes) {
        auto it = owner.find(p.pid);
        if (it == owner.end()) continue;
        Use& use = per_server[{it->second, d.index}];
        use.bytes += *p.used_bytes;
        if (d.utilization_ok)
          use.utilization =
              std::min(1.0, use.utilization.value_or(0) + p.sm_utilization.value_or(0));
        attributed += *p.used_bytes;
      }
      g.unattributed_bytes = d.used_bytes - std::min(attributed, d.used_bytes);
    }
    gpus.push_back(std::move(g));
  }
  std::vector<ServerGpu> servers;
  for (const auto& [key, use] : per_server)
    servers.push_back(
        {key.first->name, key.first->server_type, key.second, use.bytes, use.utilization});
  std::set<std::string> failing;
  for (const std::string& reason : s.errors) failing.insert(reason);
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& reason : s.errors) ++errors_[reason];
  for (const std::string& reason : failing)
    if (!failing_.contains(reason)) log_("gpu sample: NVML failed (" + reason + ")");
  failing_ = std::move(failing);
  up_ = s.up;
  gpus_ = std::move(gpus);
  servers_ = std::move(servers);
  // Peaks live as long as their server does (a gone one until its TTL).
  if (view && view->proc_ok) {
    std::set<std::string> names;
    for (const ServerProcesses::Tree& t : view->trees) names.insert(t.name);
    std::erase_if(peaks_, [&](const auto& kv) { return !names.contains(kv.first.name); });
  }
  for (const ServerGpu& g : servers_) {
    ServerGpu& peak = peaks_[{g.name, g.gpu}];
    if (peak.name.empty() || g.bytes > peak.bytes) {
      peak = g;
      peak.utilization.reset();
    }
  }
}

bool GpuCollector::up() const {
  std::lock_guard<std::mutex> lock(mu_);
  return up_;
}
std::vector<GpuCollector::Gpu> GpuCollector::gpus() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gpus_;
}
std::vector<GpuCollector::ServerGpu> GpuCollector::servers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return servers_;
}
std::vector<GpuCollector::ServerGpu> GpuCollector::peaks() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ServerGpu> out;
  for (const auto& [key, s] : peaks_) out.push_back(s);
  return out;
}
std::map<std::string, uint64_t> GpuCollector::errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return errors_;
}

void GpuCollector::collect(const Emit& emit) {
  std::lock_guard<std::mutex> lock(mu_);
  Families out;
  MetricFamily& info = add_family(out, "gym_gpu_info");
  MetricFamily& total = add_family(out, "gym_gpu_memory_total_bytes");
  MetricFamily& used = add_family(out, "gym_gpu_memory_used_bytes");
  MetricFamily& unattributed = add_family(out, "gym_gpu_memory_unattributed_bytes");
  MetricFamily& server = add_family(out, "gym_server_gpu_memory_bytes");
  MetricFamily& peak = add_family(out, "gym_server_gpu_memory_sampled_peak_bytes");
  MetricFamily& busy = add_family(out, "gym_server_gpu_utilization_ratio");
  for (const Gpu& g : gpus_) {
    const std::string gpu = std::to_string(g.index);
    add_metric(info, {{"gpu", gpu}, {"uuid", g.uuid}, {"mig", g.mig ? "true" : "false"}})
        .gauge.value = 1;
    add_metric(total, {{"gpu", gpu}}).gauge.value = double(g.total_bytes);
    add_metric(used, {{"gpu", gpu}}).gauge.value = double(g.used_bytes);
    if (g.attributed)
      add_metric(unattributed, {{"gpu", gpu}}).gauge.value = double(g.unattributed_bytes);
  }
  for (const ServerGpu& s : servers_) {
    LabelPairs l = server_labels(s.name, s.server_type);
    l.emplace_back("gpu", std::to_string(s.gpu));
    add_metric(server, l).gauge.value = double(s.bytes);
    if (s.utilization) add_metric(busy, l).gauge.value = *s.utilization;
  }
  for (const auto& [key, s] : peaks_) {
    LabelPairs l = server_labels(s.name, s.server_type);
    l.emplace_back("gpu", std::to_string(s.gpu));
    add_metric(peak, l).gauge.value = double(s.bytes);
  }
  add_simple(out, "gym_exporter_gpu_up", up_ ? 1 : 0);
  MetricFamily& errors = add_family(out, "gym_exporter_gpu_sample_errors_total");
  for (const auto& [reason, n] : errors_)
    add_metric(errors, {{"reason", reason}}).counter.value = double(n);
  for (const Family& f : out)
    if (!f.metric.empty()) emit_since(emit, f, since_);
}

}  // namespace gym::exporter
