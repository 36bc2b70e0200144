#include "memory_sampler.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <tuple>

#include "gym/contract.h"

using prometheus::MetricFamily;

namespace gym::exporter {

namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

Labels server_labels(const std::string& name, const std::string& type) {
  return {{std::string(label::kServerName), name}, {std::string(label::kServerType), type}};
}

// Error reasons, all reported (0 until they happen).
const char* const kReasons[] = {"permission", "read", "parse", "pidfile", "proc", "meminfo"};

}  // namespace

MemorySampler::MemorySampler(MemoryConfig config, std::shared_ptr<SharedRegistry> registry,
                             std::function<void(const std::string&)> log)
    : config_(std::move(config)), registry_(std::move(registry)), log_(std::move(log)) {
  for (const MemoryTarget& t : config_.targets) {
    Target target{t, std::nullopt};
    if (!t.match_cmdline.empty()) target.cmdline.emplace(t.match_cmdline);
    targets_.push_back(std::move(target));
  }
  for (const char* r : kReasons) errors_[r] = 0;
}

MemorySampler::~MemorySampler() {
  stop();
}

void MemorySampler::start() {
  sample_once();
  thread_ = std::thread([this] {
    const auto interval = std::chrono::duration<double>(config_.interval_seconds);
    std::unique_lock<std::mutex> lock(run_mu_);
    while (!run_cv_.wait_for(lock, interval, [this] { return stopping_; })) {
      lock.unlock();
      sample_once();
      lock.lock();
    }
  });
}

void MemorySampler::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(run_mu_);
    stopping_ = true;
  }
  run_cv_.notify_all();
  thread_.join();
  sample_once();  // the final sample
}

void MemorySampler::count_error(const std::string& reason, const std::string& detail) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++errors_[reason];
  }
  log_("memory sample: " + detail);
}

const procfs::ProcStat* MemorySampler::resolve(const Target& t, const procfs::ProcessTable& table,
                                               TargetState& state) {
  const MemoryTarget& c = t.config;
  if (c.pid) {
    const procfs::ProcStat* p = table.find(*c.pid);
    if (p == nullptr) return nullptr;
    // The pid names the process first seen with it; a younger process with
    // the same pid is not the target.
    if (!state.root_start) state.root_start = p->start_ticks;
    return p->start_ticks == *state.root_start ? p : nullptr;
  }
  if (!c.pidfile.empty()) {
    std::string text;
    if (procfs::read_file(c.pidfile, text) != procfs::ReadStatus::kOk) {
      count_error("pidfile", "cannot read pidfile " + c.pidfile + " of " + c.name);
      return nullptr;
    }
    size_t b = text.find_first_not_of(" \t\n");
    size_t e = text.find_last_not_of(" \t\n");
    int pid = 0;
    if (b == std::string::npos ||
        std::from_chars(text.data() + b, text.data() + e + 1, pid).ptr != text.data() + e + 1 ||
        pid <= 0) {
      count_error("pidfile", "pidfile " + c.pidfile + " of " + c.name + " holds no pid");
      return nullptr;
    }
    return table.find(pid);
  }
  // A match: the oldest matching process is the root.
  const procfs::ProcStat* best = nullptr;
  std::string cmdline;
  for (const procfs::ProcStat& p : table.processes()) {
    if (p.kernel_thread() || p.zombie()) continue;
    bool match = false;
    if (!c.match_comm.empty()) {
      match = p.comm == c.match_comm;
    } else if (t.cmdline) {
      const std::string path = table.proc_root() + "/" + std::to_string(p.pid) + "/cmdline";
      if (procfs::read_file(path, cmdline) != procfs::ReadStatus::kOk) continue;
      std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
      match = std::regex_search(cmdline, *t.cmdline);
    }
    if (match && (best == nullptr || p.start_ticks < best->start_ticks ||
                  (p.start_ticks == best->start_ticks && p.pid < best->pid)))
      best = &p;
  }
  return best;
}

MemorySampler::ServerMemory MemorySampler::measure(const std::string& name, const std::string& type,
                                                   bool want_pss, const procfs::ProcStat* root,
                                                   const procfs::ProcessTable& table, bool pss_due,
                                                   TargetState& state) {
  ServerMemory m;
  m.name = name;
  m.server_type = type;
  if (root == nullptr) {  // gone: 0 processes and 0 bytes
    if (want_pss) m.pss = 0;
    state.last_pss.reset();
    return m;
  }
  m.root_pid = root->pid;
  static const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  std::vector<std::pair<pid_t, uint64_t>> members;
  std::vector<const procfs::ProcStat*> live;
  for (const procfs::ProcStat* p : table.tree(*root)) {
    if (p->kernel_thread() || p->zombie()) continue;  // they add nothing
    live.push_back(p);
    members.emplace_back(p->pid, p->start_ticks);
    m.rss += p->rss_pages * page;
  }
  m.processes = live.size();
  std::sort(members.begin(), members.end());
  if (!want_pss) return m;
  if (pss_due) {
    uint64_t pss = 0;
    bool complete = true;
    std::string text;
    std::vector<std::pair<pid_t, uint64_t>> read_members;
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
    if (complete) {
      std::sort(read_members.begin(), read_members.end());
      state.last_pss = pss;
      state.pss_members = read_members;
      m.pss = pss;
    } else {
      state.last_pss.reset();
    }
    return m;
  }
  // Between PSS reads the last value stands, while the tree is the same.
  if (state.last_pss && state.pss_members == members) m.pss = state.last_pss;
  return m;
}

void MemorySampler::sample_once() {
  const auto started = std::chrono::steady_clock::now();
  procfs::ProcessTable table(config_.proc_root);
  if (!table.scan()) count_error("proc", "cannot list " + config_.proc_root);

  std::string text;
  std::optional<procfs::MemInfo> host;
  if (procfs::read_file(config_.proc_root + "/meminfo", text) == procfs::ReadStatus::kOk) {
    procfs::MemInfo mi = procfs::parse_meminfo(text);
    if (mi.total && mi.available)
      host = mi;
    else
      count_error("meminfo", "no MemTotal or MemAvailable in " + config_.proc_root + "/meminfo");
  } else {
    count_error("meminfo", "cannot read " + config_.proc_root + "/meminfo");
  }

  const bool pss_due =
      !pss_ever_ || config_.pss_interval_seconds <= 0 ||
      std::chrono::duration<double>(started - last_pss_).count() >= config_.pss_interval_seconds;
  std::vector<ServerMemory> servers;
  std::map<std::string, bool> configured;
  for (const Target& t : targets_) {
    TargetState& state = states_[t.config.name];
    const procfs::ProcStat* root = resolve(t, table, state);
    servers.push_back(
        measure(t.config.name, t.config.server_type, t.config.pss, root, table, pss_due, state));
    configured[t.config.name] = true;
  }
  if (registry_) {
    std::vector<DeclaredServer> declared =
        registry_->with([](RegistryReader& r) { return r.snapshot().servers; });
    // A process forked by a server (a verifier) inherits its declaration; of
    // the processes that declare one name, the oldest is the server.
    std::sort(
        declared.begin(), declared.end(), [](const DeclaredServer& a, const DeclaredServer& b) {
          return std::tie(a.name, a.start_ticks, a.pid) < std::tie(b.name, b.start_ticks, b.pid);
        });
    for (const DeclaredServer& d : declared) {
      if (configured.count(d.name)) continue;  // configuration wins
      configured[d.name] = true;
      TargetState& state = states_[d.name];
      const procfs::ProcStat* root = table.find(d.pid, d.start_ticks);
      servers.push_back(measure(d.name, d.server_type, true, root, table, pss_due, state));
    }
  }
  if (pss_due) {
    last_pss_ = started;
    pss_ever_ = true;
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

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

std::vector<MemorySampler::ServerMemory> MemorySampler::servers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return servers_;
}

void MemorySampler::collect(const Emit& emit) {
  Families out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!servers_.empty()) {
      MetricFamily& usage = add_family(out, "gym_server_memory_usage_bytes");
      for (const ServerMemory& s : servers_) {
        Labels l = server_labels(s.name, s.server_type);
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
        Labels l = server_labels(name, type);
        l.emplace_back("memory_type", memory_type);
        add_metric(peaks, l).gauge.value = double(value);
      }
      MetricFamily& processes = add_family(out, "gym_server_processes");
      for (const ServerMemory& s : servers_)
        add_metric(processes, server_labels(s.name, s.server_type)).gauge.value =
            double(s.processes);
      MetricFamily& info = add_family(out, "gym_server_info");
      for (const ServerMemory& s : servers_) {
        if (!s.root_pid) continue;
        Labels l = server_labels(s.name, s.server_type);
        l.emplace_back("process_pid", std::to_string(*s.root_pid));
        add_metric(info, l).gauge.value = 1;
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
  }
  for (const MetricFamily& f : out) emit(f);
}

}  // namespace gym::exporter
