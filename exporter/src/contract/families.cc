#include "contract/families.h"

#include "gym/contract.h"

namespace gym::exporter {

using prometheus::ClientMetric;
using prometheus::MetricFamily;

prometheus::MetricType prometheus_type(MetricType t) {
  switch (t) {
    case MetricType::kCounter:
      return prometheus::MetricType::Counter;
    case MetricType::kGauge:
      return prometheus::MetricType::Gauge;
    case MetricType::kHistogram:
      return prometheus::MetricType::Histogram;
  }
  return prometheus::MetricType::Untyped;
}

Family& add_family(Families& out, Row row) {
  Family& f = out.emplace_back();
  f.name = std::string(row.name());
  f.spec = row.spec();
  f.help = f.spec ? std::string(f.spec->help) : "";
  f.type = f.spec ? prometheus_type(f.spec->type) : prometheus::MetricType::Untyped;
  return f;
}

namespace {
template <class Pairs>
ClientMetric& add_metric_of(MetricFamily& f, const Pairs& labels) {
  ClientMetric m;
  m.label.reserve(labels.size());
  for (const auto& [k, v] : labels) m.label.push_back({std::string(k), std::string(v)});
  f.metric.push_back(std::move(m));
  return f.metric.back();
}
}  // namespace

ClientMetric& add_metric(MetricFamily& f, const LabelPairs& labels) {
  return add_metric_of(f, labels);
}
ClientMetric& add_series_metric(MetricFamily& f, const SeriesLabels& labels) {
  return add_metric_of(f, labels);
}

void add_simple(Families& out, Row row, double value, const LabelPairs& labels) {
  MetricFamily& f = add_family(out, row);
  ClientMetric& m = add_metric(f, labels);
  if (f.type == prometheus::MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
}

std::string contract_violation(const Family& f) {
  const FamilySpec* row = f.spec;
  if (row == nullptr) return "family " + f.name + " has no row in the contract table";
  if (row->name != f.name)
    return "family " + f.name + " carries the row of " + std::string(row->name);
  if (prometheus_type(row->type) != f.type || row->help != f.help)
    return "family " + f.name + " differs from its row in type or HELP";
  for (const ClientMetric& m : f.metric)
    for (const auto& l : m.label)
      if (!row->has_label(l.name))
        return "family " + f.name + " has label " + l.name + ", not in its row";
  return {};
}

LabelPairs server_labels(const std::string& name, const std::string& type) {
  return {{std::string(label::kServerName), name}, {std::string(label::kServerType), type}};
}

}  // namespace gym::exporter
