// Content negotiation for /metrics: which format answers an Accept header,
// and the comma-separated, q-valued header lists it and Accept-Encoding are.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gym::exporter {

// One item of a header list ("type/subtype; a=b; q=0.5"): its value, its
// parameters (names lower-cased, quotes removed) and its q (1 when absent, 0
// when unreadable or out of range).
struct HeaderItem {
  std::string value;
  std::vector<std::pair<std::string, std::string>> params;
  double q = 1;
  // The parameter's value, or empty.
  std::string_view param(std::string_view name) const;
};
std::vector<HeaderItem> parse_header_list(std::string_view header);

enum class Format { kText, kOpenMetrics, kProtobuf };

// The format that answers `accept` (null: no header): the one the client
// prefers by q-value among text 0.0.4 (also for text/plain version 1.0.0,
// the same format; see utf8_names()), OpenMetrics 1.0.0 and delimited
// protobuf (named with its proto and encoding: never for a wildcard); text,
// then OpenMetrics, on a tie (curl's */*), and text when nothing offered is
// acceptable, as client_golang does.
Format negotiate(const char* accept);

// Whether the client takes UTF-8 names in `format` (what negotiate() chose):
// the range it gives that format the highest q says escaping=allow-utf-8
// (for text, only text/plain version 1.0.0 can), as Prometheus 3 does.
bool utf8_names(const char* accept, Format format);

class Encoder;
// The encoder of a format (one of each, shared); with `utf8`, one that
// serves the OpenTelemetry names (gym/families.h) and says so in its
// Content-Type (text then is version 1.0.0).
const Encoder& encoder_for(Format format, bool utf8 = false);

}  // namespace gym::exporter
