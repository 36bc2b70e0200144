#include "collector.h"

#include <time.h>

#include <algorithm>
#include <tuple>

#include "yaml_reader.h"

namespace gym::exporter {

namespace {
std::vector<CollectorKind>& kinds() {
  static std::vector<CollectorKind> all;  // filled at static initialization
  return all;
}
}  // namespace

bool register_collector_kind(CollectorKind kind) {
  kinds().push_back(std::move(kind));
  return true;
}

std::vector<const CollectorKind*> collector_kinds() {
  std::vector<const CollectorKind*> out;
  for (const CollectorKind& k : kinds()) out.push_back(&k);
  std::sort(out.begin(), out.end(), [](const CollectorKind* a, const CollectorKind* b) {
    return std::tie(a->order, a->name) < std::tie(b->order, b->name);
  });
  return out;
}

const CollectorKind* find_collector_kind(const std::string& name) {
  for (const CollectorKind& k : kinds())
    if (k.name == name) return &k;
  return nullptr;
}

std::unique_ptr<Collector> make_collector(const std::string& name, const CollectorContext& context,
                                          const CollectorSettings* settings) {
  const CollectorKind* kind = find_collector_kind(name);
  if (kind == nullptr) return nullptr;
  std::shared_ptr<const CollectorSettings> defaults;
  if (settings == nullptr && kind->parse) {
    std::vector<std::string> errors;
    YamlReader rd("defaults", errors);
    defaults = kind->parse(rd, YAML::Node());
    settings = defaults.get();
  }
  return kind->make(settings, context);
}

double unix_now_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

namespace {
const double g_exporter_started = unix_now_seconds();
}  // namespace

double exporter_start_unix_seconds() {
  return g_exporter_started;
}

void emit_since(const Emit& emit, const Family& f, double since) {
  if (!(since > 0) ||
      (f.type != prometheus::MetricType::Counter && f.type != prometheus::MetricType::Histogram))
    return emit(f);
  FamilyExtras extras;
  extras.created.assign(f.metric.size(), since);
  emit(f, &extras);
}

void emit_sample_stats(const std::vector<SampleStats>& stats, const Emit& emit) {
  if (stats.empty()) return;
  Families out;
  Family& duration = add_family(out, "gym_exporter_collector_sample_duration_seconds");
  Family& overruns = add_family(out, "gym_exporter_collector_sample_overruns_total");
  Family& errors = add_family(out, "gym_exporter_collector_sample_errors_total");
  FamilyExtras overruns_since, errors_since;
  for (const SampleStats& s : stats) {
    const LabelPairs l{{"collector", s.collector}};
    add_metric(duration, l).gauge.value = s.last_duration_seconds;
    add_metric(overruns, l).counter.value = double(s.overruns);
    overruns_since.created.push_back(s.since);
    for (const auto& [reason, n] : s.errors) {
      add_metric(errors, {{"collector", s.collector}, {"reason", reason}}).counter.value =
          double(n);
      errors_since.created.push_back(s.since);
    }
  }
  emit(duration);
  emit(overruns, &overruns_since);
  if (!errors.metric.empty()) emit(errors, &errors_since);
}

}  // namespace gym::exporter
