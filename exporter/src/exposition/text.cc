#include "exposition/text.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "contract/table.h"
#include "exposition/sample_line.h"
#include "exposition/text_classes.h"

namespace gym::exporter {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

using namespace text_classes;  // NOLINT: this file's own tables

// Whether a label value has a character to escape.
bool needs_escaping(std::string_view s) {
  for (const char c : s)
    if ((kClasses[uint8_t(c)] & (kEscaped | kQuote)) != 0) return true;
  return false;
}

// Whether a name needs no quotes: the legacy metric or label name syntax.
// Others (the OpenTelemetry names, served under escaping=allow-utf-8) are
// quoted, as the text 1.0.0 and OpenMetrics formats with UTF-8 names have them.
bool legacy_name(std::string_view s, bool metric) {
  if (s.empty()) return false;
  const uint8_t first = metric ? (kNameFirst | kMetricColon) : kNameFirst;
  if ((kClasses[uint8_t(s[0])] & first) == 0) return false;
  const uint8_t rest = first | kNameDigit;
  for (size_t i = 1; i < s.size(); ++i)
    if ((kClasses[uint8_t(s[i])] & rest) == 0) return false;
  return true;
}

// A name as is, or quoted when it is not a legacy one.
void append_name(std::string& out, const std::string& name, bool metric) {
  if (legacy_name(name, metric)) {
    out += name;
    return;
  }
  out += '"';
  append_escaped(out, name, true);
  out += '"';
}

// `{a="x",b="y"` without the closing brace; empty when there are no labels.
void append_labels(std::string& out, const ClientMetric& m) {
  // Nearly always: legacy names and values with nothing to escape, each
  // label's text its parts as they are, written in place.
  size_t bytes = 0;
  bool as_they_are = true;
  for (const auto& l : m.label) {
    as_they_are = as_they_are && legacy_name(l.name, false) && !needs_escaping(l.value);
    bytes += l.name.size() + l.value.size() + 4;
  }
  if (as_they_are) {
    InPlace text(out, bytes);
    char sep = '{';
    for (const auto& l : m.label) {
      text.put(sep);
      sep = ',';
      text.put(l.name);
      text.put("=\"");
      text.put(l.value);
      text.put('"');
    }
    return;
  }
  bool first = true;
  for (const auto& l : m.label) {
    out += first ? '{' : ',';
    first = false;
    append_name(out, l.name, false);
    out += "=\"";
    append_escaped(out, l.value, true);
    out += '"';
  }
}

const char* type_name(MetricType t, bool open_metrics) {
  switch (t) {
    case MetricType::Counter:
      return "counter";
    case MetricType::Gauge:
      return "gauge";
    case MetricType::Summary:
      return "summary";
    case MetricType::Histogram:
      return "histogram";
    default:
      return open_metrics ? "unknown" : "untyped";
  }
}

std::string le_text(double bound) {
  std::string s;
  append_double(s, bound);
  return s;
}

// The samples of one family: its name as written, the format, and the
// current metric's labels (rendered once for all of its samples).
struct Samples {
  std::string& out;
  const std::string& base;
  bool om;
  bool quoted;  // a name outside the legacy rules: {"name",...}
  std::string labels;
  std::string scratch;

  void value(const ClientMetric& m, const char* suffix, double v) {
    append(out,
           {.name = base,
            .suffix = suffix,
            .labels = labels,
            .value = v,
            .timestamp_ms = m.timestamp_ms},
           {om, quoted});
  }
  void count(const ClientMetric& m, const char* suffix, uint64_t n, const char* label = nullptr,
             std::string_view label_value = {}) {
    append(out,
           {.name = base,
            .suffix = suffix,
            .labels = labels,
            .extra_name = label,
            .extra_value = label_value,
            .count = n,
            .timestamp_ms = m.timestamp_ms},
           {om, quoted});
  }
  void quantile(const ClientMetric& m, const std::string& q, double v) {
    append(out,
           {.name = base,
            .suffix = "",
            .labels = labels,
            .extra_name = "quantile",
            .extra_value = q,
            .value = v,
            .timestamp_ms = m.timestamp_ms},
           {om, quoted});
  }
};

// # HELP, # TYPE and (OpenMetrics, when the name ends in the contract's
// unit) # UNIT.
void write_metadata(const MetricFamily& f, const FamilySpec* spec, std::string_view family,
                    const std::string& base, std::string& out, bool om) {
  if (!f.help.empty()) {
    out += "# HELP ";
    append_name(out, base, true);
    out += ' ';
    append_escaped(out, f.help, om);
    out += '\n';
  }
  out += "# TYPE ";
  append_name(out, base, true);
  out += ' ';
  out += type_name(f.type, om);
  out += '\n';
  if (om && spec != nullptr && !spec->unit.empty() && family.size() > spec->unit.size() &&
      family.ends_with(spec->unit) && family[family.size() - spec->unit.size() - 1] == '_') {
    out += "# UNIT ";
    append_name(out, base, true);
    out += ' ';
    out += spec->unit;
    out += '\n';
  }
}

// Bucket bounds as text, remade only when the bounds change.
struct BoundTexts {
  std::vector<double> bounds;
  std::vector<std::string> texts;
  const std::vector<std::string>& of(const ClientMetric::Histogram& h) {
    bool same = bounds.size() == h.bucket.size();
    for (size_t i = 0; same && i < h.bucket.size(); ++i)
      same = bounds[i] == h.bucket[i].upper_bound;
    if (!same) {
      bounds.clear();
      texts.clear();
      for (const auto& b : h.bucket) {
        bounds.push_back(b.upper_bound);
        texts.push_back(le_text(b.upper_bound));
      }
    }
    return texts;
  }
};

// Text 0.0.4 puts _count and _sum first, OpenMetrics after the buckets.
void write_summary(Samples& w, const ClientMetric& m) {
  if (!w.om) {
    w.count(m, "_count", m.summary.sample_count);
    w.value(m, "_sum", m.summary.sample_sum);
  }
  for (const auto& q : m.summary.quantile) w.quantile(m, le_text(q.quantile), q.value);
  if (w.om) {
    w.count(m, "_count", m.summary.sample_count);
    w.value(m, "_sum", m.summary.sample_sum);
  }
}

// OpenMetrics: " # {trace_id=\"…\",span_id=\"…\"} value timestamp" after a
// bucket's count, when the bucket has an exemplar.
void append_exemplar(std::string& out, const Exemplar& x, double divisor) {
  out += " # {trace_id=\"";
  x.trace.append_trace_hex(out);
  out += "\",span_id=\"";
  x.trace.append_span_hex(out);
  out += "\"} ";
  append_double(out, double(x.value) / divisor);
  out += ' ';
  append_double(out, double(x.unix_ns) / 1e9);
}

// The exemplars of one histogram sample (OpenMetrics only), by bucket.
struct Exemplars {
  std::span<const Exemplar> of;
  double divisor = 1;
  // Appends bucket i's to a line just written (before its newline).
  void after(std::string& out, size_t i) const {
    if (i >= of.size() || of[i].unix_ns == 0) return;
    out.pop_back();
    append_exemplar(out, of[i], divisor);
    out += '\n';
  }
};

void write_histogram(Samples& w, const ClientMetric& m, BoundTexts& le, const Exemplars& ex) {
  const auto& h = m.histogram;
  if (!w.om) {
    w.count(m, "_count", h.sample_count);
    w.value(m, "_sum", h.sample_sum);
  }
  const std::vector<std::string>& bounds = le.of(h);
  if (w.quoted || m.timestamp_ms != 0) {
    for (size_t i = 0; i < h.bucket.size(); ++i) {
      w.count(m, "_bucket", h.bucket[i].cumulative_count, "le", bounds[i]);
      ex.after(w.out, i);
    }
  } else {
    // The common case, most of an exposition's lines: what comes before
    // the bound is the same on every bucket line, made once.
    std::string& prefix = w.scratch;
    prefix.assign(w.base);
    prefix += "_bucket";
    prefix += w.labels.empty() ? "{" : w.labels + ",";
    prefix += "le=\"";
    // Each line written in place, one at a time: room for all of a
    // histogram's lines at once is a fill of over 2 KiB, which costs more
    // than the appends it saves. A bucket's exemplar goes after its line.
    const size_t room = prefix.size() + 4 + 20;
    for (size_t i = 0; i < h.bucket.size(); ++i) {
      {
        InPlace line(w.out, room + bounds[i].size());
        line.put(prefix);
        line.put(bounds[i]);
        line.put("\"} ");
        line.uint(h.bucket[i].cumulative_count);
        line.put('\n');
      }
      ex.after(w.out, i);
    }
  }
  if (w.om) {
    w.count(m, "_count", h.sample_count);
    w.value(m, "_sum", h.sample_sum);
  }
}

// One family in either text format. OpenMetrics differs in: a counter's
// family name has no _total (its samples do), # UNIT when the name ends in
// the contract's unit, quotes escaped in HELP, "unknown" for untyped,
// histogram buckets before _count and _sum, timestamps in seconds, and a
// counter's or histogram's _created sample where known (`extras`).
// `spec`: the family's row, for its unit (null: none).
// Samples [from, to) of the family's, its metadata first when from is 0.
void write_any(const MetricFamily& f, const FamilySpec* spec, const FamilyExtras* extras,
               std::string& out, bool om, size_t from = 0, size_t to = SIZE_MAX) {
  std::string_view family = f.name;
  if (om && f.type == MetricType::Counter && family.ends_with("_total")) family.remove_suffix(6);
  const std::string base(family);
  if (from == 0) write_metadata(f, spec, family, base, out, om);
  Samples w{out, base, om, !legacy_name(base, true), {}, {}};
  const char* const total = om && f.type == MetricType::Counter ? "_total" : "";
  auto created = [&](const ClientMetric& m, size_t i) {
    if (om && extras != nullptr && i < extras->created.size() && extras->created[i] > 0)
      w.value(m, "_created", extras->created[i]);
  };
  BoundTexts le;
  for (size_t i = from; i < std::min(to, f.metric.size()); ++i) {
    const ClientMetric& m = f.metric[i];
    w.labels.clear();
    append_labels(w.labels, m);
    switch (f.type) {
      case MetricType::Counter:
        w.value(m, total, m.counter.value);
        created(m, i);
        break;
      case MetricType::Gauge:
        w.value(m, "", m.gauge.value);
        break;
      case MetricType::Untyped:
        w.value(m, "", m.untyped.value);
        break;
      case MetricType::Summary:
        write_summary(w, m);
        break;
      case MetricType::Histogram:
        write_histogram(w, m, le,
                        om && extras != nullptr && i < extras->exemplars.size()
                            ? Exemplars{extras->exemplars[i], extras->exemplar_divisor}
                            : Exemplars{});
        if (om) created(m, i);
        break;
      default:
        break;
    }
  }
}

}  // namespace

void write_text(const std::vector<MetricFamily>& families, std::string& out) {
  for (const MetricFamily& f : families) write_family(f, out);
}

void write_family(const MetricFamily& f, std::string& out, size_t from, size_t to) {
  write_any(f, nullptr, nullptr, out, false, from, to);
}

void write_family_openmetrics(const Family& f, const FamilyExtras* extras, std::string& out,
                              size_t from, size_t to) {
  write_any(f, f.spec, extras, out, true, from, to);
}

}  // namespace gym::exporter
