#include "collectors/gpu.h"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

#include "contract/families.h"

using prometheus::MetricFamily;

namespace gym::exporter {

namespace {

struct GpuSettings : SampledSettings {
  std::string library = GpuConfig{}.library;
};

GYM_REGISTER_COLLECTOR(sampled_kind<GpuSettings>("gpu", 57, {{"library", &GpuSettings::library}},
                                                 [](const GpuSettings& g,
                                                    const CollectorContext& c) {
                                                   return std::make_unique<GpuCollector>(
                                                       GpuConfig{g.interval_seconds, g.library},
                                                       c.warn, c.servers, c.board);
                                                 }));

}  // namespace

GpuCollector::GpuCollector(GpuConfig config, Log log, std::shared_ptr<ServerWatcher> servers,
                           std::shared_ptr<ServerBoard> board)
    : SampledCollector(std::chrono::duration<double>(config.interval_seconds), "gpu",
                       std::move(log), std::move(board)),
      config_(std::move(config)),
      watcher_(std::move(servers)),
      nvml_(config_.library) {
  // Every reason Nvml::read() gives (nvml.h), served from 0.
  error_reasons({"gpu_lost", "no_permission", "insufficient_size", "not_available", "error"});
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
  if (const Log& say = this->log())
    say(why +
        ": the driver's library is there but unusable (too old a driver, or no device "
        "access)");
}

GpuCollector::~GpuCollector() {
  stop();
}

std::vector<GpuCollector::ServerGpu> GpuCollector::attribute(const Nvml::Sample& s,
                                                             const ServersView* view,
                                                             std::vector<Gpu>& gpus) const {
  // Host pid -> the server whose member it is.
  std::map<pid_t, const ServerProcesses::Tree*> owner;
  if (view && view->proc_ok)
    for (const ServerProcesses::Tree& t : view->trees)
      for (const procfs::ProcStat* p : t.usage.live) owner.emplace(p->pid, &t);
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
  return servers;
}

GpuSample GpuCollector::take() {
  GpuSample out;
  out.time_seconds = unix_now_seconds();
  if (!nvml_.loaded()) return out;  // nothing will change: said once at start
  const Nvml::Sample s = nvml_.read();
  if (watcher_) {
    view_ = watcher_->view(std::chrono::duration<double>(config_.interval_seconds / 2), view_);
  }
  out.servers = attribute(s, view_.get(), out.gpus);
  for (const std::string& reason : s.errors) count_error(reason, "NVML failed (" + reason + ")");
  out.up = s.up;
  const bool all_attributed = s.up && std::all_of(out.gpus.begin(), out.gpus.end(),
                                                  [](const Gpu& g) { return g.attributed; });
  if (view_ && view_->proc_ok) {
    std::set<std::string> names;
    for (const ServerProcesses::Tree& t : view_->trees) {
      names.insert(t.name);
      if (all_attributed && t.root != nullptr) out.attributed.emplace_back(t.name, t.server_type);
    }
    // Peaks live as long as their server does (a gone one until its TTL).
    std::erase_if(peaks_, [&](const auto& kv) { return !names.contains(kv.first.name); });
  }
  for (const ServerGpu& g : out.servers) {
    ServerGpu& peak = peaks_[{g.name, g.gpu}];
    if (peak.name.empty() || g.bytes > peak.bytes) {
      peak = g;
      peak.utilization.reset();
    }
  }
  for (const auto& [key, p] : peaks_) out.peaks.push_back(p);
  return out;
}

std::shared_ptr<const ServerFigures> GpuCollector::figures(const GpuSample& s) const {
  auto f = std::make_shared<ServerFigures>();
  f->time_seconds = s.time_seconds;
  for (const auto& [name, type] : s.attributed) {
    ServerFigures::Row& row = f->servers[name];
    row.server_type = type;
    row.gpu_bytes = 0;
  }
  for (const ServerGpu& g : s.servers) {
    auto it = f->servers.find(g.name);
    if (it == f->servers.end()) continue;
    ServerFigures::Row& row = it->second;
    *row.gpu_bytes += g.bytes;
    for (const Gpu& gpu : s.gpus)
      if (gpu.index == g.gpu && gpu.total_bytes > 0 && g.bytes > 0)
        row.gpu_fullest_ratio = std::max(row.gpu_fullest_ratio.value_or(0),
                                         double(gpu.used_bytes) / double(gpu.total_bytes));
  }
  return f;
}

void GpuCollector::serve(const GpuSample& s, const Emit& emit) const {
  Families out;
  auto [info, total, used, unattributed, server, peak, busy] = add_families(
      out, {"gym_gpu_info", "gym_gpu_memory_total_bytes", "gym_gpu_memory_used_bytes",
            "gym_gpu_memory_unattributed_bytes", "gym_server_gpu_memory_bytes",
            "gym_server_gpu_memory_sampled_peak_bytes", "gym_server_gpu_utilization_ratio"});
  for (const Gpu& g : s.gpus) {
    const std::string gpu = std::to_string(g.index);
    add_metric(*info, {{"gpu", gpu}, {"uuid", g.uuid}, {"mig", g.mig ? "true" : "false"}})
        .gauge.value = 1;
    add_metric(*total, {{"gpu", gpu}}).gauge.value = double(g.total_bytes);
    add_metric(*used, {{"gpu", gpu}}).gauge.value = double(g.used_bytes);
    if (g.attributed)
      add_metric(*unattributed, {{"gpu", gpu}}).gauge.value = double(g.unattributed_bytes);
  }
  for (const ServerGpu& g : s.servers) {
    LabelPairs l = server_labels(g.name, g.server_type);
    l.emplace_back("gpu", std::to_string(g.gpu));
    add_metric(*server, l).gauge.value = double(g.bytes);
    if (g.utilization) add_metric(*busy, l).gauge.value = *g.utilization;
  }
  for (const ServerGpu& p : s.peaks) {
    LabelPairs l = server_labels(p.name, p.server_type);
    l.emplace_back("gpu", std::to_string(p.gpu));
    add_metric(*peak, l).gauge.value = double(p.bytes);
  }
  add_simple(out, "gym_exporter_gpu_up", s.up ? 1 : 0);
  // An alias of gym_exporter_collector_sample_errors_total{collector="gpu"}
  // for one release.
  MetricFamily& errors = add_family(out, "gym_exporter_gpu_sample_errors_total");
  for (const auto& [reason, n] : error_counts())
    add_metric(errors, {{"reason", reason}}).counter.value = double(n);
  for (const Family& f : out)
    if (!f.metric.empty()) emit_since(emit, f, since());
}

}  // namespace gym::exporter
