#include "http/request.h"

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

// Bytes no header value or target may hold: controls (but a value's
// horizontal tab) and DEL.
bool is_control(char c, bool tab_ok) {
  const auto u = static_cast<unsigned char>(c);
  return (u < 0x20 && !(tab_ok && c == '\t')) || u == 0x7f;
}

// What Go's net/http takes as a Host value (httpguts.ValidHostHeader).
bool valid_host(std::string_view h) {
  return std::all_of(h.begin(), h.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           std::strchr("!$%&'()*+,-.:;=[]_~", c) != nullptr || (c & 0x80) != 0;
  });
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The origin-form path of a target: an absolute-form one's part after its
// authority (RFC 9112 §3.2.2: servers accept it).
std::string_view origin_form(std::string_view target) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() < scheme.size() || !iequals(target.substr(0, scheme.size()), scheme))
      continue;
    const size_t slash = target.find('/', scheme.size());
    return slash == target.npos ? std::string_view("/") : target.substr(slash);
  }
  return target;
}

// Framing and persistence from the parsed headers, or 400.
int read_framing(HttpRequest* r) {
  int hosts = 0;
  bool close = false, keep_alive = false;
  for (const auto& [name, value] : r->headers) {
    if (name == "host") {
      if (++hosts > 1 || !valid_host(value)) return 400;
    } else if (name == "content-length") {
      // One number, digits only (no sign, list or spaces), the same on every line.
      if (value.empty() || value.size() > 18 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return 400;
      const uint64_t n = std::stoull(value);
      if (r->content_length && *r->content_length != n) return 400;
      r->content_length = n;
    } else if (name == "transfer-encoding") {
      r->transfer_encoding = true;
    } else if (name == "connection") {
      for (std::string_view rest = value; !rest.empty();) {
        const size_t comma = rest.find(',');
        const std::string_view option = trim(rest.substr(0, comma));
        rest = comma == rest.npos ? std::string_view() : rest.substr(comma + 1);
        close = close || iequals(option, "close");
        keep_alive = keep_alive || iequals(option, "keep-alive");
      }
    }
  }
  if (r->minor >= 1 && hosts == 0) return 400;                // RFC 9112 §3.2
  if (r->transfer_encoding && r->content_length) return 400;  // RFC 9112 §6.3: smuggling
  r->keep_alive = !close && (r->minor >= 1 || keep_alive);
  return 0;
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
  if (!std::all_of(method.begin(), method.end(), is_token_char) || target.empty() ||
      std::any_of(target.begin(), target.end(), [](char c) { return is_control(c, false); }))
    return 400;
  if (version.size() != 8 || version.substr(0, 7) != "HTTP/1." || version[7] < '0' ||
      version[7] > '9')
    return version.substr(0, 5) == "HTTP/" ? 505 : 400;
  out->method = std::string(method);
  out->minor = version[7] - '0';
  const std::string_view origin = origin_form(target);
  const size_t q = origin.find('?');
  out->path = percent_decode(origin.substr(0, q), false);
  out->query = q == std::string_view::npos ? "" : std::string(origin.substr(q + 1));
  out->headers.clear();
  out->content_length.reset();
  out->transfer_encoding = false;
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
    const std::string_view value = trim(h.substr(colon + 1));
    if (std::any_of(value.begin(), value.end(), [](char c) { return is_control(c, true); }))
      return 400;  // NUL, a bare CR, DEL, ...
    out->headers.emplace_back(std::move(name), std::string(value));
  }
  return read_framing(out);
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
