#include "exposition.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>

#include "gym/contract.h"
#include "text_format.h"

#ifndef GYM_EXPORTER_REVISION
#define GYM_EXPORTER_REVISION "unknown"
#endif
#ifndef GYM_EXPORTER_VERSION
#define GYM_EXPORTER_VERSION "0.0.0"
#endif

namespace gym::exporter {

const char* const kVersion = GYM_EXPORTER_VERSION;
const char* const kRevision = GYM_EXPORTER_REVISION;

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

constexpr FamilyDoc kDocs[] = {
    {"gym_concurrency_limit", MetricType::Gauge, "Configured slots of a concurrency limit."},
    {"gym_concurrency_active", MetricType::Gauge, "Slots of a concurrency limit held now."},
    {"gym_concurrency_available", MetricType::Gauge,
     "Slots of a concurrency limit free now (limit - active)."},
    {"gym_concurrency_queue_depth", MetricType::Gauge,
     "Callers waiting for a slot of a concurrency limit now."},
    {"gym_concurrency_admission_timeouts_total", MetricType::Counter,
     "Waits that ran out of the limit's admission timeout (only limits that have one)."},
    {"gym_concurrency_admission_cancelled_total", MetricType::Counter,
     "Waits cancelled before a slot was free."},
    {"gym_resources_operation_queue_duration_seconds", MetricType::Histogram,
     "Time resources operations waited for their limit."},
    {"gym_resources_operation_duration_seconds", MetricType::Histogram,
     "Time resources operations ran inside their limit, by outcome."},
    {"gym_resources_operation_queued", MetricType::Gauge, "Resources operations waiting now."},
    {"gym_resources_operation_active", MetricType::Gauge, "Resources operations running now."},
    {"gym_exporter_build_info", MetricType::Gauge,
     "A metric with a constant '1' value labeled by version and revision of gym-exporter."},
    {"gym_exporter_scrape_duration_seconds", MetricType::Gauge,
     "Time gym-exporter took to build this exposition."},
    {"gym_exporter_registry_segments", MetricType::Gauge,
     "Live writer processes seen in the registry, by segment format version."},
    {"gym_exporter_registry_unmetered_writers", MetricType::Gauge,
     "Live writer processes whose numbers cannot be read: no segment (registry full or "
     "unwritable) or a damaged one."},
    {"gym_exporter_registry_damaged_segments_total", MetricType::Counter,
     "Live segments that lost pages under the reader (truncated): last values kept."},
    {"gym_exporter_registry_resets_total", MetricType::Counter,
     "Live counters or histograms that went down, folded in as a reset of their segment."},
    {"gym_exporter_registry_read_errors_total", MetricType::Counter,
     "Files in the registry directory that could not be opened or read."},
    {"gym_exporter_registry_totals_write_errors_total", MetricType::Counter,
     "Failed writes of the folded totals file (exited writers' segments are kept meanwhile)."},
    {"gym_exporter_registry_retiring", MetricType::Gauge,
     "1 when this exporter holds the registry directory's lock and retires segments."},
    {"gym_exporter_registry_bytes", MetricType::Gauge,
     "Memory the registry directory's files take (allocated blocks)."},
    {"gym_exporter_series", MetricType::Gauge, "Series the registry reader tracks now."},
    {"gym_exporter_series_expired_total", MetricType::Counter,
     "Series without a live writer forgotten after registry.retired_series_ttl."},
    {"gym_exporter_series_over_limit_total", MetricType::Counter,
     "Series records not tracked because registry.max_series was reached."},
    {"gym_exporter_registry_retired_segments_total", MetricType::Counter,
     "Writer processes that exited and whose counters were folded in."},
    {"gym_exporter_registry_dropped_series_total", MetricType::Counter,
     "Series that writers could not register (registry full or limits exceeded)."},
    {"gym_exporter_registry_rejected_segments_total", MetricType::Counter,
     "Files in the registry directory that were not valid segments."},
    {"gym_exporter_registry_invalid_records_total", MetricType::Counter,
     "Series records in segments whose metadata was invalid, skipped."},
    {"gym_server_memory_usage_bytes", MetricType::Gauge,
     "Memory of a server's whole process tree now, by memory type (rss, pss)."},
    {"gym_server_memory_sampled_peak_bytes", MetricType::Gauge,
     "Largest sampled memory of a server's process tree since the exporter started."},
    {"gym_server_processes", MetricType::Gauge, "Processes in a server's tree now."},
    {"gym_server_info", MetricType::Gauge,
     "A constant 1 labeled by the root pid of a server's process tree now."},
    {"gym_host_memory_usage_bytes", MetricType::Gauge,
     "Host memory in use: MemTotal - MemAvailable."},
    {"gym_host_memory_available_bytes", MetricType::Gauge, "Host MemAvailable."},
    {"gym_host_memory_total_bytes", MetricType::Gauge, "Host MemTotal."},
    {"gym_host_memory_sampled_peak_bytes", MetricType::Gauge,
     "Largest sampled host memory usage since the exporter started."},
    {"gym_exporter_memory_sample_duration_seconds", MetricType::Gauge,
     "Time the last memory sample took."},
    {"gym_exporter_memory_sample_errors_total", MetricType::Counter,
     "Failed procfs reads during memory samples, by reason."},
    {"process_cpu_seconds_total", MetricType::Counter,
     "Total user and system CPU time spent in seconds."},
    {"process_resident_memory_bytes", MetricType::Gauge, "Resident memory size in bytes."},
    {"process_virtual_memory_bytes", MetricType::Gauge, "Virtual memory size in bytes."},
    {"process_open_fds", MetricType::Gauge, "Number of open file descriptors."},
    {"process_max_fds", MetricType::Gauge, "Maximum number of open file descriptors."},
    {"process_start_time_seconds", MetricType::Gauge,
     "Start time of the process since unix epoch in seconds."},
};

}  // namespace

MetricFamily& add_family(Families& out, std::string_view name) {
  const FamilyDoc* doc = family_doc(name);
  MetricFamily f;
  f.name = std::string(name);
  f.help = doc ? doc->help : "";
  f.type = doc ? doc->type : MetricType::Untyped;
  out.push_back(std::move(f));
  return out.back();
}

ClientMetric& add_metric(MetricFamily& f,
                         const std::vector<std::pair<std::string, std::string>>& labels) {
  ClientMetric m;
  for (const auto& [k, v] : labels) m.label.push_back({k, v});
  f.metric.push_back(std::move(m));
  return f.metric.back();
}

void add_simple(Families& out, std::string_view name, double value,
                const std::vector<std::pair<std::string, std::string>>& labels) {
  MetricFamily& f = add_family(out, name);
  ClientMetric& m = add_metric(f, labels);
  if (f.type == MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
}

const FamilyDoc* family_doc(std::string_view name) {
  for (const FamilyDoc& d : kDocs)
    if (name == d.name) return &d;
  return nullptr;
}

RegistryCollector::RegistryCollector(std::shared_ptr<SharedRegistry> registry,
                                     std::function<void(const std::string&)> log)
    : registry_(std::move(registry)), log_(std::move(log)) {}

void RegistryCollector::rebuild() {
  model_.clear();
  slots_.clear();
  active_slots_.clear();
  active_ = MetricFamily{};
  // Families first, so that metric pointers stay put once taken.
  const std::string* family = nullptr;
  size_t families = 0;
  for (const SeriesInfo* info : served_) {
    if (family == nullptr || *family != info->family) ++families;
    family = &info->family;
  }
  model_.reserve(families);
  family = nullptr;
  for (size_t i = 0; i < served_.size(); ++i) {
    const SeriesInfo& info = *served_[i];
    if (family == nullptr || *family != info.family) {
      family = &info.family;
      Families one;
      model_.push_back(std::move(add_family(one, info.family)));
      size_t n = 0;
      for (size_t j = i; j < served_.size() && served_[j]->family == info.family; ++j) ++n;
      model_.back().metric.reserve(n);
    }
    ClientMetric& m = add_metric(model_.back(), info.labels);
    if (info.kind == segment::SeriesKind::kHistogram) {
      for (size_t b = 0; b <= info.bounds.size(); ++b) {
        ClientMetric::Bucket bucket;
        bucket.upper_bound = b < info.bounds.size()
                                 ? static_cast<double>(info.bounds[b]) / info.unit_divisor
                                 : std::numeric_limits<double>::infinity();
        m.histogram.bucket.push_back(bucket);
      }
    }
    slots_.emplace_back(&m, i);
  }
  // active = limit - available, for every label set that has a limit.
  std::map<std::vector<std::pair<std::string, std::string>>, std::pair<long, long>> pairs;
  for (size_t i = 0; i < served_.size(); ++i) {
    if (served_[i]->family == family::kConcurrencyLimit)
      pairs[served_[i]->labels].first = long(i) + 1;
    if (served_[i]->family == family::kConcurrencyAvailable)
      pairs[served_[i]->labels].second = long(i) + 1;
  }
  Families one;
  active_ = std::move(add_family(one, family::kConcurrencyActive));
  active_.metric.reserve(pairs.size());
  for (const auto& [labels, idx] : pairs) {
    if (idx.first == 0) continue;
    active_slots_.push_back({&add_metric(active_, labels), idx.first - 1, idx.second - 1});
  }
}

void RegistryCollector::update_values(const Snapshot& snap) {
  for (auto& [metric, i] : slots_) {
    const SeriesSample& s = snap.series[served_index_[i]];
    switch (s.info->kind) {
      case segment::SeriesKind::kCounter:
        metric->counter.value = static_cast<double>(s.counter);
        break;
      case segment::SeriesKind::kGauge:
        metric->gauge.value = static_cast<double>(s.gauge);
        break;
      case segment::SeriesKind::kHistogram:
        metric->histogram.sample_count = s.count();
        metric->histogram.sample_sum = static_cast<double>(s.sum) / s.info->unit_divisor;
        for (size_t b = 0; b < s.cumulative_buckets.size(); ++b)
          metric->histogram.bucket[b].cumulative_count = s.cumulative_buckets[b];
        break;
    }
  }
  for (ActiveSlot& a : active_slots_) {
    const int64_t limit = snap.series[served_index_[size_t(a.limit)]].gauge;
    const int64_t available =
        a.available < 0 ? 0 : snap.series[served_index_[size_t(a.available)]].gauge;
    a.metric->gauge.value = static_cast<double>(segment::wrapping_sub(limit, available));
  }
}

void RegistryCollector::collect(const Emit& emit) {
  registry_->with([&](RegistryReader& reader) { collect_locked(reader.snapshot(), emit); });
}

void RegistryCollector::collect_locked(const Snapshot& snap, const Emit& emit) {
  for (const std::string& p : snap.problems) log_(p);
  if (snap.directory_error != last_dir_error_) {
    if (!snap.directory_error.empty()) log_(snap.directory_error);
    last_dir_error_ = snap.directory_error;
  }
  // The served series (families of the contract; not gym_server_identity or a
  // user's own), in snapshot order, which groups families.
  scratch_infos_.clear();
  scratch_index_.clear();
  const std::string* run_family = nullptr;
  bool served = false;
  for (size_t i = 0; i < snap.series.size(); ++i) {
    const SeriesInfo* info = snap.series[i].info;
    if (run_family == nullptr || *run_family != info->family) {
      run_family = &info->family;
      served = family_doc(info->family) != nullptr;
    }
    if (!served) continue;
    scratch_infos_.push_back(info);
    scratch_index_.push_back(i);
  }
  served_index_.swap(scratch_index_);
  if (scratch_infos_ != served_ || snap.series_epoch != served_epoch_) {
    served_epoch_ = snap.series_epoch;
    served_.swap(scratch_infos_);
    rebuild();
  }
  update_values(snap);
  for (const MetricFamily& f : model_) emit(f);
  if (!active_.metric.empty()) emit(active_);

  Families stats;
  const RegistryStats& st = snap.stats;
  {
    prometheus::MetricFamily& f = add_family(stats, "gym_exporter_registry_segments");
    for (uint32_t v = segment::kMinFormatVersion; v <= segment::kFormatVersion; ++v)
      add_metric(f, {{"format_version", std::to_string(v)}}).gauge.value =
          double(st.live_segments_by_version[v]);
  }
  add_simple(stats, "gym_exporter_registry_unmetered_writers", double(st.unmetered_writers));
  add_simple(stats, "gym_exporter_registry_damaged_segments_total",
             double(st.damaged_segments_total));
  add_simple(stats, "gym_exporter_registry_resets_total", double(st.counter_resets_total));
  add_simple(stats, "gym_exporter_registry_read_errors_total", double(st.read_errors_total));
  add_simple(stats, "gym_exporter_registry_totals_write_errors_total",
             double(st.totals_write_errors_total));
  add_simple(stats, "gym_exporter_registry_retiring", st.retiring ? 1 : 0);
  add_simple(stats, "gym_exporter_registry_bytes", double(st.registry_bytes));
  add_simple(stats, "gym_exporter_series", double(st.series));
  add_simple(stats, "gym_exporter_series_expired_total", double(st.expired_series_total));
  add_simple(stats, "gym_exporter_series_over_limit_total", double(st.series_over_limit_total));
  add_simple(stats, "gym_exporter_registry_retired_segments_total",
             double(snap.stats.retired_segments_total));
  add_simple(stats, "gym_exporter_registry_dropped_series_total",
             double(snap.stats.dropped_series_total));
  add_simple(stats, "gym_exporter_registry_rejected_segments_total",
             double(snap.stats.rejected_files_total));
  add_simple(stats, "gym_exporter_registry_invalid_records_total",
             double(snap.stats.invalid_records_total));
  for (const MetricFamily& f : stats) emit(f);
}

void ProcessCollector::collect(const Emit& emit) {
  Families out;
  std::ifstream stat_file(proc_ + "/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');
  if (close != std::string::npos) {
    std::istringstream fields(stat.substr(close + 2));
    std::vector<std::string> f((std::istream_iterator<std::string>(fields)),
                               std::istream_iterator<std::string>());
    // f[0] is field 3 (state): field N is f[N - 3].
    if (f.size() > 21) {
      const double ticks = double(::sysconf(_SC_CLK_TCK));
      const double page = double(::sysconf(_SC_PAGESIZE));
      add_simple(out, "process_cpu_seconds_total",
                 (std::stod(f[14 - 3]) + std::stod(f[15 - 3])) / ticks);
      add_simple(out, "process_virtual_memory_bytes", std::stod(f[23 - 3]));
      add_simple(out, "process_resident_memory_bytes", std::stod(f[24 - 3]) * page);
      std::ifstream proc_stat(proc_ + "/stat");
      std::string key;
      double btime = 0;
      while (proc_stat >> key) {
        if (key == "btime") {
          proc_stat >> btime;
          break;
        }
      }
      add_simple(out, "process_start_time_seconds", btime + std::stod(f[22 - 3]) / ticks);
    }
  }
  if (DIR* d = ::opendir((proc_ + "/self/fd").c_str())) {
    int n = 0;
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
    add_simple(out, "process_open_fds", n - 1);  // less the one reading the directory
  }
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0)
    add_simple(out, "process_max_fds", double(lim.rlim_cur));
  for (const MetricFamily& f : out) emit(f);
}

void BuildInfoCollector::collect(const Emit& emit) {
  Families out;
  add_simple(out, "gym_exporter_build_info", 1, {{"revision", kRevision}, {"version", kVersion}});
  emit(out.back());
}

std::string Exposition::render() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto start = std::chrono::steady_clock::now();
  std::string out;
  out.reserve(last_size_ + last_size_ / 8);
  const Emit emit = [&out](const MetricFamily& f) { write_family(f, out); };
  for (auto& c : collectors_) c->collect(emit);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  Families duration;
  add_simple(duration, "gym_exporter_scrape_duration_seconds", took.count());
  write_family(duration.back(), out);
  last_size_ = out.size();
  return out;
}

void Exposition::replace(std::vector<std::unique_ptr<Collector>> collectors) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_ = std::move(collectors);
}

}  // namespace gym::exporter
