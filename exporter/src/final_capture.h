// The final capture: at a clean stop, after the collectors' final samples,
// the last full exposition (OpenMetrics with exemplars, every sample
// stamped with the capture's time, as `promtool tsdb create-blocks-from
// openmetrics` needs) and the last snapshot document, each written
// atomically into a directory, named by host and time:
//   gym-exporter-HOST-YYYYMMDDTHHMMSSZ.om and .json
// so that a per-job Prometheus whose data goes with the job, or no
// Prometheus at all, still keeps what the job's servers did.
//
// Thread-safety: call it once, when nothing else renders.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "exposition/exposition.h"

namespace gym::exporter {

// The two files' base name for `host` at `at` (UTC, to the second).
std::string final_capture_name(const std::string& host, std::chrono::system_clock::time_point at);

// Writes both files into `dir` (made if missing). The paths written, or
// empty with `error`.
std::vector<std::string> write_final_capture(const std::string& dir, Exposition& exposition,
                                             const std::string& snapshot_json, std::string* error);

}  // namespace gym::exporter
