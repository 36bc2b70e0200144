#include "exposition/negotiate.h"

#include "exposition/protobuf.h"
#include "exposition/text.h"

#include <strings.h>

#include <algorithm>
#include <cstdlib>

namespace gym::exporter {

namespace {

std::string_view trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

std::string lower(std::string_view v) {
  std::string out(v);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return out;
}

// How well `range` matches an offer of `type` whose version is one of
// `versions` (the first is what is served): 0 not at all, then */*, type/*,
// the type, the type and a version.
int match(const HeaderItem& range, std::string_view type,
          std::initializer_list<std::string_view> versions) {
  if (range.value == "*/*") return 1;
  const size_t slash = type.find('/');
  if (range.value.size() == slash + 2 &&
      range.value.compare(0, slash + 1, type, 0, slash + 1) == 0 && range.value.back() == '*')
    return 2;
  if (range.value != type) return 0;
  const std::string_view version = range.param("version");
  if (version.empty()) return 3;
  for (std::string_view v : versions)
    if (version == v) return 4;
  return 0;
}

// The q the client gives an offer: that of its most specific matching range.
double q_of(const std::vector<HeaderItem>& ranges, std::string_view type,
            std::initializer_list<std::string_view> versions) {
  int best = 0;
  double q = 0;
  for (const HeaderItem& r : ranges) {
    const int m = match(r, type, versions);
    if (m > best) {
      best = m;
      q = r.q;
    }
  }
  return q;
}

}  // namespace

std::string_view HeaderItem::param(std::string_view name) const {
  for (const auto& [k, v] : params)
    if (k == name) return v;
  return {};
}

std::vector<HeaderItem> parse_header_list(std::string_view header) {
  std::vector<HeaderItem> out;
  while (!header.empty()) {
    const size_t comma = header.find(',');
    std::string_view item = header.substr(0, comma);
    header = comma == std::string_view::npos ? std::string_view() : header.substr(comma + 1);
    size_t semi = item.find(';');
    HeaderItem h;
    h.value = lower(trim(item.substr(0, semi)));
    if (h.value.empty()) continue;
    while (semi != std::string_view::npos) {
      item = item.substr(semi + 1);
      semi = item.find(';');
      const std::string_view param = trim(item.substr(0, semi));
      const size_t eq = param.find('=');
      if (eq == std::string_view::npos) continue;
      const std::string name = lower(trim(param.substr(0, eq)));
      std::string_view value = trim(param.substr(eq + 1));
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
        value = value.substr(1, value.size() - 2);
      if (name == "q") {
        const std::string v(value);
        char* end = nullptr;
        const double q = std::strtod(v.c_str(), &end);
        h.q = end != v.c_str() && *end == '\0' && q >= 0 && q <= 1 ? q : 0;
      } else {
        h.params.emplace_back(name, std::string(value));
      }
    }
    out.push_back(std::move(h));
  }
  return out;
}

namespace {
Format format_of(const std::vector<HeaderItem>& ranges) {
  const double text = q_of(ranges, "text/plain", {"0.0.4", "1.0.0"});
  const double open_metrics = q_of(ranges, "application/openmetrics-text", {"1.0.0"});
  // Protobuf only when asked for by name, with the message and the
  // delimited encoding: never for a wildcard.
  double protobuf = 0;
  for (const HeaderItem& r : ranges)
    if (r.value == "application/vnd.google.protobuf" &&
        r.param("proto") == "io.prometheus.client.MetricFamily" &&
        r.param("encoding") == "delimited")
      protobuf = std::max(protobuf, r.q);
  // The highest q wins; on a tie text, then OpenMetrics.
  if (protobuf > 0 && protobuf > text && protobuf > open_metrics) return Format::kProtobuf;
  return open_metrics > 0 && open_metrics > text ? Format::kOpenMetrics : Format::kText;
}

std::optional<Escaping> escaping_of(const std::vector<HeaderItem>& ranges, Format format) {
  const HeaderItem* best = nullptr;
  for (const HeaderItem& r : ranges) {
    const std::string_view version = r.param("version");
    bool offers = false;  // the range names the format (a wildcard never names a scheme)
    switch (format) {
      case Format::kText:
        offers = r.value == "text/plain";
        break;
      case Format::kOpenMetrics:
        offers =
            r.value == "application/openmetrics-text" && (version.empty() || version == "1.0.0");
        break;
      case Format::kProtobuf:
        offers = r.value == "application/vnd.google.protobuf" &&
                 r.param("proto") == "io.prometheus.client.MetricFamily" &&
                 r.param("encoding") == "delimited";
        break;
    }
    if (!offers || r.q <= 0) continue;
    if (best == nullptr || r.q > best->q ||
        (r.q == best->q && best->param("escaping").empty() && !r.param("escaping").empty()))
      best = &r;
  }
  if (best == nullptr || best->param("escaping").empty()) return std::nullopt;
  if (format == Format::kText && best->param("version") != "1.0.0") return std::nullopt;
  const Escaping scheme = escaping_scheme(best->param("escaping"));
  if (format == Format::kProtobuf && scheme != Escaping::kAllowUtf8) return std::nullopt;
  return scheme;
}
}  // namespace

Negotiated negotiate_accept(const char* accept) {
  if (accept == nullptr) return {Format::kText, std::nullopt};
  const std::vector<HeaderItem> ranges = parse_header_list(accept);
  const Format format = format_of(ranges);
  return {format, escaping_of(ranges, format)};
}

Format negotiate(const char* accept) {
  return negotiate_accept(accept).format;
}

std::optional<Escaping> escaping(const char* accept, Format format) {
  if (accept == nullptr) return std::nullopt;
  return escaping_of(parse_header_list(accept), format);
}

namespace {
// One encoder of type E a scheme, and one without: shared.
template <class E>
const E& one_of(std::optional<Escaping> escaping) {
  static const E all[] = {E(), E(Escaping::kUnderscores), E(Escaping::kDots), E(Escaping::kValues),
                          E(Escaping::kAllowUtf8)};
  return all[escaping ? size_t(*escaping) + 1 : 0];
}
}  // namespace

const Encoder& encoder_for(Format format, std::optional<Escaping> escaping) {
  static const ProtobufEncoder protobuf;
  static const ProtobufEncoder protobuf_utf8(true);
  switch (format) {
    case Format::kOpenMetrics:
      return one_of<OpenMetricsEncoder>(escaping);
    case Format::kProtobuf:
      return escaping == Escaping::kAllowUtf8 ? protobuf_utf8 : protobuf;
    default:
      return one_of<TextEncoder>(escaping);
  }
}

}  // namespace gym::exporter
