// The Prometheus text exposition format (version 0.0.4), written straight
// into a string: the same families and samples as prometheus-cpp's
// TextSerializer (the reference, checked in tests), several times faster;
// and OpenMetrics 1.0.0 text, its successor (what Prometheus asks for first).
//
// Thread-safety: a pure function.
#pragma once

#include <prometheus/metric_family.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "exposition/escaping.h"
#include "exposition/exposition.h"

namespace gym::exporter {

// Appends one family to `out`: its samples [from, to), its metadata first
// when from is 0 (a family written in parts).
void write_family(const prometheus::MetricFamily& family, std::string& out, size_t from = 0,
                  size_t to = SIZE_MAX);
// Appends `families` to `out`.
void write_text(const std::vector<prometheus::MetricFamily>& families, std::string& out);

class TextEncoder : public Encoder {
 public:
  // Without a scheme: text 0.0.4 with the legacy names. With one: text
  // 1.0.0 (the 0.0.4 format, quoting names that are not legacy ones) named
  // by it, which its Content-Type says.
  explicit TextEncoder(std::optional<Escaping> escaping = {})
      : escaping_(escaping.value_or(Escaping::kUnderscores)),
        content_type_(escaping ? "text/plain; version=1.0.0; charset=utf-8; escaping=" +
                                     std::string(escaping_name(*escaping))
                               : "text/plain; version=0.0.4; charset=utf-8") {}
  std::string_view content_type() const override { return content_type_; }
  Escaping escaping() const override { return escaping_; }
  std::string_view name() const override { return "text"; }
  void family(const Family& f, const FamilyExtras*, std::string& out) const override {
    write_family(f, out);
  }
  bool splits() const override { return true; }
  void family_part(const Family& f, const FamilyExtras*, size_t from, size_t to,
                   std::string& out) const override {
    write_family(f, out, from, to);
  }

 private:
  Escaping escaping_;
  std::string content_type_;
};

// Appends one family in OpenMetrics 1.0.0 text, with _created samples where
// `extras` (may be null) knows them: its samples [from, to), its metadata
// first when from is 0.
void write_family_openmetrics(const Family& family, const FamilyExtras* extras, std::string& out,
                              size_t from = 0, size_t to = SIZE_MAX);

class OpenMetricsEncoder : public Encoder {
 public:
  // With a scheme, its Content-Type says it (escaping=).
  explicit OpenMetricsEncoder(std::optional<Escaping> escaping = {})
      : escaping_(escaping.value_or(Escaping::kUnderscores)),
        content_type_(std::string("application/openmetrics-text; version=1.0.0; charset=utf-8") +
                      (escaping ? "; escaping=" + std::string(escaping_name(*escaping)) : "")) {}
  std::string_view content_type() const override { return content_type_; }
  Escaping escaping() const override { return escaping_; }
  std::string_view name() const override { return "openmetrics"; }
  void family(const Family& f, const FamilyExtras* extras, std::string& out) const override {
    write_family_openmetrics(f, extras, out);
  }
  bool splits() const override { return true; }
  void family_part(const Family& f, const FamilyExtras* extras, size_t from, size_t to,
                   std::string& out) const override {
    write_family_openmetrics(f, extras, out, from, to);
  }
  void finish(std::string& out) const override { out += "# EOF\n"; }

 private:
  Escaping escaping_;
  std::string content_type_;
};

}  // namespace gym::exporter
