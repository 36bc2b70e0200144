// The Prometheus text exposition format (version 0.0.4), written straight
// into a string: the same families and samples as prometheus-cpp's
// TextSerializer (the reference, checked in tests), several times faster.
//
// Thread-safety: a pure function.
#pragma once

#include <prometheus/metric_family.h>

#include <string>
#include <vector>

namespace gym::exporter {

// Appends one family to `out`.
void write_family(const prometheus::MetricFamily& family, std::string& out);
// Appends `families` to `out`.
void write_text(const std::vector<prometheus::MetricFamily>& families, std::string& out);

}  // namespace gym::exporter
