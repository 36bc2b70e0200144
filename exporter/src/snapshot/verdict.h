// The verdict: where work waits on a host and why, ranked, from one window
// of Views (window.h) — the same rules gym-stat's first line, the snapshot
// API's `verdict` section, the landing page and the mixin's recording rules
// apply (docs/verdict.md has each rule with its PromQL).
//
// Entries are places where callers wait (a limit with a queue whose slots
// are full or stranded; an operation that waits longer than it runs) and
// servers in trouble with nobody waiting on them. Each has one cause among
// those the data tells apart — limit_too_small, stranded_slots, starved_cpu,
// blocked_event_loop, memory, queue_dominates — its evidence (figures over
// the window) and what the data cannot tell. The score ranks them: callers
// waiting on average for a limit or operation; a tenth of a server's
// severity (at most 0.1, below any place where callers wait) for a server.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "snapshot/littles_law.h"
#include "snapshot/window.h"

namespace gym::exporter {

// The thresholds (the verdict: section of the configuration).
struct VerdictRules {
  double saturation = 0.9;            // a limit is full: mean held / slots at least this
  double min_waiting = 0.5;           // callers waiting on average, for a place to count
  double stranded_slots = 0.5;        // mean stranded slots that make the cause stranded_slots
  double queue_over_run = 1.0;        // an operation waits at least this times as long as it runs
  double throttled_share = 0.25;      // a server's CFS periods throttled
  double loop_blocked_seconds = 1;    // a loop's heartbeat overdue at the window's end
  double loop_lag_p99_seconds = 0.1;  // event-loop lag p99 over the window
  double gpu_memory_ratio = 0.95;     // a server's fullest GPU's used / total memory
};

struct VerdictEntry {
  std::string place;    // "limit", "operation", "server"
  std::string subject;  // subjects.h; a server's name
  std::string server_name;
  std::string cause;
  double score = 0;
  // Figures over the window, each named with its unit.
  std::vector<std::pair<std::string, double>> evidence;
  std::string cannot_tell;
};

struct Verdict {
  double start_seconds = 0, end_seconds = 0;  // its window (Unix seconds)
  std::vector<VerdictEntry> entries;          // ranked: the first is the bottleneck
  // Of the window, those outside their tolerance first.
  std::vector<LawCheck> checks;
};

Verdict verdict(const Window& w, const VerdictRules& rules);
// A window of one View: every mean is its value, no rate is known.
Window window_of(const View& v);

// "bottleneck: <entry>" or "no bottleneck" (gym-stat's first line).
std::string headline(const Verdict& v);
// One line: subject, cause and the first figures of its evidence.
std::string describe(const VerdictEntry& e);
// The cause in words ("limit too small").
const char* cause_words(const std::string& cause);

}  // namespace gym::exporter
