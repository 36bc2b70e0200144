#include "exposition/protobuf.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "contract/table.h"
#include "gym/native_histogram.h"

namespace gym::exporter {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2 };

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out += char(uint8_t(v));
}

void tag(std::string& out, uint32_t field, Wire wire) {
  varint(out, (uint64_t(field) << 3) | wire);
}

void uint_field(std::string& out, uint32_t field, uint64_t v) {
  tag(out, field, kVarint);
  varint(out, v);
}

void double_field(std::string& out, uint32_t field, double v) {
  tag(out, field, kFixed64);
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  for (int i = 0; i < 8; ++i) out += char(uint8_t(bits >> (8 * i)));
}

uint64_t zigzag(int64_t v) {
  return (uint64_t(v) << 1) ^ uint64_t(v >> 63);
}

void bytes_field(std::string& out, uint32_t field, std::string_view v) {
  tag(out, field, kBytes);
  varint(out, v.size());
  out.append(v);
}

// A nested message: its bytes built in `scratch`, then written with its length.
template <class F>
void message_field(std::string& out, uint32_t field, std::string& scratch, F&& build) {
  scratch.clear();
  build(scratch);
  bytes_field(out, field, scratch);
}

// io.prometheus.client.MetricType.
uint64_t type_number(MetricType t) {
  switch (t) {
    case MetricType::Counter:
      return 0;
    case MetricType::Gauge:
      return 1;
    case MetricType::Summary:
      return 2;
    case MetricType::Histogram:
      return 4;
    default:
      return 3;  // untyped
  }
}

// The native part of a Histogram message (fields 5..13 of
// io.prometheus.client.Histogram): schema, zero bucket, and the positive
// buckets as spans of consecutive keys with each count as the difference
// from the one before.
void write_native(std::span<const uint64_t> counts, std::string& out, std::string& scratch) {
  tag(out, 5, kVarint);
  varint(out, zigzag(native::kSchema));
  double_field(out, 6, native::kZeroThreshold);
  uint_field(out, 7, counts[0]);
  std::string deltas;
  int64_t previous_count = 0;
  int32_t previous_end = 0;  // one past the last key of the previous span
  bool first = true;
  for (uint32_t w = 1; w < counts.size();) {
    if (counts[w] == 0) {
      ++w;
      continue;
    }
    uint32_t end = w;
    while (end < counts.size() && counts[end] != 0) ++end;
    const int32_t key = native::key_of(w);
    message_field(out, 12, scratch, [&](std::string& b) {  // BucketSpan
      tag(b, 1, kVarint);
      varint(b, zigzag(first ? key : key - previous_end));
      uint_field(b, 2, end - w);
    });
    for (uint32_t i = w; i < end; ++i) {
      const auto c = static_cast<int64_t>(counts[i]);
      varint(deltas, zigzag(c - previous_count));
      previous_count = c;
    }
    previous_end = native::key_of(end);
    first = false;
    w = end;
  }
  if (first) {
    // No bucket in use: a span of no buckets says "native" all the same.
    message_field(out, 12, scratch, [](std::string& b) { uint_field(b, 2, 0); });
  } else {
    bytes_field(out, 13, deltas);  // packed sint64
  }
}

// A google.protobuf.Timestamp field from Unix seconds.
void timestamp_field(std::string& out, uint32_t field, double unix_seconds, std::string& scratch) {
  const double whole = std::floor(unix_seconds);
  message_field(out, field, scratch, [&](std::string& b) {
    uint_field(b, 1, uint64_t(int64_t(whole)));
    const auto nanos = int64_t((unix_seconds - whole) * 1e9);
    if (nanos > 0) uint_field(b, 2, uint64_t(std::min<int64_t>(nanos, 999999999)));
  });
}

// An Exemplar message's fields: the trace and span ids as labels, the
// value in the family's unit, the time observed.
void write_exemplar(const Exemplar& x, double divisor, std::string& out, std::string& scratch) {
  std::string id;
  for (int k = 0; k < 2; ++k) {
    id.clear();
    k == 0 ? x.trace.append_trace_hex(id) : x.trace.append_span_hex(id);
    message_field(out, 1, scratch, [&](std::string& l) {  // LabelPair
      bytes_field(l, 1, k == 0 ? "trace_id" : "span_id");
      bytes_field(l, 2, id);
    });
  }
  double_field(out, 2, double(x.value) / divisor);
  timestamp_field(out, 3, double(x.unix_ns) / 1e9, scratch);
}

// One Metric message. `exemplars`: a histogram's, by classic bucket (may be
// empty); with native counts they are also the native histogram's.
void write_metric(const MetricFamily& f, const ClientMetric& m,
                  const std::span<const uint64_t>* native_counts, double created,
                  std::span<const Exemplar> exemplars, double divisor, std::string& out) {
  std::string inner, deeper, exemplar, labels;
  for (const auto& l : m.label)
    message_field(out, 1, inner, [&](std::string& b) {  // LabelPair
      bytes_field(b, 1, l.name);
      bytes_field(b, 2, l.value);
    });
  switch (f.type) {
    case MetricType::Gauge:
      message_field(out, 2, inner, [&](std::string& b) { double_field(b, 1, m.gauge.value); });
      break;
    case MetricType::Counter:
      message_field(out, 3, inner, [&](std::string& b) {
        double_field(b, 1, m.counter.value);
        if (created > 0) timestamp_field(b, 3, created, deeper);  // created_timestamp
      });
      break;
    case MetricType::Summary:
      message_field(out, 4, inner, [&](std::string& b) {
        uint_field(b, 1, m.summary.sample_count);
        double_field(b, 2, m.summary.sample_sum);
        for (const auto& q : m.summary.quantile)
          message_field(b, 3, deeper, [&](std::string& c) {
            double_field(c, 1, q.quantile);
            double_field(c, 2, q.value);
          });
      });
      break;
    case MetricType::Histogram:
      message_field(out, 7, inner, [&](std::string& b) {
        uint_field(b, 1, m.histogram.sample_count);
        double_field(b, 2, m.histogram.sample_sum);
        const auto has = [&](size_t k) {
          return k < exemplars.size() && exemplars[k].unix_ns != 0;
        };
        for (size_t k = 0; k < m.histogram.bucket.size(); ++k)
          message_field(b, 3, deeper, [&](std::string& c) {
            uint_field(c, 1, m.histogram.bucket[k].cumulative_count);
            double_field(c, 2, m.histogram.bucket[k].upper_bound);
            if (has(k))
              message_field(c, 3, exemplar, [&](std::string& e) {
                write_exemplar(exemplars[k], divisor, e, labels);
              });
          });
        if (created > 0) timestamp_field(b, 15, created, deeper);  // created_timestamp
        if (native_counts != nullptr && native_counts->size() == native::kWords) {
          write_native(*native_counts, b, deeper);
          for (size_t k = 0; k < exemplars.size(); ++k)
            if (has(k))
              message_field(b, 16, deeper, [&](std::string& e) {  // exemplars
                write_exemplar(exemplars[k], divisor, e, exemplar);
              });
        }
      });
      break;
    default:
      message_field(out, 5, inner, [&](std::string& b) { double_field(b, 1, m.untyped.value); });
      break;
  }
  if (m.timestamp_ms != 0) uint_field(out, 6, uint64_t(m.timestamp_ms));
}

}  // namespace

void write_family_protobuf(const Family& f, const FamilyExtras* extras, std::string& out) {
  std::string family, metric;
  bytes_field(family, 1, f.name);
  if (!f.help.empty()) bytes_field(family, 2, f.help);
  uint_field(family, 3, type_number(f.type));
  for (size_t i = 0; i < f.metric.size(); ++i) {
    const bool native = extras != nullptr && i < extras->native.size();
    const double created =
        extras != nullptr && i < extras->created.size() ? extras->created[i] : 0.0;
    const std::span<const Exemplar> exemplars = extras != nullptr && i < extras->exemplars.size()
                                                    ? extras->exemplars[i]
                                                    : std::span<const Exemplar>();
    metric.clear();
    write_metric(f, f.metric[i], native ? &extras->native[i] : nullptr, created, exemplars,
                 extras != nullptr ? extras->exemplar_divisor : 1.0, metric);
    bytes_field(family, 4, metric);
  }
  if (f.spec != nullptr && !f.spec->unit.empty()) bytes_field(family, 5, f.spec->unit);
  varint(out, family.size());
  out += family;
}

}  // namespace gym::exporter
