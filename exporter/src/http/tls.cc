#include "http/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace gym::exporter::tls {

namespace {

// OpenSSL's reason for the last failure, cleared.
std::string openssl_reason() {
  const unsigned long e = ERR_peek_last_error();
  char text[256] = "unknown reason";
  if (e != 0) ERR_error_string_n(e, text, sizeof text);
  ERR_clear_error();
  return text;
}

int version_of(const std::string& name) {
  if (name == "TLS10") return TLS1_VERSION;
  if (name == "TLS11") return TLS1_1_VERSION;
  if (name == "TLS13") return TLS1_3_VERSION;
  return TLS1_2_VERSION;
}

// The TLS 1.0-1.2 suites, OpenSSL's names joined.
std::string cipher_list(const WebConfig& web) {
  if (web.cipher_suites.empty()) return kDefaultCipherSuites;
  std::string out;
  for (const std::string& s : web.cipher_suites) out += (out.empty() ? "" : ":") + s;
  return out;
}

}  // namespace

ssl_ctx_st* make_context(const WebConfig& web, std::string* error) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  auto fail = [&](const std::string& what) {
    *error = what + ": " + openssl_reason();
    SSL_CTX_free(ctx);
    return nullptr;
  };
  if (ctx == nullptr) return fail("cannot make a TLS context");
  // Client-initiated renegotiation is a denial-of-service lever; nothing here
  // needs it.
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
  // The server's order of suites wins (exporter-toolkit's default).
  if (web.prefer_server_cipher_suites) SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_set_min_proto_version(ctx, version_of(web.min_version)) != 1)
    return fail("cannot set the lowest TLS version " + web.min_version);
  if (!web.max_version.empty() &&
      SSL_CTX_set_max_proto_version(ctx, version_of(web.max_version)) != 1)
    return fail("cannot set the highest TLS version " + web.max_version);
  if (SSL_CTX_set_cipher_list(ctx, cipher_list(web).c_str()) != 1)
    return fail("cannot set the cipher suites " + cipher_list(web));
  if (SSL_CTX_use_certificate_chain_file(ctx, web.cert_file.c_str()) != 1)
    return fail("cannot load the certificate " + web.cert_file);
  if (SSL_CTX_use_PrivateKey_file(ctx, web.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
    return fail("cannot load the key " + web.key_file);
  if (SSL_CTX_check_private_key(ctx) != 1)
    return fail(web.key_file + " is not the key of " + web.cert_file);
  if (web.client_auth_type != "NoClientCert") {
    if (SSL_CTX_load_verify_locations(ctx, web.client_ca_file.c_str(), nullptr) != 1)
      return fail("cannot load the client CA " + web.client_ca_file);
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(web.client_ca_file.c_str()))
      SSL_CTX_set_client_CA_list(ctx, names);
    int mode = SSL_VERIFY_PEER;
    if (web.client_auth_type == "RequireAndVerifyClientCert")
      mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(ctx, mode, nullptr);
  }
  return ctx;
}

}  // namespace gym::exporter::tls
