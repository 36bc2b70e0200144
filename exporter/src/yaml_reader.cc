#include "yaml_reader.h"

#include <cmath>
#include <sstream>

#include "host/procfs.h"

namespace gym::exporter {

std::optional<YAML::Node> YamlReader::load(const std::string& text) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    errors_.push_back(where(e.mark) + "invalid YAML: " + e.msg);
    return std::nullopt;
  }
}

std::optional<YAML::Node> YamlReader::load_file(const std::string& path, const std::string& what) {
  std::string text;
  if (procfs::read_file(path, text) != procfs::ReadStatus::kOk) {
    errors_.push_back(path + ": cannot read the " + what);
    return std::nullopt;
  }
  return load(text);
}

std::string YamlReader::where(const YAML::Mark& m) const {
  return name_ + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1) + ": ";
}

void YamlReader::error(const YAML::Node& at, const std::string& message) {
  errors_.push_back(where(at.Mark()) + message);
}

bool YamlReader::string(const YAML::Node& n, const std::string& key, std::string& out) {
  if (!n.IsScalar()) {
    error(n, key + " must be a string");
    return false;
  }
  out = n.Scalar();
  return true;
}

void YamlReader::integer(const YAML::Node& n, const std::string& key, int& out, int min, int max) {
  int v = 0;
  if (!n.IsScalar() || !YAML::convert<int>::decode(n, v)) {
    error(n, key + " must be an integer");
    return;
  }
  if (v < min || v > max) {
    error(n, key + " must be between " + std::to_string(min) + " and " + std::to_string(max) +
                 ", got " + std::to_string(v));
    return;
  }
  out = v;
}

void YamlReader::number(const YAML::Node& n, const std::string& key, double& out, double min) {
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v)) {
    error(n, key + " must be a number");
    return;
  }
  if (v < min) {
    std::ostringstream os;
    os << min;
    error(n, key + " must be at least " + os.str());
    return;
  }
  out = v;
}

void YamlReader::boolean(const YAML::Node& n, const std::string& key, bool& out) {
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
    error(n, key + " must be true or false");
    return;
  }
  out = v;
}

void YamlReader::mapping(const YAML::Node& n, const std::string& section, const Keys& keys) {
  if (!n.IsDefined() || n.IsNull()) return;
  if (!n.IsMap()) {
    error(n, (section.empty() ? "the file" : section) + " must be a mapping");
    return;
  }
  for (const auto& kv : n) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
    auto it = keys.find(key);
    if (it == keys.end()) {
      std::string known;
      for (const auto& [k, _] : keys) known += (known.empty() ? "" : ", ") + k;
      error(kv.first, "unknown key '" + (section.empty() ? "" : section + ".") + key +
                          "' (known: " + known + ")");
      continue;
    }
    it->second(kv.second);
  }
}

}  // namespace gym::exporter
