#include "collectors/pss_budget.h"

#include <algorithm>
#include <cmath>

namespace gym::exporter {

namespace {
constexpr double kGiB = double(uint64_t{1} << 30);
constexpr size_t kMinObservations = 4;
}  // namespace

double StallModel::seconds_per_gib() const {
  if (count_ < kMinObservations) {
    // Until enough reads were measured: the prior, or a larger measured one.
    double most = prior_;
    for (size_t i = 0; i < count_; ++i) most = std::max(most, recent_[i]);
    return most;
  }
  const size_t n = std::min(count_, recent_.size());
  std::array<double, 16> sorted = recent_;
  std::sort(sorted.begin(), sorted.begin() + long(n));
  return sorted[(n * 3) / 4];  // the 3rd quartile
}

double StallModel::predict(uint64_t rss_bytes) const {
  return double(rss_bytes) / kGiB * seconds_per_gib();
}

void StallModel::observe(uint64_t rss_bytes, double seconds) {
  if (rss_bytes < kMinLearnBytes || !(seconds >= 0) || !std::isfinite(seconds)) return;
  recent_[count_ % recent_.size()] = seconds / (double(rss_bytes) / kGiB);
  ++count_;
}

PssVerdict pss_verdict(const PssBudgetConfig& config, double worst_seconds,
                       std::optional<double> since_last_read, bool forced, bool budget_left) {
  if (forced) return PssVerdict::kRead;
  if (worst_seconds > config.max_stall_seconds) return PssVerdict::kRefused;
  // One read of `worst_seconds` at most every worst / fraction seconds.
  if (since_last_read && config.max_stall_fraction > 0 &&
      *since_last_read < worst_seconds / config.max_stall_fraction)
    return PssVerdict::kDeferred;
  return budget_left ? PssVerdict::kRead : PssVerdict::kBusy;
}

}  // namespace gym::exporter
