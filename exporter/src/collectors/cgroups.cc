#include "collectors/cgroups.h"

#include <sys/stat.h>

#include "collectors/cgroup_totals.h"
#include "contract/families.h"
#include "gym/contract.h"
#include "host/procfs.h"

using prometheus::MetricFamily;

namespace gym::exporter {

namespace {

std::string totals_path(const CollectorContext& c) {
  return c.registry
             ? c.registry->with([](RegistryReader& r) { return r.dir(); }) + "/" + kCgroupTotalsFile
             : "";
}

GYM_REGISTER_COLLECTOR(sampled_kind<SampledSettings>(
    "cgroup", 55, {}, [](const SampledSettings& s, const CollectorContext& c) {
      std::function<bool()> holder;
      if (auto registry = c.registry)
        holder = [registry] {
          return registry->with([](RegistryReader& r) { return r.retiring(); });
        };
      return std::make_unique<CgroupCollector>(c.servers, c.warn, s.interval_seconds,
                                               totals_path(c), std::move(holder), c.board);
    }));

// The directory's inode, 0 when it is not there.
uint64_t inode_of(const std::string& dir) {
  struct stat st {};
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? uint64_t(st.st_ino) : 0;
}

}  // namespace

void CgroupCollector::Counter::add(std::optional<uint64_t> now) {
  if (!now) return;
  total += last && *now >= *last ? *now - *last : *now;
  last = now;
}

uint64_t CgroupCollector::ServerTotals::total(Count c) const {
  uint64_t sum = gone[c];
  for (const auto& [dir, k] : cgroups) sum += k.counts[c].total;
  return sum;
}

CgroupCollector::CgroupCollector(std::shared_ptr<ServerWatcher> servers, Log log,
                                 double interval_seconds, std::string totals_file,
                                 std::function<bool()> may_write,
                                 std::shared_ptr<ServerBoard> board)
    : SampledCollector(std::chrono::duration<double>(interval_seconds), "cgroup", std::move(log),
                       std::move(board)),
      interval_seconds_(interval_seconds),
      watcher_(std::move(servers)),
      resolver_(watcher_->config().proc_root, watcher_->config().mounts),
      totals_file_(std::move(totals_file)),
      may_write_(std::move(may_write)),
      boot_id_(procfs::read_boot_id(watcher_->config().proc_root)) {
  // A proc root without it (a fixture, a partial mount) is of this kernel.
  if (boot_id_.empty()) boot_id_ = procfs::read_boot_id("/proc");
  error_reasons({"read", "totals"});
  if (totals_file_.empty()) return;
  std::string why;
  if (!load_cgroup_totals(totals_file_, boot_id_, totals_, why))
    count_error("totals", "ignored the cgroup totals in " + totals_file_ + ": " + why +
                              "; the counts of removed cgroups start from zero");
}

CgroupCollector::~CgroupCollector() {
  stop();
}

CgroupSample CgroupCollector::take() {
  const std::shared_ptr<const ServersView> view =
      watcher_->view(std::chrono::duration<double>(interval_seconds_ / 2), view_);
  view_ = view;
  CgroupSample out;
  out.time_seconds = unix_now_seconds();
  for (const ServerProcesses::Tree& s : view->trees) {
    if (s.root == nullptr) continue;
    std::optional<cgroup::Place> place = resolver_.own(s.root->pid);
    if (!place) continue;
    ServerCgroup c{s.name, s.server_type, *place, cgroup::read_memory(*place)};
    if (!c.memory.exists) continue;  // removed since the process was looked up
    if (!c.memory.current)
      count_error("read", "cannot read the memory usage of cgroup " + place->dir);
    out.servers.push_back(std::move(c));
  }
  take_totals(*view, out.totals);
  const std::string& proc = watcher_->config().proc_root;
  for (size_t i = 0; i < 3; ++i)
    out.host[i] = cgroup::read_pressure(proc + "/pressure/" + cgroup::kPressureResources[i]);
  out.host_since = view->boot_seconds;
  return out;
}

CgroupCollector::Reading CgroupCollector::read(const ServerTotals::Kept& k) const {
  Reading r;
  r.inode = inode_of(k.place.dir);
  if (r.inode == 0) return r;
  auto pressure = [&r](const cgroup::PressureFile& f, Count some) {
    if (f.some) r.counts[some] = f.some->total_us;
    if (f.full) r.counts[some + 1] = f.full->total_us;
  };
  if (k.memory) {
    const cgroup::MemoryState m = cgroup::read_memory(k.place);
    r.memory_limit = m.limit;
    r.memory_usage = m.current;
    r.counts[kOomProcess] = m.oom_kills;
    r.counts[kOomGroup] = m.oom_group_kills;
    pressure(m.pressure, kMemorySome);
  }
  if (k.cpu) {
    const cgroup::CpuState c = cgroup::read_cpu(k.place);
    r.cpu_limit = c.limit_cores;
    r.counts[kPeriods] = c.periods;
    r.counts[kThrottledPeriods] = c.throttled_periods;
    r.counts[kThrottledUs] = c.throttled_us;
  }
  if (k.place.version == 2) {
    pressure(cgroup::read_pressure(k.place.dir + "/cpu.pressure"), kCpuSome);
    pressure(cgroup::read_pressure(k.place.dir + "/io.pressure"), kIoSome);
  }
  return r;
}

// Adds what `k` counted since it was last read (all of it when it is new
// or was made again since).
void CgroupCollector::add(ServerTotals::Kept& k, const Reading& r) const {
  if (k.inode != r.inode)
    for (Counter& c : k.counts) c.last.reset();
  k.inode = r.inode;
  for (size_t i = 0; i < kCounts; ++i)
    if (!k.nested || i >= kPeriods) k.counts[i].add(r.counts[i]);
}

// The memory and cpu cgroups of a member of `s`: a root's read at every
// sample (a server may move into a cgroup of its own after it started);
// another process's when it is first seen, then again every kRecheck
// samples, staggered by pid (a sandbox's process is moved into its cgroup
// as it starts; reading every process's cgroup file every sample would
// make a host without sandboxes pay for them).
const CgroupCollector::Memberships& CgroupCollector::cgroups_of(
    const ServerProcesses::Tree& s, pid_t pid, uint64_t start,
    std::map<Member, Memberships>& seen) {
  const Member m{pid, start};
  if (auto it = seen.find(m); it != seen.end()) return it->second;  // in two servers' trees
  bool root = false;
  for (const procfs::ProcStat* r : s.roots)
    root = root || (r->pid == pid && r->start_ticks == start);
  auto kept = members_.find(m);
  if (root || kept == members_.end() || (uint64_t(pid) + samples_) % kRecheck == 0)
    return seen[m] = resolver_.own_both(pid);
  return seen[m] = kept->second;
}

const CgroupCollector::Reading& CgroupCollector::reading(const ServerTotals::Kept& k) {
  auto [it, fresh] = read_now_.try_emplace({k.place.dir, k.memory + 2 * k.cpu});
  if (fresh) it->second = read(k);
  return it->second;
}

// Each server's cgroups: those of its live processes, each read once a
// sample, and those it had, read once more when they stop holding its
// processes and kept while the kernel has them.
void CgroupCollector::take_totals(const ServersView& view, std::vector<ServerTotals>& out) {
  read_now_.clear();
  ++samples_;
  std::map<Member, Memberships> seen;  // this sample's members' cgroups
  std::map<std::string, ServerTotals> next;
  for (const ServerProcesses::Tree& s : view.trees) {
    std::map<std::string, ServerTotals::Kept> places;  // its cgroups now, by directory
    for (const auto& [pid, start] : s.usage.members) {
      const auto& [memory, cpu] = cgroups_of(s, pid, start, seen);
      if (memory) places[memory->dir].place = *memory, places[memory->dir].memory = true;
      if (cpu) places[cpu->dir].place = *cpu, places[cpu->dir].cpu = true;
    }
    auto before = totals_.find(s.name);
    ServerTotals t = before == totals_.end() ? ServerTotals{} : std::move(before->second);
    t.name = s.name;
    t.server_type = s.server_type;
    track(t, std::move(places));
    if (t.cgroups.empty() && std::find(t.seen.begin(), t.seen.end(), true) == t.seen.end())
      continue;
    next[s.name] = std::move(t);
  }
  members_ = std::move(seen);
  if (next.size() != totals_.size()) changed_ = true;  // a server's counts left
  totals_ = std::move(next);
  keep_totals();
  for (const auto& [name, t] : totals_) out.push_back(t);
}

// Marks the v2 memory cgroups of `places` below another of them: the
// unified hierarchy's memory.events, memory.current and pressure totals
// hold their subtree's, so only the outermost ones add theirs.
void CgroupCollector::mark_nested(std::map<std::string, ServerTotals::Kept>& places) {
  for (auto& [dir, k] : places) {
    if (!k.memory || k.place.version != 2) continue;
    for (const auto& [other, o] : places)
      if (o.memory && o.place.version == 2 && &o != &k &&
          (o.place.path == "/" || k.place.path.starts_with(o.place.path + "/")))
        k.nested = true;
  }
}

// Moves `t` to the cgroups of `places` (its processes' now): each adds what
// it counted since; a cgroup it had that holds none of its processes now is
// read once more, then kept idle while the kernel has it (a pool's cgroup
// that its verifiers come back to goes on from its last count), and folded
// into the gone counts when removed.
void CgroupCollector::track(ServerTotals& t, std::map<std::string, ServerTotals::Kept> places) {
  std::map<std::string, ServerTotals::Kept> had = std::move(t.cgroups);
  t.cgroups.clear();
  t.cpu_limit_cores.reset();
  t.memory_limit_bytes.reset();
  t.memory_usage_bytes.reset();
  mark_nested(places);
  for (auto& [dir, k] : places) {
    const Reading& r = reading(k);
    if (r.inode == 0) continue;  // removed since its process was looked up
    if (auto was = had.find(dir); was != had.end()) {
      k.counts = was->second.counts;
      k.inode = was->second.inode;
      changed_ = changed_ || !was->second.active;
      had.erase(was);
    } else {
      changed_ = true;
    }
    add(k, r);
    k.active = true;
    if (r.cpu_limit) t.cpu_limit_cores = t.cpu_limit_cores.value_or(0) + *r.cpu_limit;
    if (!k.nested && r.memory_limit)
      t.memory_limit_bytes = t.memory_limit_bytes.value_or(0) + *r.memory_limit;
    if (!k.nested && r.memory_usage)
      t.memory_usage_bytes = t.memory_usage_bytes.value_or(0) + *r.memory_usage;
    t.cgroups.emplace(dir, std::move(k));
  }
  for (auto& [dir, k] : had) {
    uint64_t inode = 0;
    if (k.active) {
      const Reading& r = reading(k);
      if (r.inode == k.inode) add(k, r);
      inode = r.inode;
      k.active = false;
      changed_ = true;
    } else {
      inode = inode_of(dir);
    }
    if (inode != 0 && inode == k.inode) {
      t.cgroups.emplace(dir, std::move(k));
      continue;
    }
    for (size_t i = 0; i < kCounts; ++i) t.gone[i] += k.counts[i].total;
    changed_ = true;
  }
  for (const auto& [dir, k] : t.cgroups)
    for (size_t i = 0; i < kCounts; ++i) t.seen[i] = t.seen[i] || k.counts[i].last.has_value();
}

// Writes the totals file when its cgroups or gone counts changed and this
// one may (the registry's lock holder).
void CgroupCollector::keep_totals() {
  if (!changed_ || totals_file_.empty() || !may_write_ || !may_write_()) return;
  std::string why;
  if (save_cgroup_totals(totals_file_, boot_id_, totals_, why))
    changed_ = false;
  else
    count_error("totals", "cannot write " + totals_file_ + ": " + why);
}

std::shared_ptr<const ServerFigures> CgroupCollector::figures(const CgroupSample& s) const {
  auto f = std::make_shared<ServerFigures>();
  f->time_seconds = s.time_seconds;
  for (const ServerTotals& t : s.totals) {
    ServerFigures::Row& row = f->servers[t.name];
    row.server_type = t.server_type;
    if (t.seen[kPeriods]) {
      row.cpu_periods = t.total(kPeriods);
      row.cpu_throttled_periods = t.total(kThrottledPeriods);
    }
    if (t.seen[kOomProcess] || t.seen[kOomGroup])
      row.oom_kills = t.total(kOomProcess) + t.total(kOomGroup);
  }
  return f;
}

namespace {

// The families of the root's own cgroup.
void serve_own(const std::vector<CgroupCollector::ServerCgroup>& servers, Families& out) {
  auto [info, peak, ratio] =
      add_families(out, {"gym_server_cgroup_info", "gym_server_cgroup_memory_peak_bytes",
                         "gym_server_cgroup_memory_pressure_ratio"});
  for (const CgroupCollector::ServerCgroup& c : servers) {
    const LabelPairs l = server_labels(c.name, c.server_type);
    LabelPairs li = l;
    li.emplace_back("cgroup", c.place.path);
    li.emplace_back("cgroup_version", std::to_string(c.place.version));
    add_metric(*info, li).gauge.value = 1;
    if (c.memory.peak) add_metric(*peak, l).gauge.value = double(*c.memory.peak);
    for (const auto& [kind, p] :
         {std::pair{"some", &c.memory.pressure.some}, std::pair{"full", &c.memory.pressure.full}}) {
      if (!*p) continue;
      LabelPairs lk = l;
      lk.emplace_back("kind", kind);
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

// The families of a server's totals over all its cgroups.
void serve_totals(const std::vector<CgroupCollector::ServerTotals>& totals, Families& out) {
  using C = CgroupCollector;
  Family& usage = add_family(out, "gym_server_cgroup_memory_usage_bytes");
  auto [mem_limit, ooms, mem_p, cpu_p, io_p, cpu_limit, periods, throttled, throttled_s] =
      add_families(
          out,
          {"gym_server_cgroup_memory_limit_bytes", "gym_server_cgroup_oom_kills_total",
           "gym_server_cgroup_memory_pressure_seconds_total",
           "gym_server_cgroup_cpu_pressure_seconds_total",
           "gym_server_cgroup_io_pressure_seconds_total", "gym_server_cgroup_cpu_limit_cores",
           "gym_server_cgroup_cpu_periods_total", "gym_server_cgroup_cpu_throttled_periods_total",
           "gym_server_cgroup_cpu_throttled_seconds_total"});
  for (const C::ServerTotals& t : totals) {
    const LabelPairs l = server_labels(t.name, t.server_type);
    // A counter with a `kind` label, present when some cgroup reported it.
    auto kinds = [&](Family& f, std::initializer_list<std::pair<const char*, C::Count>> rows,
                     double scale) {
      for (const auto& [kind, c] : rows) {
        if (!t.seen[c]) continue;
        LabelPairs lk = l;
        lk.emplace_back("kind", kind);
        add_metric(f, lk).counter.value = double(t.total(c)) / scale;
      }
    };
    if (t.memory_usage_bytes) add_metric(usage, l).gauge.value = double(*t.memory_usage_bytes);
    if (t.memory_limit_bytes) add_metric(*mem_limit, l).gauge.value = double(*t.memory_limit_bytes);
    kinds(*ooms, {{"process", C::kOomProcess}, {"group", C::kOomGroup}}, 1);
    kinds(*mem_p, {{"some", C::kMemorySome}, {"full", C::kMemoryFull}}, 1e6);
    kinds(*cpu_p, {{"some", C::kCpuSome}, {"full", C::kCpuFull}}, 1e6);
    kinds(*io_p, {{"some", C::kIoSome}, {"full", C::kIoFull}}, 1e6);
    if (t.cpu_limit_cores) add_metric(*cpu_limit, l).gauge.value = *t.cpu_limit_cores;
    if (!t.seen[C::kPeriods]) continue;
    add_metric(*periods, l).counter.value = double(t.periods());
    add_metric(*throttled, l).counter.value = double(t.throttled_periods());
    add_metric(*throttled_s, l).counter.value = double(t.throttled_us()) / 1e6;
  }
}

}  // namespace

void CgroupCollector::serve(const CgroupSample& s, const Emit& emit) const {
  Families out;
  serve_own(s.servers, out);
  serve_totals(s.totals, out);
  Family& host = add_family(out, "gym_host_pressure_seconds_total");
  for (size_t i = 0; i < 3; ++i)
    for (const auto& [kind, p] :
         {std::pair{"some", &s.host[i].some}, std::pair{"full", &s.host[i].full}})
      if (*p)
        add_metric(host, {{"resource", cgroup::kPressureResources[i]}, {"kind", kind}})
            .counter.value = double((*p)->total_us) / 1e6;
  // An alias of gym_exporter_collector_sample_errors_total{collector="cgroup"}
  // for one release.
  uint64_t errors = 0;
  for (const auto& [reason, n] : error_counts()) errors += n;
  add_metric(add_family(out, "gym_exporter_cgroup_sample_errors_total"), {}).counter.value =
      double(errors);
  // Families without samples (no server has a peak file, say) are left out.
  // A cgroup's counts carry no start (the kernel keeps no creation time of
  // a cgroup); the host's pressure counts from the boot, this collector's
  // own errors from its start.
  for (const Family& f : out) {
    if (f.metric.empty()) continue;
    const double start = f.name == "gym_exporter_cgroup_sample_errors_total" ? since()
                         : f.name == "gym_host_pressure_seconds_total"       ? s.host_since
                                                                             : 0;
    emit_since(emit, f, start);
  }
}

}  // namespace gym::exporter
