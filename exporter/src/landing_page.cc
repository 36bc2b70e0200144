#include "landing_page.h"

#include <cstdio>

#include "build_info.h"
#include "snapshot/verdict.h"

namespace gym::exporter {

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {
// The verdict's headline and window, linked to the snapshot that has it all.
std::string verdict_html(const Verdict* v) {
  if (v == nullptr) return "<p>No verdict yet (docs/verdict.md).</p>\n";
  char window[64];
  std::snprintf(window, sizeof window, "%.0f s", v->end_seconds - v->start_seconds);
  return "<p><b>" + html_escape(headline(*v)) + "</b> (over " + window +
         "; every entry in <a href=\"/api/v1/snapshot\">/api/v1/snapshot</a>)</p>\n";
}

std::string listen_text(const Config& c) {
  if (c.systemd_socket) return "(sockets passed by systemd)";
  std::string out;
  for (const std::string& a : c.listen_addresses) out += (out.empty() ? "" : " ") + a;
  return out;
}
}  // namespace

std::string landing_page(const Config& c, const std::string& config_file, const Verdict* verdict) {
  const std::string path = html_escape(c.telemetry_path);
  return "<!DOCTYPE html>\n<html><head><title>gym-exporter</title></head><body>\n"
         "<h1>gym-exporter</h1>\n<p>Version " +
         html_escape(kVersion) + " (revision " + html_escape(kRevision) +
         ")</p>\n<ul>\n<li><a href=\"" + path + "\">" + path +
         "</a></li>\n<li><a href=\"/-/healthy\">/-/healthy</a></li>\n"
         "<li><a href=\"/-/ready\">/-/ready</a></li>\n</ul>\n<h2>Verdict</h2>\n" +
         verdict_html(verdict) +
         "<h2>Configuration in effect</h2>\n<pre>\n"
         "config file:      " +
         html_escape(config_file.empty() ? "(none)" : config_file) +
         "\nlisten address:   " + html_escape(listen_text(c)) + "\ntelemetry path:   " + path +
         "\nregistry dir:     " + html_escape(c.registry_dir) +
         "\nlog:              " + html_escape(c.log_level + " " + c.log_format) +
         "\n</pre>\n</body></html>\n";
}

}  // namespace gym::exporter
