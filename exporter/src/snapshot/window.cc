#include "snapshot/window.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace gym::exporter {

void GaugeTrace::add(double value, double dt) {
  if (dt > 0) integral += (last + value) / 2 * dt;
  sum += value;
  sum_squares += value * value;
  ++samples;
  last = value;
}

double GaugeTrace::standard_error() const {
  if (samples < 2) return 0;
  const double n = samples, mean = sum / n;
  const double variance = std::max(sum_squares / n - mean * mean, 0.0) * n / (n - 1);
  return std::sqrt(variance / n);
}

double Window::mean(const GaugeTrace& g) const {
  const double t = seconds();
  return t > 0 ? g.integral / t : g.last;
}

// Every row's gauges at `v`, `dt` after the View before; a row reads 0
// before it appears and after it is gone.
void WindowSampler::trace(const View& v, double dt) {
  ++sample_;
  for (const LimitView& l : v.limits) {
    if (!l.present()) continue;
    RowTraces& r = open_.limits[l.key()];
    r.seen = sample_;
    r.active.add(double(l.active), dt);
    r.queue.add(double(l.queue_depth), dt);
    r.stranded.add(double(l.stranded_slots), dt);
  }
  for (const OperationView& o : v.operations) {
    RowTraces& r = open_.operations[o.key()];
    r.seen = sample_;
    r.active.add(double(o.active), dt);
    r.queue.add(double(o.queued), dt);
  }
  for (auto* rows : {&open_.limits, &open_.operations})
    for (auto& [_, r] : *rows)
      if (r.seen != sample_)
        for (GaugeTrace* g : {&r.active, &r.queue, &r.stranded}) g->add(0, dt);
}

void WindowSampler::add(const View& v) {
  if (!started_) {
    started_ = true;
    open_ = Window{v, v, {}, {}};
    trace(v, 0);
    return;
  }
  const double dt = std::max(v.time_seconds - open_.last.time_seconds, 0.0);
  trace(v, dt);
  open_.last = v;
  if (open_.seconds() < length_) return;
  done_ = std::move(open_);
  ++closed_;
  open_ = Window{v, v, {}, {}};
  trace(v, 0);
}

const Window* WindowSampler::current() const {
  if (done_) return &*done_;
  return started_ && open_.seconds() > 0 ? &open_ : nullptr;
}

}  // namespace gym::exporter
