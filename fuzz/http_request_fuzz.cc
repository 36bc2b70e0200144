// Fuzz target: the request-head parser and the query decoder on arbitrary
// bytes, as a client can send them. They must accept or refuse (400, 505),
// never crash or hang, and what they accept must hold what the server
// relies on: a method and header names of token characters, names in lower
// case, a version of HTTP/1.x, no control byte in a value or the path's
// target, one Host for HTTP/1.1, one body length (never beside
// Transfer-Encoding), and persistence as the Connection options say. The
// Accept header then negotiates a format and an escaping scheme, and any
// bytes escaped by a scheme other than allow-utf-8 are a legacy name; an
// Accept-Encoding value chooses only a coding it names (or "*" stands for).
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "exposition/escaping.h"
#include "exposition/exposition.h"
#include "exposition/negotiate.h"
#include "http/compression.h"
#include "http/request.h"

namespace {

bool token(const std::string& s, bool lower) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c <= 32 || c >= 127 || c == ':' || c == '(' || c == '"' || c == '/') return false;
    if (lower && c >= 'A' && c <= 'Z') return false;
  }
  return true;
}

bool has_control(const std::string& s) {
  for (char c : s)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) return true;
  return false;
}

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool legacy(const std::string& s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == ':'))
      return false;
  return true;
}

void negotiate_and_escape(const char* accept, std::string_view name) {
  using namespace gym::exporter;
  const Format format = negotiate(accept);
  const std::optional<Escaping> scheme = escaping(accept, format);
  if (format == Format::kProtobuf && scheme && *scheme != Escaping::kAllowUtf8) std::abort();
  const Encoder& encoder = encoder_for(format, scheme);
  if (scheme && encoder.escaping() != *scheme && format != Format::kProtobuf) std::abort();
  if (name.empty()) return;
  for (Escaping e : {Escaping::kUnderscores, Escaping::kDots, Escaping::kValues})
    if (!legacy(escape_name(name, e))) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  gym::exporter::HttpRequest r;
  const int status = gym::exporter::parse_request_head(text, &r);
  if (status != 0 && status != 400 && status != 505) std::abort();
  if (status == 0) {
    if (!token(r.method, false) || r.minor < 0 || r.minor > 9) std::abort();
    int hosts = 0;
    for (const auto& [name, value] : r.headers) {
      if (!token(name, true) || r.header(name) == nullptr || has_control(value)) std::abort();
      hosts += name == "host";
    }
    if (hosts > 1 || (r.minor >= 1 && hosts != 1)) std::abort();
    if (r.content_length && r.transfer_encoding) std::abort();
    if (r.keep_alive && r.minor == 0 && r.header("connection") == nullptr) std::abort();
    (void)gym::exporter::query_values(r.query, "name[]");
    negotiate_and_escape(r.header("accept"), r.path);
    (void)gym::exporter::choose_coding(r.header("accept-encoding"));
  }
  // Any bytes as an Accept-Encoding value: a coding the value names (or
  // "*" stands for), never a crash.
  std::string lower(text.substr(0, text.find('\0')));
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  const gym::exporter::Coding coding = gym::exporter::choose_coding(lower.c_str());
  const bool any = lower.find('*') != std::string::npos;
  if (coding == gym::exporter::Coding::kZstd && !any && lower.find("zstd") == std::string::npos)
    std::abort();
  if (coding == gym::exporter::Coding::kGzip && !any && lower.find("gzip") == std::string::npos)
    std::abort();
  negotiate_and_escape(std::string(text).c_str(), text);
  (void)gym::exporter::query_values(text, "name[]");
  return 0;
}
