// TLS for the HTTP server (http/loop.h does the handshakes): an OpenSSL
// server context made from the web configuration (--web.config.file):
// certificate chain and key, the lowest TLS version, client certificates.
#pragma once

#include <string>

#include "web_config.h"

struct ssl_ctx_st;

namespace gym::exporter::tls {

// A server context for `web` (web.tls), or nullptr with a one-line reason
// in `error` (a certificate or key OpenSSL cannot load, a key that is not
// the certificate's, a CA file it cannot read).
ssl_ctx_st* make_context(const WebConfig& web, std::string* error);

}  // namespace gym::exporter::tls
