// The TLS transport (transport.h), through OpenSSL: the handshake, records
// read and written, close_notify.
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "http/conn.h"
#include "http/transport.h"

namespace gym::exporter::http {

namespace {

using Step = Transport::Step;

// What OpenSSL's error for a call that returned r means here.
Step step_of(SSL* ssl, int r) {
  const int e = SSL_get_error(ssl, r);
  ERR_clear_error();
  if (e == SSL_ERROR_WANT_READ) return Step::kWantRead;
  if (e == SSL_ERROR_WANT_WRITE) return Step::kWantWrite;
  if (e == SSL_ERROR_ZERO_RETURN) return Step::kEnd;
  return Step::kFailed;
}

class Tls final : public Transport {
 public:
  explicit Tls(SSL* ssl) : ssl_(ssl) {}
  ~Tls() override { close(); }

  bool ready() const override { return handshaken_; }
  Step handshake(int fd) override;

  size_t read(int, char* buf, size_t size, Step* step) override {
    if (ssl_ == nullptr) return *step = Step::kFailed, 0;
    ERR_clear_error();
    const int n = SSL_read(ssl_, buf, int(std::min<size_t>(size, 1 << 30)));
    if (n > 0) return size_t(n);
    *step = step_of(ssl_, n);
    return 0;
  }

  // A piece at a time, a record's worth of bytes at most 1 MiB.
  size_t write(int, std::span<const std::string_view> pieces, Step* step) override {
    if (ssl_ == nullptr) return *step = Step::kFailed, 0;
    for (std::string_view p : pieces) {
      if (p.empty()) continue;
      ERR_clear_error();
      const int w = SSL_write(ssl_, p.data(), int(std::min<size_t>(p.size(), 1 << 20)));
      if (w > 0) return size_t(w);
      *step = step_of(ssl_, w);
      if (*step == Step::kEnd) *step = Step::kFailed;
      return 0;
    }
    return 0;
  }

  bool retries_same_bytes() const override { return true; }
  bool pending() const override { return ssl_ != nullptr && SSL_pending(ssl_) > 0; }

  void finish() override {
    if (ssl_ != nullptr && handshaken_ && !notified_) (void)SSL_shutdown(ssl_);
    ERR_clear_error();
    notified_ = true;
  }

  void close() override {
    if (ssl_ == nullptr) return;
    finish();
    SSL_free(ssl_);
    ssl_ = nullptr;
  }

 private:
  SSL* ssl_;
  bool handshaken_ = false;
  bool peeked_ = false;  // the first byte was seen to start a handshake
  bool notified_ = false;
};

// Before the handshake, what is not a TLS record is not served. Plain HTTP
// is told why in a 400 (as Go's servers, and so node_exporter, answer);
// anything else is refused without a word.
Step Tls::handshake(int fd) {
  if (ssl_ == nullptr) return Step::kFailed;
  if (!peeked_) {
    unsigned char first = 0;
    const ssize_t n = ::recv(fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      return Step::kWantRead;
    if (n <= 0) return Step::kEnd;
    if (first != 0x16) {
      const std::string told = status_line(400, 0) +
                               "Content-Type: text/plain; charset=utf-8\r\nConnection: "
                               "close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";
      if (first >= 'A' && first <= 'Z')
        (void)::send(fd, told.data(), told.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      return Step::kRefused;
    }
    peeked_ = true;  // OpenSSL reads the rest, however it is split
  }
  ERR_clear_error();
  const int r = SSL_accept(ssl_);
  if (r != 1) {
    const Step s = step_of(ssl_, r);
    return s == Step::kEnd ? Step::kFailed : s;
  }
  handshaken_ = true;
  return Step::kDone;
}

}  // namespace

std::unique_ptr<Transport> tls_transport(ssl_ctx_st* ctx, int fd) {
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    ERR_clear_error();
    return nullptr;
  }
  // A write made again after kWantWrite may come from another address: what
  // is held of a streamed reply moves as pieces are added (worker.cc).
  SSL_set_mode(ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return std::make_unique<Tls>(ssl);
}

}  // namespace gym::exporter::http
