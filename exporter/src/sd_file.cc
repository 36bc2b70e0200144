#include "sd_file.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "host/procfs.h"
#include "json_text.h"

namespace gym::exporter {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::string sd_json(const std::string& target, const std::string& host,
                    const std::map<std::string, std::string>& labels) {
  std::map<std::string, std::string> all = labels;
  all.emplace("host", host);
  std::string out = "[{\"targets\": [" + json_quote(target) + "], \"labels\": {";
  bool first = true;
  for (const auto& [k, v] : all) {
    if (!first) out += ", ";
    first = false;
    out += json_quote(k) + ": " + json_quote(v);
  }
  return out + "}}]\n";
}

bool valid_sd_label(const std::string& name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool SdFile::write(const SdConfig& config, int port, std::string* error) {
  const std::string host = host_name();
  // The listening port unless the target names one (a host alone, or
  // nothing: this host's name).
  std::string target = config.target.empty() ? host : config.target;
  if (target.find(':') == std::string::npos) target += ":" + std::to_string(port);
  const std::string content = sd_json(target, host, config.labels);
  if (config.file == path_ && content == content_) return true;
  // Beside the file (path.new), so that rename is atomic; Prometheus
  // ignores names that do not match its pattern (*.json).
  std::string why;
  if (!procfs::write_file_whole(config.file, content, why, 0644, /*sync=*/true)) {
    *error = "cannot write service discovery file " + config.file + ": " + why;
    return false;
  }
  if (!path_.empty() && path_ != config.file) remove();
  path_ = config.file;
  content_ = content;
  return true;
}

void SdFile::remove() {
  if (path_.empty()) return;
  // Only what this exporter wrote: another that took the path over keeps it.
  std::ifstream in(path_);
  std::stringstream now;
  now << in.rdbuf();
  if (in && now.str() == content_) ::unlink(path_.c_str());
  path_.clear();
  content_.clear();
}

}  // namespace gym::exporter
