// A trace context (OpenTelemetry's SpanContext, W3C Trace Context): the
// trace id and span id of the span an observation belongs to, kept beside a
// histogram bucket as its exemplar (gym/segment_format.h) so that a slow
// bucket leads to a trace of one request that landed in it. Never a label.
//
// Thread-safety: a value type.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gym {

struct TraceContext {
  std::array<uint8_t, 16> trace_id{};  // big-endian, as W3C writes it in hex
  std::array<uint8_t, 8> span_id{};
  // A trace id of all zeros is no trace (W3C: invalid), nor is a span id of
  // all zeros: such a context records no exemplar.
  bool valid() const noexcept {
    uint64_t w[3];  // three loads, not 24 byte compares: it is on the observation's path
    __builtin_memcpy(w, trace_id.data(), 16);
    __builtin_memcpy(w + 2, span_id.data(), 8);
    return (w[0] | w[1]) != 0 && w[2] != 0;
  }
  // From 32 and 16 hex digits (either case), as OpenTelemetry's
  // format_trace_id / format_span_id write them; empty when malformed.
  static std::optional<TraceContext> from_hex(std::string_view trace_id,
                                              std::string_view span_id) noexcept {
    TraceContext t;
    if (!hex(trace_id, t.trace_id.data(), t.trace_id.size()) ||
        !hex(span_id, t.span_id.data(), t.span_id.size()))
      return std::nullopt;
    return t;
  }

  // The ids in lower-case hex (32 and 16 digits), appended to `out`.
  void append_trace_hex(std::string& out) const { append_hex(out, trace_id.data(), 16); }
  void append_span_hex(std::string& out) const { append_hex(out, span_id.data(), 8); }

 private:
  static void append_hex(std::string& out, const uint8_t* p, size_t n) {
    static constexpr char kDigits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; ++i) {
      out += kDigits[p[i] >> 4];
      out += kDigits[p[i] & 15];
    }
  }
  static bool hex(std::string_view s, uint8_t* out, size_t n) noexcept {
    if (s.size() != 2 * n) return false;
    for (size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      int v;
      if (c >= '0' && c <= '9')
        v = c - '0';
      else if (c >= 'a' && c <= 'f')
        v = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        v = c - 'A' + 10;
      else
        return false;
      out[i / 2] = uint8_t(i % 2 == 0 ? v << 4 : out[i / 2] | v);
    }
    return true;
  }
};

}  // namespace gym
