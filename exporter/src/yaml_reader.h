// The one YAML reader of the exporter's files (the configuration, the web
// configuration, and each collector's section): typed values and mappings
// whose errors name the file, line and column, and an error for every
// unknown key.
//
// Thread-safety: one reader per parse.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gym::exporter {

class YamlReader {
 public:
  using Keys = std::map<std::string, std::function<void(const YAML::Node&)>>;

  // `name` stands for the file in messages; errors are appended to `errors`.
  YamlReader(std::string name, std::vector<std::string>& errors)
      : name_(std::move(name)), errors_(errors) {}

  // The document in `text`, or nothing (with an error) when it is not YAML.
  std::optional<YAML::Node> load(const std::string& text);
  // The file's document; an unreadable file is an error naming it.
  std::optional<YAML::Node> load_file(const std::string& path, const std::string& what);

  // "file:line:column: " (yaml-cpp counts from 0, people from 1).
  std::string where(const YAML::Mark& m) const;
  void error(const YAML::Node& at, const std::string& message);
  std::vector<std::string>& errors() { return errors_; }
  bool failed() const { return !errors_.empty(); }

  // Each reads n into out, or leaves out as it was and adds an error; the
  // ones returning bool say whether they read.
  bool string(const YAML::Node& n, const std::string& key, std::string& out);
  void integer(const YAML::Node& n, const std::string& key, int& out, int min, int max);
  void number(const YAML::Node& n, const std::string& key, double& out, double min);
  void boolean(const YAML::Node& n, const std::string& key, bool& out);
  // Calls the handler of each key of the mapping n; an unknown key is an
  // error listing the known ones. A null node (an absent or empty section)
  // is fine: nothing is called.
  void mapping(const YAML::Node& n, const std::string& section, const Keys& keys);

 private:
  std::string name_;
  std::vector<std::string>& errors_;
};

}  // namespace gym::exporter
