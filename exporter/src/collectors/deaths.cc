#include "collectors/deaths.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>

#include "contract/families.h"
#include "host/procfs.h"

namespace gym::exporter {

namespace {

// The `deaths:` section: enabled, interval_seconds (how often the samples
// resynchronise who is whose), and the records kept.
struct DeathsSettings : SampledSettings {
  double records = double(DeathLimits{}.records);
  double max_age_seconds = DeathLimits{}.max_age_seconds;
};

GYM_REGISTER_COLLECTOR(sampled_kind<DeathsSettings>(
    "deaths", 50,
    {{"records", &DeathsSettings::records, 1},
     {"max_age_seconds", &DeathsSettings::max_age_seconds, 1}},
    [](const DeathsSettings& s, const CollectorContext& c) {
      auto made = std::make_unique<DeathsCollector>(
          c.servers, c.deaths, c.warn, s.interval_seconds,
          // At most 10 million records (a number beyond any size_t is no count).
          DeathLimits{size_t(std::min(s.records, 1e7)), s.max_age_seconds});
      // Its counts are kept beside the registry's totals, by the lock holder.
      if (auto registry = c.registry)
        made->keep_counts(
            registry->with([](RegistryReader& r) { return r.dir(); }) + "/" + kDeathsFile,
            [registry] { return registry->with([](RegistryReader& r) { return r.retiring(); }); });
      return made;
    }));

double boot_now() {
  timespec t{};
  clock_gettime(CLOCK_BOOTTIME, &t);
  return double(t.tv_sec) + double(t.tv_nsec) / 1e9;
}

}  // namespace

DeathsCollector::DeathsCollector(std::shared_ptr<ServerWatcher> servers,
                                 std::shared_ptr<DeathLog> deaths, Log log, double interval_seconds,
                                 DeathLimits limits, bool connect)
    : SampledCollector(std::chrono::duration<double>(interval_seconds), "deaths", std::move(log)),
      watcher_(std::move(servers)),
      deaths_(deaths ? std::move(deaths) : std::make_shared<DeathLog>()) {
  error_reasons({"totals"});
  deaths_->start_counting(unix_now_seconds());
  deaths_->set_limits(limits);
  std::string why;
  if (connect) connector_ = procev::ProcConnector::open(&why);
  if (!connector_) {
    if (connect) this->log()("process events: " + why + "; process exits are not counted");
    return;
  }
  kmsg_ = kmsg::KmsgReader::open("/dev/kmsg", &why);
  if (!kmsg_) this->log()("kernel log: " + why + "; OOM kills count as signal");
  deaths_->set_connected(true);
  reader_ = std::thread([this] { read_events(); });
}

DeathsCollector::~DeathsCollector() {
  stopping_ = true;
  if (connector_) connector_->wake();  // not a poll's timeout later
  if (reader_.joinable()) reader_.join();
  if (connector_) deaths_->set_connected(false);
  stop();
  save_counts();  // what the last moments counted
}

void DeathsCollector::keep_counts(std::string path, std::function<bool()> may_write) {
  counts_file_ = std::move(path);
  may_write_ = std::move(may_write);
  std::string text, why;
  const procfs::ReadStatus r = procfs::read_file(counts_file_, text);
  if (r == procfs::ReadStatus::kGone) return;  // none yet
  if (r != procfs::ReadStatus::kOk || !deaths_->restore(text, why))
    count_error("totals", "ignored the death counts in " + counts_file_ + ": " +
                              (why.empty() ? "unreadable" : why));
}

// Writes the counts file when deaths were counted since the last write and
// this exporter may (the registry's lock holder).
void DeathsCollector::save_counts() {
  const uint64_t version = deaths_->version();
  if (counts_file_.empty() || version == saved_version_ || !may_write_ || !may_write_()) return;
  std::string why;
  if (procfs::write_file_whole(counts_file_, deaths_->encode(), why))
    saved_version_ = version;
  else
    count_error("totals", "cannot write " + counts_file_ + ": " + why);
}

void DeathsCollector::read_events() {
  const std::string proc_root = watcher_->config().proc_root;
  const auto command = [&](pid_t pid) {
    std::string comm;
    if (procfs::read_file(proc_root + "/" + std::to_string(pid) + "/comm", comm) !=
        procfs::ReadStatus::kOk)
      return std::string();
    if (!comm.empty() && comm.back() == '\n') comm.pop_back();
    return comm;
  };
  std::vector<procev::ProcEvent> events;
  while (!stopping_.load(std::memory_order_relaxed)) {
    events.clear();
    uint64_t malformed = 0;
    const auto r = connector_->read(events, std::chrono::milliseconds(200), &malformed);
    malformed_.fetch_add(malformed, std::memory_order_relaxed);
    if (r == procev::ProcConnector::Read::kLost) lost_.fetch_add(1, std::memory_order_relaxed);
    if (r == procev::ProcConnector::Read::kClosed) return;
    const double now = boot_now(), unix_now = unix_now_seconds();
    if (kmsg_) {  // first: an OOM kill is logged before its victim's exit
      uint64_t lost = 0;
      for (kmsg::OomKill& k : kmsg_->read(&lost)) deaths_->on_oom(std::move(k), now);
      lost_.fetch_add(lost, std::memory_order_relaxed);
    }
    for (const procev::ProcEvent& e : events) deaths_->on_event(e, now, unix_now, command);
  }
}

DeathsSample DeathsCollector::take() {
  DeathsSample out;
  out.connected = connector_ != nullptr;
  out.since = deaths_->since();
  if (out.connected) {
    const double taken = boot_now();
    view_ = watcher_->view(interval() / 2, view_);
    std::vector<DeathMember> members;
    const double ticks = procfs::ticks_per_second();
    static const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
    for (const ServerProcesses::Tree& t : view_->trees)
      for (const procfs::ProcStat* p : t.usage.live)
        members.push_back({p->pid, p->ppid, t.name, t.server_type, p->comm,
                           double(p->start_ticks) / ticks, p->rss_pages * page});
    // Walked after `taken`: a fork between the two is in both, which is fine.
    if (view_->proc_ok) deaths_->resync(members, taken);
    save_counts();
  }
  out.lost = lost_.load(std::memory_order_relaxed);
  out.malformed = malformed_.load(std::memory_order_relaxed);
  return out;
}

void DeathsCollector::serve(const DeathsSample& s, const Emit& emit) const {
  Families out;
  FamilyExtras created;
  // The counts as they are now, as /api/v1/deaths lists the records: both
  // read the log, never a sample of it.
  const std::vector<DeathLog::Count> counts =
      s.connected ? deaths_->counts() : std::vector<DeathLog::Count>();
  if (s.connected && !counts.empty()) {
    auto [exits] = add_families(out, {"gym_server_process_exits_total"});
    for (const DeathLog::Count& c : counts)
      for (size_t i = 0; i < kDeathReasons.size(); ++i) {
        LabelPairs l = server_labels(c.server, c.server_type);
        l.emplace_back("reason", kDeathReasons[i]);
        add_metric(*exits, l).counter.value = double(c.exits[i]);
        created.created.push_back(s.since);
      }
  }
  auto [source] = add_families(out, {"gym_exporter_process_events_source"});
  add_metric(*source, {{"source", "connector"}}).gauge.value = s.connected ? 1 : 0;
  add_metric(*source, {{"source", "sampling"}}).gauge.value = s.connected ? 0 : 1;
  add_simple(out, "gym_exporter_process_events_lost_total", double(s.lost));
  add_simple(out, "gym_exporter_process_events_malformed_total", double(s.malformed));
  for (const Family& f : out) {
    if (f.name == "gym_server_process_exits_total")
      emit(f, &created);
    else if (f.name == "gym_exporter_process_events_source")
      emit(f);
    else  // what this exporter dropped: counted from its start
      emit_since(emit, f, exporter_start_unix_seconds());
  }
}

}  // namespace gym::exporter
