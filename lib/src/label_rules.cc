#include "label_rules.h"

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
