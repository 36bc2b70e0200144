/* Debian 12's CivetWeb 1.15 loads OpenSSL at run time (dlopen "libssl.so")
 * and looks up SSL_get_peer_certificate, which OpenSSL 3 no longer exports
 * (it is a macro for SSL_get1_peer_certificate there). Its pointer stays
 * NULL and the first HTTPS request crashes the worker thread.
 *
 * This library is that missing function. It is named libssl.so, depends on
 * the real libssl.so.3 (so that every other lookup resolves there), and is
 * found first by gym-exporter through its DT_RPATH. The semantics match: both
 * return the peer certificate with its reference count raised. */
typedef struct ssl_st SSL;
typedef struct x509_st X509;

X509* SSL_get1_peer_certificate(const SSL* s);

X509* SSL_get_peer_certificate(const SSL* s) {
  return SSL_get1_peer_certificate(s);
}
