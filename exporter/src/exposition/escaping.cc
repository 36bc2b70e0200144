#include "exposition/escaping.h"

#include <cstdint>

namespace gym::exporter {

namespace {

// A character of the legacy set at position `i`: no digit first.
bool legacy_char(char32_t c, size_t i) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (c >= '0' && c <= '9' && i > 0);
}

bool legacy_name(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (!legacy_char(static_cast<unsigned char>(name[i]), i)) return false;
  return true;
}

constexpr char32_t kReplacement = 0xFFFD;

// The code point at `s[i]`, advancing `i` past it: U+FFFD for a byte that
// does not start a well-formed sequence (cut short, overlong, a surrogate,
// past U+10FFFF), which then is one byte long (as Go reads a string).
char32_t next_code_point(std::string_view s, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  size_t len = 0;
  char32_t c = 0;
  char32_t min = 0;
  if (b < 0x80) {
    ++i;
    return b;
  } else if ((b & 0xE0) == 0xC0) {
    len = 2, c = b & 0x1F, min = 0x80;
  } else if ((b & 0xF0) == 0xE0) {
    len = 3, c = b & 0x0F, min = 0x800;
  } else if ((b & 0xF8) == 0xF0) {
    len = 4, c = b & 0x07, min = 0x10000;
  } else {
    ++i;
    return kReplacement;
  }
  if (i + len > s.size()) {
    ++i;
    return kReplacement;
  }
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) {
      ++i;
      return kReplacement;
    }
    c = (c << 6) | (byte(i + k) & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
    ++i;
    return kReplacement;
  }
  i += len;
  return c;
}

// _<code point in upper-case hex, no leading zeros>_, as the document's
// example writes '.' (_2E_).
void append_code(std::string& out, char32_t c) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  out += '_';
  int shift = 20;
  while (shift > 0 && (c >> shift) == 0) shift -= 4;
  for (; shift >= 0; shift -= 4) out += kHex[(c >> shift) & 0xF];
  out += '_';
}

}  // namespace

Escaping escaping_scheme(std::string_view value) {
  if (value == "allow-utf-8") return Escaping::kAllowUtf8;
  if (value == "dots") return Escaping::kDots;
  if (value == "values") return Escaping::kValues;
  return Escaping::kUnderscores;
}

std::string_view escaping_name(Escaping escaping) {
  switch (escaping) {
    case Escaping::kDots:
      return "dots";
    case Escaping::kValues:
      return "values";
    case Escaping::kAllowUtf8:
      return "allow-utf-8";
    default:
      return "underscores";
  }
}

std::string escape_name(std::string_view name, Escaping scheme) {
  if (scheme == Escaping::kAllowUtf8) return std::string(name);
  if (scheme != Escaping::kDots && legacy_name(name)) return std::string(name);
  std::string out;
  out.reserve(name.size() + name.size() / 2 + 3);
  if (scheme == Escaping::kValues) out += "U__";
  for (size_t i = 0; i < name.size();) {
    const size_t at = i;
    const char32_t c = next_code_point(name, i);
    if (c == '_' && scheme != Escaping::kUnderscores) {
      out += "__";
    } else if (c == '.' && scheme == Escaping::kDots) {
      out += "_dot_";
    } else if (legacy_char(c, at)) {
      out += char(c);
    } else if (scheme == Escaping::kValues) {
      append_code(out, c);
    } else {
      out += '_';
    }
  }
  return out;
}

}  // namespace gym::exporter
