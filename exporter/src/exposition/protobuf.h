// The Prometheus protobuf exposition format (io.prometheus.client.MetricFamily
// messages, each preceded by its length as a varint: "encoding=delimited"),
// written by a small hand-made encoder of the protobuf wire format rather
// than libprotobuf: the messages are few and fixed, the encoder is a hundred
// lines with no code generation or runtime library to carry, and it writes
// into the same buffer as the text encoders.
//
// Thread-safety: pure functions.
#pragma once

#include <prometheus/metric_family.h>

#include <string>

#include "exposition/escaping.h"
#include "exposition/exposition.h"

namespace gym::exporter {

// Appends one family, length-delimited; histograms with native buckets in
// `extras` (may be null) carry them as native histograms too.
void write_family_protobuf(const Family& family, const FamilyExtras* extras, std::string& out);

class ProtobufEncoder : public Encoder {
 public:
  explicit ProtobufEncoder(bool utf8 = false) : utf8_(utf8) {}
  std::string_view content_type() const override {
    return utf8_ ? "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
                   "encoding=delimited; escaping=allow-utf-8"
                 : "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
                   "encoding=delimited";
  }
  Escaping escaping() const override {
    return utf8_ ? Escaping::kAllowUtf8 : Escaping::kUnderscores;
  }
  std::string_view name() const override { return "protobuf"; }
  void family(const Family& f, const FamilyExtras* extras, std::string& out) const override {
    write_family_protobuf(f, extras, out);
  }

 private:
  bool utf8_;
};

}  // namespace gym::exporter
