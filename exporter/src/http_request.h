// HTTP/1.x request heads, parsed: what the connection loop (http_loop.h)
// hands the server. Strict where a lenient parse could be read two ways
// (spaces in the request line, obsolete line folding, header names that are
// not tokens), as Go's net/http is.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gym::exporter {

// One parsed request head.
struct HttpRequest {
  std::string method;
  std::string path;                                          // percent-decoded
  std::string query;                                         // as sent (after '?'), not decoded
  int minor = 1;                                             // HTTP/1.minor
  std::vector<std::pair<std::string, std::string>> headers;  // names lower case
  // The first value of a header (name in lower case), or nullptr.
  const char* header(std::string_view lower_name) const;
};

// Parses a request head (up to and without the blank line). Returns 0, or
// the status to answer: 400 (malformed), 505 (not HTTP/1.x).
int parse_request_head(std::string_view head, HttpRequest* out);

// The values of query parameter `key` (decoded: %XX and '+'), in order.
std::vector<std::string> query_values(std::string_view query, std::string_view key);

}  // namespace gym::exporter
