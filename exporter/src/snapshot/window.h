// A window of Views: the Views at its two ends (counters' increases over it)
// and, for the gauges Little's law and the verdict read (limits' active
// slots, queue and stranded slots; operations' active and queued), their
// integral over time from every View sampled in it. gym-stat feeds one from
// its refreshes, the exporter from its verdict sampler (verdict.h,
// littles_law.h read the windows; docs/verdict.md).
//
// Windows tumble: each starts where the one before ended, so that a
// verdict's window is a fixed span of time and says which.
//
// Thread-safety: none (one owner).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "snapshot/view.h"

namespace gym::exporter {

// One gauge over a window: its integral over time (trapezoids between
// samples; 0 before a row exists) and its samples' spread.
struct GaugeTrace {
  double integral = 0;  // value-seconds
  double sum = 0, sum_squares = 0;
  uint32_t samples = 0;
  double last = 0;
  // The value at a sample `dt` seconds after the one before (that one's
  // value carried: 0 when the row was not there).
  void add(double value, double dt);
  // The standard error of the samples' mean (0 with fewer than two): how far
  // a mean from samples may be from the gauge's true mean, for samples that
  // do not follow each other's value (docs/verdict.md).
  double standard_error() const;
};

struct RowTraces {
  GaugeTrace active, queue, stranded;  // operations: active, queued
  uint64_t seen = 0;                   // the last sample that had the row
};

struct Window {
  View first, last;  // at its ends
  // By key() of the row (LimitView, OperationView).
  std::map<std::string, RowTraces> limits, operations;
  double seconds() const { return last.time_seconds - first.time_seconds; }
  // A gauge's mean over the window (its integral over the whole window).
  double mean(const GaugeTrace& g) const;
};

class WindowSampler {
 public:
  explicit WindowSampler(double length_seconds) : length_(length_seconds) {}
  // One View, taken after the one before. Closes the open window when it
  // has lasted its length.
  void add(const View& v);
  // The last complete window; before one, the open one when it spans two
  // Views; else null.
  const Window* current() const;
  double length() const { return length_; }
  // The window being filled; how many windows have closed.
  const Window& open() const { return open_; }
  uint64_t closed() const { return closed_; }

 private:
  void trace(const View& v, double dt);
  double length_;
  bool started_ = false;
  uint64_t sample_ = 0;
  uint64_t closed_ = 0;
  Window open_;
  std::optional<Window> done_;
};

}  // namespace gym::exporter
