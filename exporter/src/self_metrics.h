// The exporter's own HTTP requests and configuration reloads, counted where
// they happen (the HTTP server, App::reload) and served by the "self"
// collector (gym_exporter_http_requests_total, gym_exporter_config_*). One
// set per process.
//
// Thread-safety: atomics only; any thread may count and read.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

namespace gym::exporter {

class SelfMetrics {
 public:
  // The `path` label: the telemetry path is "metrics"; a path the exporter
  // does not serve is "other" (so that clients cannot make new series).
  static constexpr std::array<std::string_view, 7> kPaths = {
      "metrics", "snapshot", "deaths", "healthy", "ready", "landing", "other"};
  // The `code` label: every status the handler answers with.
  static constexpr std::array<int, 5> kCodes = {200, 400, 401, 404, 405};

  static SelfMetrics& process();

  void count_request(size_t path, int code) noexcept;
  uint64_t requests(size_t path, size_t code) const noexcept {
    return requests_[path][code].load(std::memory_order_relaxed);
  }
  // A reload (SIGHUP) that applied (ok) or was refused.
  void reloaded(bool ok) noexcept;
  uint64_t reloads(bool ok) const noexcept {
    return (ok ? reloads_ok_ : reloads_failed_).load(std::memory_order_relaxed);
  }
  bool last_reload_ok() const noexcept { return last_ok_.load(std::memory_order_relaxed); }
  // Unix time of the start or of the last reload that applied.
  double last_success_unix_seconds() const noexcept {
    return double(last_success_ns_.load(std::memory_order_relaxed)) / 1e9;
  }

 private:
  SelfMetrics();
  std::atomic<uint64_t> requests_[kPaths.size()][kCodes.size()] = {};
  std::atomic<uint64_t> reloads_ok_{0};
  std::atomic<uint64_t> reloads_failed_{0};
  std::atomic<bool> last_ok_{true};
  std::atomic<int64_t> last_success_ns_{0};
};

}  // namespace gym::exporter
