// spdlog set up as Prometheus exporters log: one line per event to standard
// error, in logfmt or JSON, at the chosen level.
#pragma once

#include <string>

namespace gym::exporter {

// level: debug, info, warn, error; format: logfmt, json. Callable again (reload).
void setup_logging(const std::string& level, const std::string& format);

}  // namespace gym::exporter
