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
// the same format with underscore names), OpenMetrics 1.0.0 and delimited
// protobuf (named with its proto and encoding: never for a wildcard); text,
// then OpenMetrics, on a tie (curl's */*), and text when nothing offered is
// acceptable, as client_golang does.
Format negotiate(const char* accept);

class Encoder;
// The encoder of a format (one of each, shared).
const Encoder& encoder_for(Format format);

}  // namespace gym::exporter
