#include "http_request.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace gym::exporter {

const char* HttpRequest::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers)
    if (name == lower_name) return value.c_str();
  return nullptr;
}

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX decoded (and '+' as a space in a query); a malformed escape is kept.
std::string percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_digit(s[i + 1]) >= 0 && hex_digit(s[i + 2]) >= 0) {
      out += char(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

bool is_token_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         (c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace

int parse_request_head(std::string_view head, HttpRequest* out) {
  size_t eol = head.find('\n');
  std::string_view line = head.substr(0, eol);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == 0 || sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != line.npos) return 400;
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!std::all_of(method.begin(), method.end(), is_token_char) || target.empty()) return 400;
  if (version.size() != 8 || version.substr(0, 7) != "HTTP/1." || version[7] < '0' ||
      version[7] > '9')
    return version.substr(0, 5) == "HTTP/" ? 505 : 400;
  out->method = std::string(method);
  out->minor = version[7] - '0';
  const size_t q = target.find('?');
  out->path = percent_decode(target.substr(0, q), false);
  out->query = q == std::string_view::npos ? "" : std::string(target.substr(q + 1));
  out->headers.clear();
  while (eol != std::string_view::npos) {
    const size_t start = eol + 1;
    eol = head.find('\n', start);
    std::string_view h = head.substr(start, eol == head.npos ? head.npos : eol - start);
    if (!h.empty() && h.back() == '\r') h.remove_suffix(1);
    if (h.empty()) continue;
    if (h.front() == ' ' || h.front() == '\t') return 400;  // obsolete line folding
    const size_t colon = h.find(':');
    if (colon == 0 || colon == h.npos) return 400;
    std::string name(h.substr(0, colon));
    if (!std::all_of(name.begin(), name.end(), is_token_char)) return 400;
    for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    out->headers.emplace_back(std::move(name), std::string(trim(h.substr(colon + 1))));
  }
  return 0;
}

std::vector<std::string> query_values(std::string_view query, std::string_view key) {
  std::vector<std::string> values;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == query.npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (percent_decode(pair.substr(0, eq), true) != key) continue;
    values.push_back(eq == pair.npos ? "" : percent_decode(pair.substr(eq + 1), true));
  }
  return values;
}

}  // namespace gym::exporter
