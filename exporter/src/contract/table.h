// The contract table: every metric family gym-exporter serves, with its type,
// unit, HELP text and the label names its samples may carry. It is the one
// source: the exporter serves exactly these families (a family without a row
// is not served, and a test fails if one is emitted), and docs/metrics.md
// describes the same rows. The registry's rows are the library's
// (gym/families.h: what its processes write); the exporter's own are in
// server_rows.h and exporter_rows.h.
//
// Adding a family the exporter makes is one row here; the collector that
// emits it (exporter/src/collectors/) and its tests.
//
// Thread-safety: constants and pure functions only.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <iterator>
#include <string_view>

#include "contract/exporter_rows.h"
#include "contract/server_rows.h"
#include "gym/contract.h"
#include "gym/families.h"

namespace gym::exporter {

namespace contract_detail {
template <size_t... N>
constexpr std::array<FamilySpec, (N + ...)> join(const FamilySpec (&... rows)[N]) {
  std::array<FamilySpec, (N + ...)> out{};
  size_t i = 0;
  ((std::copy(std::begin(rows), std::end(rows), out.begin() + i), i += N), ...);
  return out;
}
}  // namespace contract_detail

// The whole table: the registry's rows, then the exporter's.
inline constexpr auto kFamilies =
    contract_detail::join(kRegistryFamilies, kServerFamilies, kSelfFamilies);

// The row of `name`, or nullptr.
constexpr const FamilySpec* find_family(std::string_view name) {
  for (const FamilySpec& f : kFamilies)
    if (f.name == name) return &f;
  return nullptr;
}

// A family's OpenTelemetry name, or `name` itself when it has none.
constexpr std::string_view otel_family_name(std::string_view name) {
  const FamilySpec* row = find_family(name);
  return row != nullptr && !row->otel.empty() ? row->otel : name;
}
// Back: the Prometheus name of an OpenTelemetry name, or `name` itself.
constexpr std::string_view prometheus_family_name(std::string_view name) {
  for (const FamilySpec& f : kFamilies)
    if (!f.otel.empty() && f.otel == name) return f.name;
  return name;
}

}  // namespace gym::exporter
