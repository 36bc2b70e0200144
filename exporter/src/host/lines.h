// Lines and words of the text files the host layer reads (procfs, cgroup
// files, the exporter's own totals file): one iterator for all of them.
//
// Thread-safety: pure functions.
#pragma once

#include <string_view>
#include <type_traits>
#include <vector>

namespace gym::exporter {

// Calls f(line) for each line of `text`, without its '\n' (a last line
// without one included). When f returns bool, false stops the walk.
template <class F>
void for_each_line(std::string_view text, F&& f) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if constexpr (std::is_same_v<std::invoke_result_t<F&, std::string_view>, bool>) {
      if (!f(line)) return;
    } else {
      f(line);
    }
  }
}

// The words of a line, split on spaces and tabs.
inline std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace gym::exporter
