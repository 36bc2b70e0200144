// TLS for the HTTP server: CivetWeb loads OpenSSL itself; these are the
// few things the exporter adds (the certificate and key handed over in
// memory, the minimum version, a 400 for plain HTTP to the TLS port).
#pragma once

#include <string>

#include "web_config.h"

namespace gym::exporter::tls {

// CivetWeb wants the certificate and its key in one PEM file: both go to an
// anonymous memory file (memfd), named to CivetWeb by its /proc/self/fd
// path. The key never reaches a filesystem, and nothing is left behind
// however the exporter ends. Returns the descriptor (closed once the server
// has read it) or -1 with a reason.
int combined_pem(const WebConfig& web, std::string* path, std::string* error);
// CivetWeb's ssl_protocol_version for the web config's min_version.
const char* protocol_version(const std::string& min_version);
// CivetWeb's init_ssl callback: makes plain HTTP to the TLS port get 400.
int init_ssl(void* ssl_ctx, void* user_data);

}  // namespace gym::exporter::tls
