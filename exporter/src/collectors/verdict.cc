#include "collectors/verdict.h"

namespace gym::exporter {

namespace {

GYM_REGISTER_COLLECTOR(sampled_kind<VerdictSettings>(
    "verdict", 90,
    {{"window_seconds", &VerdictSettings::window_seconds, 1},
     {"saturation", &VerdictSettings::saturation},
     {"min_waiting", &VerdictSettings::min_waiting},
     {"stranded_slots", &VerdictSettings::stranded_slots},
     {"queue_over_run", &VerdictSettings::queue_over_run},
     {"throttled_share", &VerdictSettings::throttled_share},
     {"loop_blocked_seconds", &VerdictSettings::loop_blocked_seconds},
     {"loop_lag_p99_seconds", &VerdictSettings::loop_lag_p99_seconds},
     {"gpu_memory_ratio", &VerdictSettings::gpu_memory_ratio}},
    [](const VerdictSettings& s, const CollectorContext& c) -> std::unique_ptr<Collector> {
      if (!c.registry || !c.verdicts) return nullptr;  // nowhere to read or to post
      return std::make_unique<VerdictCollector>(s, c);
    }));

}  // namespace

VerdictCollector::VerdictCollector(const VerdictSettings& s, const CollectorContext& c)
    : IntervalCollector(std::chrono::duration<double>(s.interval_seconds), "verdict", c.warn),
      rules_(s),
      registry_(c.registry),
      board_(c.board),
      verdicts_(c.verdicts),
      windows_(s.window_seconds) {}

VerdictCollector::~VerdictCollector() {
  stop();
}

void VerdictCollector::sample() {
  const BoardFigures figures = board_ ? board_->read() : BoardFigures{};
  registry_->with([&](RegistryReader& r) {
    builder_.build(r.snapshot(), r.dir(), figures, view_);
    return 0;
  });
  windows_.add(view_);
  const Window* w = windows_.current();
  // A complete window is judged once; the first, while it fills, at every
  // sample.
  if (w == nullptr || (windows_.closed() > 0 && windows_.closed() == posted_)) return;
  posted_ = windows_.closed();
  verdicts_->post(std::make_shared<const Verdict>(verdict(*w, rules_)));
}

}  // namespace gym::exporter
