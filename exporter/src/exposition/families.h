// Building metric families from the contract table (gym/families.h): a family
// gets its row's type and HELP text. For collectors.
//
// Thread-safety: pure functions.
#pragma once

#include <prometheus/metric_family.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gym/families.h"

namespace gym::exporter {

using Families = std::vector<prometheus::MetricFamily>;
using LabelPairs = std::vector<std::pair<std::string, std::string>>;

prometheus::MetricType prometheus_type(MetricType t);

// A family with its row's HELP and type appended to `out` (untyped and
// without HELP when it has no row: the Exposition will not serve it).
prometheus::MetricFamily& add_family(Families& out, std::string_view name);
// A sample with labels appended to a family.
prometheus::ClientMetric& add_metric(prometheus::MetricFamily& f, const LabelPairs& labels);
// A one-sample counter or gauge family appended to `out`.
void add_simple(Families& out, std::string_view name, double value, const LabelPairs& labels = {});

// A server's labels (its name and type), the first of every gym_server_* sample.
LabelPairs server_labels(const std::string& name, const std::string& type);

// Why `f` breaks the contract table (no row, another type or HELP, a label
// the row does not name), or empty.
std::string contract_violation(const prometheus::MetricFamily& f);

}  // namespace gym::exporter
