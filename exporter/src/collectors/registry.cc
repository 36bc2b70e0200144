// The contract's concurrency and resources-operation families (the rows of
// contract/table.h whose source is the registry), built from a fresh registry
// snapshot on each scrape, and the registry's own counts.
#include <algorithm>
#include <limits>
#include <set>
#include <tuple>

#include "collector.h"
#include "contract/families.h"
#include "contract/table.h"
#include "gym/contract.h"
#include "logging.h"

namespace gym::exporter {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;

class RegistryCollector : public Collector {
 public:
  RegistryCollector(std::shared_ptr<SharedRegistry> registry, Log log)
      : registry_(std::move(registry)), log_(std::move(log)) {}
  void collect(const Emit& emit) override;

 private:
  void rebuild(const Snapshot& snap);
  void add_served_families();
  void add_limit_families(const Snapshot& snap);
  void update_values(const Snapshot& snap);
  void update_limits(const Snapshot& snap);
  bool limits_fit(const Snapshot& snap) const;
  void collect_locked(const Snapshot& snap, const Emit& emit);
  void select_served(const Snapshot& snap);
  void emit_stats(const Snapshot& snap, const Emit& emit);
  // Whether the registry's family is served; counts and logs (once) those
  // that are not in the contract table.
  bool served_family(std::string_view family);

  std::shared_ptr<SharedRegistry> registry_;
  Log log_;
  std::string last_dir_error_;
  // Writers and declared servers of the last scrape, to log who came and went.
  std::set<std::tuple<pid_t, uint64_t, uint32_t>> writers_;
  std::set<std::tuple<std::string, std::string, pid_t>> servers_;
  void log_changes(const Snapshot& snap);
  std::set<std::string> unknown_logged_;
  size_t unknown_series_ = 0;
  // The model of the served series, kept across scrapes: rebuilt when the
  // set of series changes, otherwise only its values are updated.
  std::vector<const SeriesInfo*> served_;  // in snapshot order
  uint64_t served_epoch_ = UINT64_MAX;     // the snapshot epoch served_ is from
  std::vector<uint32_t> served_index_;     // index in snapshot.series
  Families model_;
  std::vector<FamilyExtras> extras_;  // by family of model_: native buckets, created times
  // By family of model_ and metric: left out of this scrape (an age whose
  // limit or operation no longer exists: only its admissions remain).
  std::vector<std::vector<char>> absent_;
  // Where a served series' values go: its metric, and its place in its
  // family's extras and absent_ (those it has: native buckets and
  // exemplars, the snapshot's; its created time; whether an age is left out).
  struct Slot {
    ClientMetric* metric;
    uint32_t served;  // index into served_
    uint32_t family;  // index into model_, extras_, absent_
    uint32_t k;       // its metric's index in the family
  };
  std::vector<Slot> slots_;
  // The families made of each limit's row (Snapshot::limits, one join by
  // the reader): active slots, admissions (the holds' count of beginnings),
  // processes and stranded slots, a metric each by row (admissions: by row
  // with a holds' series).
  Family active_, admissions_, processes_, stranded_;
  FamilyExtras admissions_extras_;  // their created times
  // By snapshot index: its served slot (index into slots_), or -1.
  std::vector<int32_t> slot_of_;
  // The rows with admissions (a holds' series), in the order of that series
  // (its labels'): the order of admissions_'s metrics.
  std::vector<uint32_t> admitting_;
  std::vector<uint32_t> scratch_index_;
  std::vector<const SeriesInfo*> scratch_infos_;
};

bool RegistryCollector::served_family(std::string_view family) {
  const FamilySpec* row = find_family(family);
  if (row != nullptr && row->source == Source::kRegistry) return true;
  if (family == family::kServerIdentity) return false;  // read by the server trees
  if (unknown_logged_.insert(std::string(family)).second)
    log_("family " + std::string(family) +
         " is not in the contract table: its series are not served");
  return false;
}

void RegistryCollector::rebuild(const Snapshot& snap) {
  model_.clear();
  extras_.clear();
  absent_.clear();
  slots_.clear();
  add_served_families();
  add_limit_families(snap);
}

// A family of the model for every family served, a metric for every series
// in it, and each metric's slot (where its sample's values go).
void RegistryCollector::add_served_families() {
  // Each family's metrics reserved before any is taken, so that their
  // pointers stay put (model_, a deque, never moves a family).
  const std::string_view* family = nullptr;
  size_t families = 0;
  for (const SeriesInfo* info : served_) {
    if (family == nullptr || *family != info->family) ++families;
    family = &info->family;
  }
  extras_.reserve(families);
  family = nullptr;
  for (size_t i = 0; i < served_.size(); ++i) {
    const SeriesInfo& info = *served_[i];
    if (family == nullptr || *family != info.family) {
      family = &info.family;
      add_family(model_, Row::named(info.family));
      size_t n = 0;
      for (size_t j = i; j < served_.size() && served_[j]->family == info.family; ++j) ++n;
      model_.back().metric.reserve(n);
      extras_.emplace_back();
      absent_.emplace_back(info.kind == segment::SeriesKind::kAges ? n : 0, char(0));
      if (info.native_words != 0) extras_.back().native.resize(n);
      if (info.kind == segment::SeriesKind::kHistogram) {
        extras_.back().exemplars.resize(n);
        extras_.back().exemplar_divisor = info.unit_divisor;
      }
      if (info.kind != segment::SeriesKind::kGauge && info.kind != segment::SeriesKind::kAges)
        extras_.back().created.resize(n);
    }
    const auto k = static_cast<uint32_t>(model_.back().metric.size());
    ClientMetric& m = add_series_metric(model_.back(), info.labels);
    if (info.kind == segment::SeriesKind::kHistogram) {
      m.histogram.bucket.reserve(info.bounds.size() + 1);
      for (size_t b = 0; b <= info.bounds.size(); ++b) {
        ClientMetric::Bucket bucket;
        bucket.upper_bound = b < info.bounds.size()
                                 ? static_cast<double>(info.bounds[b]) / info.unit_divisor
                                 : std::numeric_limits<double>::infinity();
        m.histogram.bucket.push_back(bucket);
      }
    }
    slots_.push_back({&m, static_cast<uint32_t>(i), static_cast<uint32_t>(model_.size() - 1), k});
  }
}

// The families made of the limits' rows, a metric a row (the labels of its
// gym_concurrency_limit series).
void RegistryCollector::add_limit_families(const Snapshot& snap) {
  Families made;
  active_ = std::move(add_family(made, family::kConcurrencyActive));
  admissions_ = std::move(add_family(made, family::kConcurrencyAdmissions));
  processes_ = std::move(add_family(made, family::kConcurrencyProcesses));
  stranded_ = std::move(add_family(made, family::kConcurrencyStrandedSlots));
  admitting_.clear();
  for (size_t k = 0; k < snap.limits.size(); ++k) {
    const LimitRow& row = snap.limits[k];
    if (row.holds != LimitRow::kNone) admitting_.push_back(uint32_t(k));
    if (!row.present()) continue;  // its admissions alone
    const SeriesLabels& labels = snap.series[row.series].info->labels;
    add_series_metric(active_, labels);
    add_series_metric(processes_, labels);
    add_series_metric(stranded_, labels);
  }
  std::sort(admitting_.begin(), admitting_.end(),
            [&](uint32_t a, uint32_t b) { return snap.limits[a].holds < snap.limits[b].holds; });
  for (uint32_t k : admitting_)
    add_series_metric(admissions_, snap.series[snap.limits[k].holds].info->labels);
}

void RegistryCollector::update_values(const Snapshot& snap) {
  for (const auto& [metric, i, f, k] : slots_) {
    const SeriesSample& s = snap.series[served_index_[i]];
    FamilyExtras& x = extras_[f];
    if (std::vector<char>& absent = absent_[f]; k < absent.size())
      absent[k] = s.in_progress ? 0 : 1;
    if (k < x.created.size()) x.created[k] = double(s.created_unix_ns) / 1e9;
    switch (s.info->kind) {
      case segment::SeriesKind::kCounter:
        metric->counter.value = static_cast<double>(s.counter) / s.info->unit_divisor;
        break;
      case segment::SeriesKind::kGauge:
        metric->gauge.value = static_cast<double>(s.gauge);
        break;
      case segment::SeriesKind::kAges:
        // The age of the oldest in progress, 0 when none (or none has a slot).
        metric->gauge.value = age_seconds(snap, s);
        break;
      case segment::SeriesKind::kHistogram:
        metric->histogram.sample_count = s.count();
        metric->histogram.sample_sum = static_cast<double>(s.sum) / s.info->unit_divisor;
        for (size_t b = 0; b < s.cumulative_buckets.size(); ++b)
          metric->histogram.bucket[b].cumulative_count = s.cumulative_buckets[b];
        if (k < x.native.size()) x.native[k] = s.native;
        if (k < x.exemplars.size()) x.exemplars[k] = s.exemplars;
        break;
    }
  }
  update_limits(snap);
}

// Each limit's row: its free slots served as gym_concurrency_available,
// and the families made of it.
// Whether the model's limit families were made from rows of this shape
// (the same rows, present or not, with admissions or not): they are while
// the served series stay the same; checked, so that no row is ever looked
// up past the model.
bool RegistryCollector::limits_fit(const Snapshot& snap) const {
  size_t present = 0;
  for (const LimitRow& row : snap.limits) present += row.present() ? 1 : 0;
  if (present != active_.metric.size() || admitting_.size() != admissions_.metric.size())
    return false;
  for (uint32_t k : admitting_)
    if (k >= snap.limits.size() || snap.limits[k].holds == LimitRow::kNone) return false;
  return true;
}

void RegistryCollector::update_limits(const Snapshot& snap) {
  slot_of_.assign(snap.series.size(), -1);
  for (size_t k = 0; k < slots_.size(); ++k) slot_of_[served_index_[slots_[k].served]] = int32_t(k);
  admissions_extras_.created.resize(admitting_.size());
  for (size_t a = 0; a < admitting_.size(); ++a) {
    const SeriesSample& holds = snap.series[snap.limits[admitting_[a]].holds];
    admissions_.metric[a].counter.value = double(holds.counter);
    admissions_extras_.created[a] = double(holds.created_unix_ns) / 1e9;
  }
  size_t present = 0;
  for (const LimitRow& row : snap.limits) {
    if (!row.present()) continue;
    if (row.available != LimitRow::kNone && slot_of_[row.available] >= 0)
      slots_[size_t(slot_of_[row.available])].metric->gauge.value = double(row.free);
    active_.metric[present].gauge.value = double(row.active);
    processes_.metric[present].gauge.value = double(row.processes);
    stranded_.metric[present++].gauge.value = double(row.stranded_slots);
  }
}

void RegistryCollector::collect(const Emit& emit) {
  registry_->with([&](RegistryReader& reader) { collect_locked(reader.snapshot(), emit); });
}

// At debug level: writers that appeared or went, servers declared or gone.
void RegistryCollector::log_changes(const Snapshot& snap) {
  if (!log_enabled(spdlog::level::debug)) return;
  std::set<std::tuple<pid_t, uint64_t, uint32_t>> writers;
  for (const WriterInfo& w : snap.writers) writers.emplace(w.pid, w.start_ticks, w.format_version);
  std::set<std::tuple<std::string, std::string, pid_t>> servers;
  for (const DeclaredServer& d : snap.servers) servers.emplace(d.name, d.server_type, d.pid);
  auto each_new = [](const auto& now, const auto& before, auto&& f) {
    for (const auto& x : now)
      if (!before.contains(x)) f(x);
  };
  auto writer_fields = [](const auto& w) {
    return LogFields{{"pid", std::to_string(std::get<0>(w))},
                     {"start_ticks", std::to_string(std::get<1>(w))},
                     {"format_version", std::to_string(std::get<2>(w))}};
  };
  auto server_fields = [](const auto& d) {
    return LogFields{{"server", std::get<0>(d)},
                     {"server_type", std::get<1>(d)},
                     {"pid", std::to_string(std::get<2>(d))}};
  };
  each_new(writers, writers_, [&](const auto& w) {
    log_event(spdlog::level::debug, "registry: writer appeared", writer_fields(w));
  });
  each_new(writers_, writers, [&](const auto& w) {
    log_event(spdlog::level::debug, "registry: writer gone", writer_fields(w));
  });
  each_new(servers, servers_, [&](const auto& d) {
    log_event(spdlog::level::debug, "registry: server declared", server_fields(d));
  });
  each_new(servers_, servers, [&](const auto& d) {
    log_event(spdlog::level::debug, "registry: declared server gone", server_fields(d));
  });
  writers_.swap(writers);
  servers_.swap(servers);
}

void RegistryCollector::collect_locked(const Snapshot& snap, const Emit& emit) {
  log_changes(snap);
  for (const std::string& p : snap.problems) log_("registry: " + p);
  if (snap.directory_error != last_dir_error_) {
    if (!snap.directory_error.empty()) log_("registry: " + snap.directory_error);
    last_dir_error_ = snap.directory_error;
  }
  select_served(snap);
  if (scratch_infos_ != served_ || snap.series_epoch != served_epoch_ || !limits_fit(snap)) {
    served_epoch_ = snap.series_epoch;
    served_.swap(scratch_infos_);
    rebuild(snap);
  }
  update_values(snap);
  for (size_t k = 0; k < model_.size(); ++k) {
    const std::vector<char>& absent = absent_[k];
    if (std::find(absent.begin(), absent.end(), 1) != absent.end()) {
      Family present = model_[k];  // ages have no extras
      present.metric.clear();
      for (size_t m = 0; m < absent.size(); ++m)
        if (!absent[m]) present.metric.push_back(model_[k].metric[m]);
      if (!present.metric.empty()) emit(present);
      continue;
    }
    emit(model_[k],
         extras_[k].native.empty() && extras_[k].created.empty() ? nullptr : &extras_[k]);
  }
  if (!active_.metric.empty()) emit(active_);
  if (!admissions_.metric.empty()) emit(admissions_, &admissions_extras_);
  if (!processes_.metric.empty()) emit(processes_);
  if (!stranded_.metric.empty()) emit(stranded_);
  emit_stats(snap, emit);
}

// The served series, in snapshot order (which groups families), into
// scratch_infos_ and served_index_.
void RegistryCollector::select_served(const Snapshot& snap) {
  scratch_infos_.clear();
  scratch_index_.clear();
  unknown_series_ = 0;
  bool served = false;
  bool identity = false;
  for (size_t i = 0; i < snap.series.size(); ++i) {
    const SeriesInfo* info = snap.series[i].info;
    if (i == 0 || snap.series[i].family != snap.series[i - 1].family) {
      served = served_family(info->family);
      identity = info->family == family::kServerIdentity;
    }
    if (!served) {
      unknown_series_ += identity ? 0 : 1;
      continue;
    }
    scratch_infos_.push_back(info);
    scratch_index_.push_back(static_cast<uint32_t>(i));
  }
  served_index_.swap(scratch_index_);
}

void RegistryCollector::emit_stats(const Snapshot& snap, const Emit& emit) {
  Families stats;
  const RegistryStats& st = snap.stats;
  MetricFamily& segments = add_family(stats, "gym_exporter_registry_segments");
  for (uint32_t v = segment::kMinFormatVersion; v <= segment::kFormatVersion; ++v)
    add_metric(segments, {{"format_version", std::to_string(v)}}).gauge.value =
        double(st.live_segments_by_version[v]);
  const struct {
    Row row;
    double value;
  } simple[] = {
      {"gym_exporter_registry_unmetered_writers", double(st.unmetered_writers)},
      {"gym_exporter_registry_damaged_segments_total", double(st.damaged_segments_total)},
      {"gym_exporter_registry_resets_total", double(st.counter_resets_total)},
      {"gym_exporter_registry_read_errors_total", double(st.read_errors_total)},
      {"gym_exporter_registry_totals_write_errors_total", double(st.totals_write_errors_total)},
      {"gym_exporter_registry_retiring", st.retiring ? 1.0 : 0.0},
      {"gym_exporter_registry_bytes", double(st.registry_bytes)},
      {"gym_exporter_series", double(st.series)},
      {"gym_exporter_series_expired_total", double(st.expired_series_total)},
      {"gym_exporter_series_over_limit_total", double(st.series_over_limit_total)},
      {"gym_exporter_registry_retired_segments_total", double(st.retired_segments_total)},
      {"gym_exporter_registry_dropped_series_total", double(st.dropped_series_total)},
      {"gym_exporter_registry_rejected_segments_total", double(st.rejected_files_total)},
      {"gym_exporter_registry_invalid_records_total", double(st.invalid_records_total)},
      {"gym_exporter_registry_inconsistent_reads_total", double(st.inconsistent_reads_total)},
      {"gym_exporter_registry_unknown_series", double(unknown_series_)},
  };
  for (const auto& [name, value] : simple) add_simple(stats, name, value);
  // The reader's counters count from its start.
  for (const Family& f : stats) emit_since(emit, f, double(snap.reader_started_unix_ns) / 1e9);
}

GYM_REGISTER_COLLECTOR({.name = "registry",
                        .order = 0,
                        .parse = nullptr,
                        .make = [](const CollectorSettings*, const CollectorContext& c) {
                          return std::make_unique<RegistryCollector>(c.registry, c.warn);
                        }});

}  // namespace
}  // namespace gym::exporter
