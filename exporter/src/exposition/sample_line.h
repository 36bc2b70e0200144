// One sample line of the text formats, written as prometheus-cpp's
// WriteHead, WriteValue and WriteTail write one: a SampleLine (what the
// line says) appended in a LineStyle (how), and the number and escaping
// helpers the encoders share (text.cc).
//
// Thread-safety: pure functions over the caller's buffers.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace gym::exporter {

// The shortest text that reads back as v (std::to_chars), at p (room for
// kNumberBytes). A whole number below 2^53 whose last digit is not 0 is its
// digits (the exponent form is longer, and no shorter decimal reads back as
// it), written as an integer: most counters and gauges, at a fraction of
// the cost.
inline constexpr size_t kNumberBytes = 32;
inline char* write_double(char* p, double v) {
  if (v >= 1 && v < 0x1p53) {
    const auto n = static_cast<uint64_t>(v);
    if (static_cast<double>(n) == v && n % 10 != 0) return std::to_chars(p, p + 20, n).ptr;
  }
  if (std::isnan(v)) return std::copy_n("NaN", 3, p);
  if (std::isinf(v)) return std::copy_n(v > 0 ? "+Inf" : "-Inf", 4, p);
  return std::to_chars(p, p + kNumberBytes, v).ptr;
}
void append_double(std::string& out, double v);
void append_uint(std::string& out, uint64_t v);

// Lines written in place at the end of `out`: room for at most `max` bytes
// made once (not an append a piece, each checking the capacity), what was
// written kept when it goes.
class InPlace {
 public:
  InPlace(std::string& out, size_t max) : out_(out) {
    const size_t at = out.size();
    out.resize(at + max);
    p_ = out.data() + at;
  }
  ~InPlace() { out_.resize(static_cast<size_t>(p_ - out_.data())); }
  InPlace(const InPlace&) = delete;
  InPlace& operator=(const InPlace&) = delete;
  void put(std::string_view s) {
    std::memcpy(p_, s.data(), s.size());
    p_ += s.size();
  }
  void put(char c) { *p_++ = c; }
  void uint(uint64_t v) { p_ = std::to_chars(p_, p_ + 20, v).ptr; }
  void number(double v) { p_ = write_double(p_, v); }

 private:
  std::string& out_;
  char* p_;
};

// HELP text escapes backslash and newline; label values also the quote.
void append_escaped(std::string& out, std::string_view s, bool quote);

// One sample line, as prometheus-cpp's WriteHead, WriteValue and WriteTail
// write one: the family's name (as written) and the sample's suffix, the
// metric's label text (append_labels: rendered once for all of its
// samples), at most one label of the sample's own (le, quantile), its value
// (a double, or an integer count), and the metric's timestamp.
struct SampleLine {
  const std::string& name;
  const char* suffix;
  const std::string& labels;
  const char* extra_name = nullptr;  // the sample's own label, or none
  std::string_view extra_value = {};
  double value = 0;
  std::optional<uint64_t> count = std::nullopt;  // an integer value instead
  int64_t timestamp_ms = 0;
};
// How lines are written: OpenMetrics (timestamps in seconds) or text, and
// names outside the legacy rules quoted inside the braces ({"name",...}).
struct LineStyle {
  bool open_metrics;
  bool quoted_name;
};

// The line, ended by a newline, at the end of `out`.
void append(std::string& out, const SampleLine& line, const LineStyle& style);

}  // namespace gym::exporter
