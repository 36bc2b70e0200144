// Little's law as the instrument's own check: over a window, a limit's mean
// number of callers waiting must equal the wait time its waits accumulated
// per second, and its mean held slots the hold time per second; an
// operation's mean queued and active the same of its queue and run
// durations. Each check carries the tolerance its window allows (the
// gauges' sampling error and the waits and holds in progress at the ends);
// a check outside it is a drift: a bug in the counting, a slot held outside
// the instrumentation, or a caller that bypasses it (docs/verdict.md).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "snapshot/window.h"

namespace gym::exporter {

struct LawCheck {
  std::string place;      // "limit" or "operation"
  std::string subject;    // its labels' values, as verdict entries name them
  std::string quantity;   // "waiting" or "held" (an operation's: "queued", "active")
  double mean = 0;        // L: the gauge's mean over the window
  double per_second = 0;  // lambda W: the summed durations' increase per second
  double tolerance = 0;   // the |L - lambda W| the window allows
  double spread = 0;      // the mean's standard error, which the tolerance multiplies
  // L / lambda W (1 when both are 0; infinite when only L is not).
  double ratio() const;
  bool holds() const;
};

// Below this (callers or slots, in both terms) a check is not made: too few
// waits or holds to tell noise from a drift.
inline constexpr double kLawFloor = 0.05;
// Nor with fewer Views in the window than this: a mean from fewer samples
// says little of the gauge's.
inline constexpr uint32_t kLawMinSamples = 10;
// The chance that any check of a window drifts by noise alone, at most.
inline constexpr double kLawFalseDrift = 0.01;
// How many standard errors each of a window's `checks` checks allows: at
// least 3, and enough that all of them together drift by noise alone with
// a chance of at most kLawFalseDrift (Bonferroni).
double law_sigmas(size_t checks);

// Every check the window allows, in row order.
std::vector<LawCheck> littles_law(const Window& w);

}  // namespace gym::exporter
