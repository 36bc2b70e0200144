// Building metric families from the contract table (contract/table.h): a family
// gets its row's type and HELP text. For collectors.
//
// Thread-safety: pure functions.
#pragma once

#include <prometheus/metric_family.h>

#include <array>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "contract/table.h"
#include "gym/series_labels.h"

namespace gym::exporter {

// A family and the row of the contract table it is served by (nullptr: none,
// and the Exposition will not serve it). Encoders take the unit and the row's
// other columns from `spec`, never by looking the name up again: a family may
// be renamed (OpenTelemetry names) on its way out.
struct Family : prometheus::MetricFamily {
  const FamilySpec* spec = nullptr;
};
// A deque: adding a family never moves the others, so a reference that
// add_family returned stays valid however many follow it.
using Families = std::deque<Family>;
using LabelPairs = std::vector<std::pair<std::string, std::string>>;

prometheus::MetricType prometheus_type(MetricType t);

// Not constexpr: called at compile time, it is the compiler's error message.
inline void family_name_has_no_row_in_the_contract_table() {}

// A family name checked against the contract table: from a literal or a
// constant, at compile time (a name with no row does not compile); from a
// string known only at run time, with Row::named (a name with no row then
// yields a family the Exposition refuses, counts and logs). It views the
// name it was made from: pass it on at once, do not keep it.
class Row {
 public:
  // By index, not by comparing find_family's pointer with null: GCC 12 with
  // -fsanitize=undefined does not take that comparison as a constant.
  consteval Row(std::string_view name)  // NOLINT(google-explicit-constructor)
      : name_(name), spec_(nullptr) {
    size_t i = 0;
    while (i < std::size(kFamilies) && kFamilies[i].name != name) ++i;
    if (i == std::size(kFamilies))
      family_name_has_no_row_in_the_contract_table();
    else
      spec_ = &kFamilies[i];
  }
  template <size_t N>
  consteval Row(const char (&name)[N])  // NOLINT(google-explicit-constructor)
      : Row(std::string_view(name, N - 1)) {}
  static Row named(std::string_view name) { return Row(name, find_family(name)); }
  std::string_view name() const { return name_; }
  const FamilySpec* spec() const { return spec_; }

 private:
  constexpr Row(std::string_view name, const FamilySpec* spec) : name_(name), spec_(spec) {}
  std::string_view name_;
  const FamilySpec* spec_;
};

// A family with its row's HELP, type and spec appended to `out` (untyped and
// without HELP when it has no row).
Family& add_family(Families& out, Row row);
// Families appended to `out` in the order of `rows`, as add_family makes
// each: `auto [a, b] = add_families(out, {"gym_x", "gym_y"});`.
template <size_t N>
std::array<Family*, N> add_families(Families& out, const Row (&rows)[N]) {
  std::array<Family*, N> made{};
  for (size_t i = 0; i < N; ++i) made[i] = &add_family(out, rows[i]);
  return made;
}
// A sample with labels appended to a family.
prometheus::ClientMetric& add_metric(prometheus::MetricFamily& f, const LabelPairs& labels);
// The same, with a registry series' labels.
prometheus::ClientMetric& add_series_metric(prometheus::MetricFamily& f,
                                            const SeriesLabels& labels);
// A one-sample counter or gauge family appended to `out`.
void add_simple(Families& out, Row row, double value, const LabelPairs& labels = {});

// A server's labels (its name and type), the first of every gym_server_* sample.
LabelPairs server_labels(const std::string& name, const std::string& type);

// Why `f` breaks the contract table (no row, a row of another name, another
// type or HELP, a label the row does not name), or empty.
std::string contract_violation(const Family& f);

}  // namespace gym::exporter
