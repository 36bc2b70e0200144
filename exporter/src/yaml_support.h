// What the two YAML loaders (config.cc, web_config.cc) share: where a node
// is, for messages, and reading the file.
#pragma once

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace gym::exporter {

// "file:line:column: " (yaml-cpp counts from 0, people from 1).
inline std::string where(const std::string& name, const YAML::Mark& m) {
  return name + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1) + ": ";
}

// The whole file, or nothing when it cannot be read.
inline std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace gym::exporter
