#include "http_tls.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "procfs.h"

// The few OpenSSL calls made here (CivetWeb loads OpenSSL itself, at run
// time; the exporter links libssl.so.3 for these alone, so no headers).
extern "C" {
struct ssl_st;
struct ssl_ctx_st;
void SSL_CTX_set_info_callback(ssl_ctx_st* ctx, void (*cb)(const ssl_st*, int, int));
int SSL_get_fd(const ssl_st* ssl);
unsigned long ERR_peek_last_error(void);
void ERR_clear_error(void);
}

namespace gym::exporter::tls {

namespace {

// Plain HTTP to the TLS port: OpenSSL fails the handshake on seeing an HTTP
// request (SSL_R_HTTP_REQUEST) and CivetWeb closes the connection. As Go's
// servers (and so node_exporter) do, answer 400 first, saying why.
void answer_plain_http(const ssl_st* ssl, int where, int ret) {
  constexpr int kAcceptExit = 0x2002;  // SSL_CB_ACCEPT_EXIT
  if (where != kAcceptExit || ret > 0) return;
  const unsigned long e = ERR_peek_last_error();
  // OpenSSL 3's error codes: library in bits 23..30 (SSL is 20), reason in
  // bits 0..22 (SSL_R_HTTP_REQUEST is 156); bit 31 marks system errors.
  if ((e & 0x80000000UL) != 0 || ((e >> 23) & 0xFF) != 20 || (e & 0x7FFFFF) != 156) return;
  static constexpr char kReply[] =
      "HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
      "Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";
  if (const int fd = SSL_get_fd(ssl); fd >= 0)
    (void)::send(fd, kReply, sizeof kReply - 1, MSG_NOSIGNAL);
  ERR_clear_error();  // not left for the thread's next handshake to see
}

}  // namespace

int combined_pem(const WebConfig& web, std::string* path, std::string* error) {
  std::string pem;
  for (const std::string* f : {&web.cert_file, &web.key_file}) {
    std::string text;
    if (procfs::read_file(*f, text) != procfs::ReadStatus::kOk) {
      *error = "cannot read " + *f;
      return -1;
    }
    pem += text;
    if (!pem.empty() && pem.back() != '\n') pem += '\n';
  }
  const int fd = ::memfd_create("gym-exporter-tls", MFD_CLOEXEC);
  if (fd < 0) {
    *error = std::string("cannot create a memory file for the TLS key: ") + std::strerror(errno);
    return -1;
  }
  size_t done = 0;
  while (done < pem.size()) {
    const ssize_t n = ::write(fd, pem.data() + done, pem.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error = std::string("cannot write the TLS key to memory: ") + std::strerror(errno);
      ::close(fd);
      return -1;
    }
    done += size_t(n);
  }
  *path = "/proc/self/fd/" + std::to_string(fd);
  return fd;
}

const char* protocol_version(const std::string& min_version) {
  if (min_version == "TLS10") return "2";
  if (min_version == "TLS11") return "3";
  if (min_version == "TLS13") return "5";
  return "4";  // TLS12
}

int init_ssl(void* ssl_ctx, void*) {
  SSL_CTX_set_info_callback(static_cast<ssl_ctx_st*>(ssl_ctx), answer_plain_http);
  return 0;  // CivetWeb goes on with its own set-up
}

}  // namespace gym::exporter::tls
