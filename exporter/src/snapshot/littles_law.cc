#include "snapshot/littles_law.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "snapshot/subjects.h"

namespace gym::exporter {

namespace {

// The coarse clock that stamps holds (segment::stamp_now_ns) ticks at most
// this far apart (HZ=100); each hold's time is off by under one tick, as
// much up as down.
constexpr double kHoldTick = 0.01;

// In progress at one end of the window: at most `n` each lasting at most
// `oldest`, the time one term counts and the other does not.
double in_progress(double n, double oldest) {
  return std::max(n, 0.0) * std::max(oldest, 0.0);
}

// One check from the gauge's trace and the durations' increase; `edges` is
// the time in progress at both ends, `jitter` the durations' own error.
void check(const Window& w, std::vector<LawCheck>& out, LawCheck c, const GaugeTrace& g,
           double increase, double edges, double jitter) {
  const double t = w.seconds();
  c.mean = w.mean(g);
  c.per_second = std::max(increase, 0.0) / t;
  if (std::max(c.mean, c.per_second) < kLawFloor || g.samples < kLawMinSamples) return;
  // The samples' spread, but at least that of a count sampled n times whose
  // mean is m (Poisson: sqrt(m / n)): samples can miss short waits and holds
  // altogether, and then show no spread.
  const double m = std::max(c.mean, c.per_second);
  const double spread = std::max(g.standard_error(), std::sqrt(m / double(g.samples)));
  c.spread = spread;
  c.tolerance = (edges + jitter) / t;  // law_sigmas() spreads are added once all are made
  out.push_back(std::move(c));
}

void limit_checks(const Window& w, std::vector<LawCheck>& out) {
  for (const auto& [key, r] : w.limits) {
    const LimitView* a = row_with_key(w.first.limits, key);
    const LimitView* b = row_with_key(w.last.limits, key);
    if (b == nullptr) continue;  // gone: its end is unknown
    const LimitView none;
    const LimitView& s = a != nullptr ? *a : none;
    const HistogramView waited = b->wait_duration.minus(s.wait_duration);
    check(w, out, {"limit", subject(*b), "waiting"}, r.queue, waited.sum,
          in_progress(double(s.queue_depth), s.oldest_wait_seconds) +
              in_progress(double(b->queue_depth), b->oldest_wait_seconds),
          0);
    if (!b->hold_seconds_total) continue;  // a writer older than the hold time
    const double admitted =
        double(b->admissions_total - std::min(s.admissions_total, b->admissions_total));
    check(w, out, {"limit", subject(*b), "held"}, r.active,
          *b->hold_seconds_total - s.hold_seconds_total.value_or(0),
          in_progress(double(s.active), s.oldest_hold_seconds) +
              in_progress(double(b->active), b->oldest_hold_seconds),
          3 * kHoldTick * std::sqrt(admitted));
  }
}

double run_seconds(const OperationView& now, const OperationView* before) {
  double sum = 0;
  for (const auto& [outcome, h] : now.duration) {
    const HistogramView* was = nullptr;
    if (before != nullptr)
      if (auto it = before->duration.find(outcome); it != before->duration.end()) was = &it->second;
    sum += was != nullptr ? h.minus(*was).sum : h.sum;
  }
  return sum;
}

void operation_checks(const Window& w, std::vector<LawCheck>& out) {
  for (const auto& [key, r] : w.operations) {
    const OperationView* a = row_with_key(w.first.operations, key);
    const OperationView* b = row_with_key(w.last.operations, key);
    if (b == nullptr) continue;
    const OperationView none;
    const OperationView& s = a != nullptr ? *a : none;
    check(w, out, {"operation", subject(*b), "queued"}, r.queue,
          b->queue_duration.minus(s.queue_duration).sum,
          in_progress(double(s.queued), s.oldest_queued_seconds) +
              in_progress(double(b->queued), b->oldest_queued_seconds),
          0);
    check(w, out, {"operation", subject(*b), "active"}, r.active, run_seconds(*b, a),
          in_progress(double(s.active), s.oldest_active_seconds) +
              in_progress(double(b->active), b->oldest_active_seconds),
          0);
  }
}

}  // namespace

double LawCheck::ratio() const {
  if (per_second > 0) return mean / per_second;
  return mean > 0 ? std::numeric_limits<double>::infinity() : 1.0;
}

bool LawCheck::holds() const {
  return std::fabs(mean - per_second) <= tolerance;
}

double law_sigmas(size_t checks) {
  // z with P(|Z| > z) = erfc(z / sqrt 2) = kLawFalseDrift / checks, by bisection.
  const double tail = kLawFalseDrift / double(std::max<size_t>(checks, 1));
  double lo = 0, hi = 40;
  for (int i = 0; i < 100; ++i) {
    const double mid = (lo + hi) / 2;
    (std::erfc(mid / std::sqrt(2.0)) > tail ? lo : hi) = mid;
  }
  return std::max(3.0, hi);
}

std::vector<LawCheck> littles_law(const Window& w) {
  std::vector<LawCheck> out;
  if (w.seconds() <= 0) return out;
  limit_checks(w, out);
  operation_checks(w, out);
  const double sigmas = law_sigmas(out.size());
  for (LawCheck& c : out) c.tolerance += sigmas * c.spread;
  return out;
}

}  // namespace gym::exporter
