// The landing page at "/": links to the telemetry path, the snapshot and the
// health endpoints, the verdict's headline (snapshot/verdict.h) when there
// is one, and the configuration in effect.
#pragma once

#include <string>

#include "config.h"

namespace gym::exporter {

std::string html_escape(const std::string& s);
struct Verdict;
std::string landing_page(const Config& c, const std::string& config_file,
                         const Verdict* verdict = nullptr);

}  // namespace gym::exporter
