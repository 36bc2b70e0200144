// The landing page at "/": links to the telemetry path and the health
// endpoints, and the configuration in effect.
#pragma once

#include <string>

#include "config.h"

namespace gym::exporter {

std::string html_escape(const std::string& s);
std::string landing_page(const Config& c, const std::string& config_file);

}  // namespace gym::exporter
