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

}  // namespace gym::exporter
