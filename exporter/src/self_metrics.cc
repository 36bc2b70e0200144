#include "self_metrics.h"

#include <time.h>

namespace gym::exporter {
namespace {
int64_t unix_now_ns() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}
}  // namespace

SelfMetrics::SelfMetrics() : last_success_ns_(unix_now_ns()) {}

SelfMetrics& SelfMetrics::process() {
  static auto* metrics = new SelfMetrics();
  return *metrics;
}

void SelfMetrics::count_request(size_t path, int code) noexcept {
  for (size_t c = 0; c < kCodes.size(); ++c)
    if (kCodes[c] == code && path < kPaths.size())
      requests_[path][c].fetch_add(1, std::memory_order_relaxed);
}

void SelfMetrics::reloaded(bool ok) noexcept {
  (ok ? reloads_ok_ : reloads_failed_).fetch_add(1, std::memory_order_relaxed);
  last_ok_.store(ok, std::memory_order_relaxed);
  if (ok) last_success_ns_.store(unix_now_ns(), std::memory_order_relaxed);
}

}  // namespace gym::exporter
