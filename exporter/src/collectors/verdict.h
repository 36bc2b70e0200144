// The verdict collector: every interval it takes a View of the registry
// and the servers' figures (the board), adds it to a tumbling window
// (snapshot/window.h) and, when a window closes (and before the first one
// has, at every sample), posts the window's verdict (snapshot/verdict.h) to
// the verdict board, where /api/v1/snapshot and the landing page read it. It
// serves no family of its own: its samples' account is its cost
// (gym_exporter_collector_sample_duration_seconds{collector="verdict"}).
//
// Thread-safety: as every IntervalCollector; the board may be read from any
// thread.
#pragma once

#include <memory>
#include <mutex>

#include "sampled_collector.h"
#include "snapshot/verdict.h"
#include "snapshot/window.h"

namespace gym::exporter {

// The last verdict, shared by the collector that posts it and the views
// that show it; kept across reloads.
class VerdictBoard {
 public:
  void post(std::shared_ptr<const Verdict> v) {
    std::lock_guard<std::mutex> lock(mu_);
    last_ = std::move(v);
  }
  std::shared_ptr<const Verdict> read() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_;
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const Verdict> last_;
};

// The `verdict:` section: enabled, interval_seconds (the step of its
// Views), window_seconds and the rules' thresholds.
struct VerdictSettings : SampledSettings, VerdictRules {
  VerdictSettings() { interval_seconds = 1; }
  double window_seconds = 30;
};

class VerdictCollector : public IntervalCollector {
 public:
  VerdictCollector(const VerdictSettings& settings, const CollectorContext& context);
  ~VerdictCollector() override;
  void sample() override;
  void collect(const Emit&) override {}

 private:
  VerdictRules rules_;
  std::shared_ptr<SharedRegistry> registry_;
  std::shared_ptr<ServerBoard> board_;
  std::shared_ptr<VerdictBoard> verdicts_;
  ViewBuilder builder_;
  View view_;
  WindowSampler windows_;
  uint64_t posted_ = 0;  // how many windows had closed at the last post
};

}  // namespace gym::exporter
