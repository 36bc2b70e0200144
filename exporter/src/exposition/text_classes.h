// The character classes of the text formats, one table lookup a
// character: what they escape, and the legacy metric and label name
// characters. Shared by the sample line writer and the text encoder.
#pragma once

#include <array>
#include <cstdint>

namespace gym::exporter::text_classes {

// Character classes, one table lookup a character: what the text formats
// escape, and the legacy metric ([a-zA-Z_:][a-zA-Z0-9_:]*) and label
// ([a-zA-Z_][a-zA-Z0-9_]*) name characters.
enum : uint8_t {
  kEscaped = 1,       // backslash, newline
  kQuote = 2,         // escaped in label values (and OpenMetrics HELP)
  kNameFirst = 4,     // [a-zA-Z_]
  kNameDigit = 8,     // [0-9]
  kMetricColon = 16,  // ':' (metric names only)
};
constexpr std::array<uint8_t, 256> make_classes() {
  std::array<uint8_t, 256> t{};
  t[uint8_t('\\')] = kEscaped;
  t[uint8_t('\n')] = kEscaped;
  t[uint8_t('"')] = kQuote;
  for (int c = 'a'; c <= 'z'; ++c) t[size_t(c)] = kNameFirst;
  for (int c = 'A'; c <= 'Z'; ++c) t[size_t(c)] = kNameFirst;
  t[uint8_t('_')] = kNameFirst;
  for (int c = '0'; c <= '9'; ++c) t[size_t(c)] = kNameDigit;
  t[uint8_t(':')] = kMetricColon;
  return t;
}
inline constexpr std::array<uint8_t, 256> kClasses = make_classes();

}  // namespace gym::exporter::text_classes
