#include "exposition/families.h"

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

MetricFamily& add_family(Families& out, std::string_view name) {
  const FamilySpec* row = find_family(name);
  MetricFamily f;
  f.name = std::string(name);
  f.help = row ? std::string(row->help) : "";
  f.type = row ? prometheus_type(row->type) : prometheus::MetricType::Untyped;
  out.push_back(std::move(f));
  return out.back();
}

ClientMetric& add_metric(MetricFamily& f, const LabelPairs& labels) {
  ClientMetric m;
  for (const auto& [k, v] : labels) m.label.push_back({k, v});
  f.metric.push_back(std::move(m));
  return f.metric.back();
}

void add_simple(Families& out, std::string_view name, double value, const LabelPairs& labels) {
  MetricFamily& f = add_family(out, name);
  ClientMetric& m = add_metric(f, labels);
  if (f.type == prometheus::MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
}

std::string contract_violation(const MetricFamily& f) {
  const FamilySpec* row = find_family(f.name);
  if (row == nullptr) return "family " + f.name + " has no row in the contract table";
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
