// A Prometheus file_sd entry for this exporter: one JSON file per exporter,
// [{"targets": ["HOST:PORT"], "labels": {"host": HOST, ...}}], that a
// Prometheus finds with `file_sd_configs: [{files: [DIR/*.json]}]`. One file
// each (not one shared file) so that exporters on many hosts writing into a
// shared directory never need a lock: each writes its own atomically
// (a temporary file, then rename) and removes it when it stops.
//
// Thread-safety: pure functions, and SdFile is used from one thread.
#pragma once

#include <map>
#include <string>

namespace gym::exporter {

struct SdConfig {
  std::string file;  // empty: none written
  // host:port to scrape; a host alone: with the listening port; empty: this
  // host's name and the listening port.
  std::string target;
  std::map<std::string, std::string> labels;  // besides "host"
  bool operator==(const SdConfig&) const = default;
};

// This host's name (gethostname), or "localhost".
std::string host_name();

// The file's JSON for `target` with `labels` and host=`host`.
std::string sd_json(const std::string& target, const std::string& host,
                    const std::map<std::string, std::string>& labels);

// A label name Prometheus accepts on a target ([a-zA-Z_][a-zA-Z0-9_]*, not
// starting with "__", which Prometheus reserves).
bool valid_sd_label(const std::string& name);

// The entry of one running exporter: written by write(), removed by remove()
// (and the destructor) if the file still holds what it wrote.
class SdFile {
 public:
  SdFile() = default;
  SdFile(const SdFile&) = delete;
  SdFile& operator=(const SdFile&) = delete;
  ~SdFile() { remove(); }

  // Writes `config`'s entry for an exporter listening on `port` (replacing
  // the file it wrote before, if that was another). False with `error`.
  bool write(const SdConfig& config, int port, std::string* error);
  void remove();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string content_;
};

}  // namespace gym::exporter
