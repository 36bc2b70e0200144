#include "final_capture.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "exposition/text.h"
#include "host/procfs.h"
#include "sd_file.h"

namespace gym::exporter {

namespace {

// OpenMetrics whose samples all carry `ms` (those without a timestamp of
// their own), exemplars kept: the format backfill reads.
class StampedOpenMetrics final : public Encoder {
 public:
  explicit StampedOpenMetrics(int64_t ms) : ms_(ms) {}
  std::string_view content_type() const override { return inner_.content_type(); }
  std::string_view name() const override { return "openmetrics"; }
  void family(const Family& f, const FamilyExtras* extras, std::string& out) const override {
    inner_.family(stamped(f), extras, out);
  }
  bool splits() const override { return true; }
  void family_part(const Family& f, const FamilyExtras* extras, size_t from, size_t to,
                   std::string& out) const override {
    inner_.family_part(stamped(f), extras, from, to, out);
  }
  void finish(std::string& out) const override { inner_.finish(out); }

 private:
  Family stamped(const Family& f) const {
    Family g = f;
    for (auto& m : g.metric)
      if (m.timestamp_ms == 0) m.timestamp_ms = ms_;
    return g;
  }
  OpenMetricsEncoder inner_;
  int64_t ms_;
};

}  // namespace

std::string final_capture_name(const std::string& host, std::chrono::system_clock::time_point at) {
  const std::time_t t = std::chrono::system_clock::to_time_t(at);
  std::tm utc{};
  ::gmtime_r(&t, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y%m%dT%H%M%SZ", &utc);
  std::string safe = host;
  for (char& c : safe)
    if (c == '/' || c == '\0') c = '_';
  return "gym-exporter-" + safe + "-" + when;
}

std::vector<std::string> write_final_capture(const std::string& dir, Exposition& exposition,
                                             const std::string& snapshot_json, std::string* error) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    *error = "cannot make final capture directory " + dir + ": " + std::strerror(errno);
    return {};
  }
  const auto now = std::chrono::system_clock::now();
  const int64_t ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const std::string base = dir + "/" + final_capture_name(host_name(), now);
  const std::string exposition_text = exposition.render(StampedOpenMetrics(ms));
  std::vector<std::string> written;
  for (const auto& [path, text] :
       {std::pair{base + ".om", &exposition_text}, std::pair{base + ".json", &snapshot_json}}) {
    std::string why;
    if (!procfs::write_file_whole(path, *text, why, 0644, /*sync=*/true)) {
      *error = "cannot write final capture " + path + ": " + why;
      return {};
    }
    written.push_back(path);
  }
  return written;
}

}  // namespace gym::exporter
