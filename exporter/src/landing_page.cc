#include "landing_page.h"

#include "build_info.h"

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
std::string listen_text(const Config& c) {
  if (c.systemd_socket) return "(sockets passed by systemd)";
  std::string out;
  for (const std::string& a : c.listen_addresses) out += (out.empty() ? "" : " ") + a;
  return out;
}
}  // namespace

std::string landing_page(const Config& c, const std::string& config_file) {
  const std::string path = html_escape(c.telemetry_path);
  return "<!DOCTYPE html>\n<html><head><title>gym-exporter</title></head><body>\n"
         "<h1>gym-exporter</h1>\n<p>Version " +
         html_escape(kVersion) + " (revision " + html_escape(kRevision) +
         ")</p>\n<ul>\n<li><a href=\"" + path + "\">" + path +
         "</a></li>\n<li><a href=\"/-/healthy\">/-/healthy</a></li>\n"
         "<li><a href=\"/-/ready\">/-/ready</a></li>\n</ul>\n"
         "<h2>Configuration in effect</h2>\n<pre>\n"
         "config file:      " +
         html_escape(config_file.empty() ? "(none)" : config_file) +
         "\nlisten address:   " + html_escape(listen_text(c)) + "\ntelemetry path:   " + path +
         "\nregistry dir:     " + html_escape(c.registry_dir) +
         "\nlog:              " + html_escape(c.log_level + " " + c.log_format) +
         "\n</pre>\n</body></html>\n";
}

}  // namespace gym::exporter
