// Content negotiation for /metrics: which format answers an Accept header,
// and the comma-separated, q-valued header lists it and Accept-Encoding are.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "exposition/escaping.h"

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
// the same format with a scheme for names; see escaping()), OpenMetrics
// 1.0.0 and delimited protobuf (named with its proto and encoding: never for
// a wildcard); text, then OpenMetrics, on a tie (curl's */*), and text when
// nothing offered is acceptable, as client_golang does.
Format negotiate(const char* accept);

// The escaping scheme (escaping.h) the client asks `format` (what
// negotiate() chose) to name things by: that of the range naming the format
// with the highest q (on a tie, one that names a scheme), as Prometheus 3
// asks. Empty when that range names none, and for text when it is not
// version 1.0.0 (then the reply is text 0.0.4); for protobuf only
// allow-utf-8 (its names are UTF-8 strings whatever the scheme: any other
// serves the legacy names, as before). An unknown scheme is underscores.
std::optional<Escaping> escaping(const char* accept, Format format);

// Both, from one parse of the header: what a request is answered with.
struct Negotiated {
  Format format;
  std::optional<Escaping> escaping;
};
Negotiated negotiate_accept(const char* accept);

class Encoder;
// The encoder of a format (one of each, shared), naming by `escaping`
// (empty: the legacy names, and no escaping= in its Content-Type; text
// 0.0.4), which its Content-Type echoes.
const Encoder& encoder_for(Format format, std::optional<Escaping> escaping = {});

}  // namespace gym::exporter
