#include "common/label_rules.h"

#include "gym/segment_format.h"

namespace gym::detail {

namespace {
bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
}  // namespace

bool valid_metric_name(std::string_view name) {
  if (name.empty() || name.size() > segment::kMaxNameBytes) return false;
  if (!is_alpha(name[0]) && name[0] != ':') return false;
  for (char c : name)
    if (!is_alpha(c) && !is_digit(c) && c != ':') return false;
  return true;
}

bool valid_label_name(std::string_view name) {
  if (name.empty() || name.size() > segment::kMaxNameBytes) return false;
  if (!is_alpha(name[0]) || name.starts_with("__")) return false;
  for (char c : name)
    if (!is_alpha(c) && !is_digit(c)) return false;
  return true;
}

}  // namespace gym::detail

namespace gym::detail {

bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    size_t n;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      n = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4;
      cp = c & 0x07;
    } else {
      return false;  // a continuation byte first, or 0xF8..0xFF
    }
    if (static_cast<size_t>(end - p) < n) return false;
    for (size_t i = 1; i < n; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    p += n;
  }
  return true;
}

}  // namespace gym::detail
