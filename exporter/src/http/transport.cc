// The plain transport (transport.h): bytes as they are, on the socket.
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>

#include "http/transport.h"

namespace gym::exporter::http {

namespace {

using Step = Transport::Step;

Step after_error() {
  return errno == EAGAIN || errno == EWOULDBLOCK ? Step::kWantRead : Step::kFailed;
}

class Plain final : public Transport {
 public:
  bool ready() const override { return true; }
  Step handshake(int) override { return Step::kDone; }

  size_t read(int fd, char* buf, size_t size, Step* step) override {
    for (;;) {
      const ssize_t n = ::recv(fd, buf, size, MSG_DONTWAIT);
      if (n > 0) return size_t(n);
      if (n < 0 && errno == EINTR) continue;
      *step = n == 0 ? Step::kEnd : after_error();
      return 0;
    }
  }

  // Up to four pieces in one call (a chunk's size, its bytes, its end).
  size_t write(int fd, std::span<const std::string_view> pieces, Step* step) override {
    iovec v[4];
    size_t n = 0;
    for (std::string_view p : pieces) {
      if (n == 4) break;
      if (!p.empty()) v[n++] = {const_cast<char*>(p.data()), p.size()};
    }
    if (n == 0) return 0;
    msghdr m{};
    m.msg_iov = v;
    m.msg_iovlen = n;
    for (;;) {
      const ssize_t w = ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) return size_t(w);
      if (w < 0 && errno == EINTR) continue;
      *step = w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? Step::kWantWrite : Step::kFailed;
      return 0;
    }
  }

  bool retries_same_bytes() const override { return false; }
  bool pending() const override { return false; }
  void finish() override {}
  void close() override {}
};

}  // namespace

std::unique_ptr<Transport> plain_transport() {
  return std::make_unique<Plain>();
}

}  // namespace gym::exporter::http
