// HTTP/1.x request heads, parsed: what the connection loop (http/loop.h)
// hands the server. Strict where a lenient parse could be read two ways
// (spaces in the request line, obsolete line folding, header names that are
// not tokens, control bytes in a value or the target, a Content-Length that
// is not one number, a missing or repeated Host), as Go's net/http is: such
// a head is answered 400 and its connection closed (RFC 9112 §3.2, §6.3).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
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
  std::optional<uint64_t> content_length;                    // its body's length, when it says one
  bool transfer_encoding = false;                            // a body of a length it does not say
  // Whether the connection may carry another request after the reply: HTTP/1.1
  // unless a Connection option says close; HTTP/1.0 only when one says
  // keep-alive and none says close (options of every Connection line).
  bool keep_alive = true;
  // The first value of a header (name in lower case), or nullptr.
  const char* header(std::string_view lower_name) const;
};

// Parses a request head (up to and without the blank line). Returns 0, or
// the status to answer: 400 (malformed), 505 (not HTTP/1.x).
int parse_request_head(std::string_view head, HttpRequest* out);

// The values of query parameter `key` (decoded: %XX and '+'), in order.
std::vector<std::string> query_values(std::string_view query, std::string_view key);

}  // namespace gym::exporter
