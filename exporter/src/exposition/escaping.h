// Prometheus' escaping schemes (its "UTF-8 escaping schemes" document): how
// names outside the legacy characters (a-zA-Z0-9_:) are written for a
// scraper that negotiated `escaping=` in its Accept header. Our UTF-8 names
// are the OpenTelemetry ones (contract/table.h); the legacy names are the
// Prometheus ones and need no escaping.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gym::exporter {

enum class Escaping {
  kUnderscores,  // the legacy (Prometheus) names, as always
  kDots,         // the OpenTelemetry names: '.' as _dot_, '_' as __, others as _
  kValues,       // the OpenTelemetry names: U__, '_' as __, others as _<hex code point>_
  kAllowUtf8,    // the OpenTelemetry names as they are
};

// The scheme of an `escaping=` value; underscores for any other value, as
// the document says a producer falls back to.
Escaping escaping_scheme(std::string_view value);
// Its name in a header.
std::string_view escaping_name(Escaping escaping);

// `name` (UTF-8; an invalid byte counts as U+FFFD) escaped by `scheme`.
// Underscores and values leave a legacy name as it is; dots always doubles
// its underscores (so that it unescapes to itself).
std::string escape_name(std::string_view name, Escaping scheme);

}  // namespace gym::exporter
