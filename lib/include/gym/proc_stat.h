// The text of /proc/<pid>/stat split into its fields, without allocating (the
// library reads it in forked children; the exporter reads it for every
// process). The comm may hold spaces and parentheses: it runs from the first
// '(' to the last ')'. Fields are numbered as in proc(5): 1 pid, 2 comm,
// 3 state, ... 22 starttime, 24 rss.
//
// Thread-safety: pure functions.
//
// Internal (docs/api.md): installed for the exporter; no compatibility promise.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace gym::proc_stat {

struct Split {
  std::string_view pid;   // field 1
  std::string_view comm;  // field 2, without its parentheses
  std::string_view rest;  // fields 3.. separated by spaces
};

constexpr std::optional<Split> split(std::string_view text) {
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return std::nullopt;
  std::string_view pid = text.substr(0, open);
  while (!pid.empty() && pid.back() == ' ') pid.remove_suffix(1);
  return Split{pid, text.substr(open + 1, close - open - 1), text.substr(close + 1)};
}

// Calls f(number, field) for fields 3, 4, ... of `rest` until f returns false.
template <class F>
constexpr void for_each_field(std::string_view rest, F&& f) {
  size_t pos = 0;
  int number = 3;
  while (pos < rest.size()) {
    while (pos < rest.size() && (rest[pos] == ' ' || rest[pos] == '\n')) ++pos;
    if (pos >= rest.size()) return;
    size_t end = pos;
    while (end < rest.size() && rest[end] != ' ' && rest[end] != '\n') ++end;
    if (!f(number++, rest.substr(pos, end - pos))) return;
    pos = end;
  }
}

// A whole field as an unsigned decimal number.
inline std::optional<uint64_t> to_u64(std::string_view s) {
  uint64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

// Field 22, the start time in clock ticks after boot.
inline std::optional<uint64_t> start_ticks(std::string_view text) {
  const std::optional<Split> s = split(text);
  if (!s) return std::nullopt;
  std::optional<uint64_t> out;
  for_each_field(s->rest, [&](int n, std::string_view f) {
    if (n < 22) return true;
    out = to_u64(f);
    return false;
  });
  return out;
}

}  // namespace gym::proc_stat
