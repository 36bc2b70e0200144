// Fuzz target: the request-head parser and the query decoder on arbitrary
// bytes, as a client can send them. They must accept or refuse (400, 505),
// never crash or hang, and what they accept must hold what the server
// relies on: a method and header names of token characters, names in lower
// case, a version of HTTP/1.x.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "http_request.h"

namespace {

bool token(const std::string& s, bool lower) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c <= 32 || c >= 127 || c == ':' || c == '(' || c == '"' || c == '/') return false;
    if (lower && c >= 'A' && c <= 'Z') return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  gym::exporter::HttpRequest r;
  const int status = gym::exporter::parse_request_head(text, &r);
  if (status != 0 && status != 400 && status != 505) std::abort();
  if (status == 0) {
    if (!token(r.method, false) || r.minor < 0 || r.minor > 9) std::abort();
    for (const auto& [name, value] : r.headers)
      if (!token(name, true) || r.header(name) == nullptr) std::abort();
    (void)gym::exporter::query_values(r.query, "name[]");
  }
  (void)gym::exporter::query_values(text, "name[]");
  return 0;
}
