#include "http/conn.h"

#include <linux/sockios.h>
#include <openssl/err.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace gym::exporter::http {

namespace {

// Plain: both pieces in one call, as far as the socket takes them.
Sent send_plain(Conn* c, bool* progress) {
  while (c->unsent() > 0) {
    iovec v[2];
    int n = 0;
    if (c->sent < c->out_head.size())
      v[n++] = {c->out_head.data() + c->sent, c->out_head.size() - c->sent};
    const size_t body_at = c->sent > c->out_head.size() ? c->sent - c->out_head.size() : 0;
    if (body_at < c->out_body.size())
      v[n++] = {c->out_body.data() + body_at, c->out_body.size() - body_at};
    msghdr m{};
    m.msg_iov = v;
    m.msg_iovlen = size_t(n);
    const ssize_t w = ::sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      c->sent += size_t(w);
      *progress = true;
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return Sent::kAgain;
    } else {
      return Sent::kFailed;
    }
  }
  return Sent::kAll;
}

// TLS: a piece at a time. A write that wants more is retried with the same
// bytes (OpenSSL asks it), which `sent` keeps until it succeeds.
Sent send_tls(Conn* c, bool* progress) {
  while (c->unsent() > 0) {
    const bool in_head = c->sent < c->out_head.size();
    const std::string& piece = in_head ? c->out_head : c->out_body;
    const size_t at = in_head ? c->sent : c->sent - c->out_head.size();
    ERR_clear_error();
    const int w =
        SSL_write(c->ssl, piece.data() + at, int(std::min<size_t>(piece.size() - at, 1 << 20)));
    if (w > 0) {
      c->sent += size_t(w);
      *progress = true;
      continue;
    }
    const int e = SSL_get_error(c->ssl, w);
    ERR_clear_error();
    if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) return Sent::kAgain;
    return Sent::kFailed;
  }
  return Sent::kAll;
}

}  // namespace

size_t send_with(Conn* c, std::span<const std::string_view> more, Sent* result) {
  *result = Sent::kAgain;
  if (c->ssl != nullptr) return 0;
  bool progress = false;
  if (c->unsent() > 0 && (*result = send_plain(c, &progress)) != Sent::kAll) return 0;
  size_t total = 0;
  for (std::string_view m : more) total += m.size();
  size_t taken = 0;
  while (taken < total) {
    iovec v[4];
    size_t n = 0, skip = taken;
    for (std::string_view m : more) {
      if (skip >= m.size()) {
        skip -= m.size();
        continue;
      }
      if (n == 4) break;
      v[n++] = {const_cast<char*>(m.data()) + skip, m.size() - skip};
      skip = 0;
    }
    msghdr h{};
    h.msg_iov = v;
    h.msg_iovlen = n;
    const ssize_t w = ::sendmsg(c->fd, &h, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      taken += size_t(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else {
      *result = w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? Sent::kAgain : Sent::kFailed;
      return taken;
    }
  }
  *result = Sent::kAll;
  return taken;
}

Sent send_some(Conn* c, bool* progress) {
  return c->ssl != nullptr ? send_tls(c, progress) : send_plain(c, progress);
}

bool acknowledged(Conn* c) {
  int queued = 0;
  if (::ioctl(c->fd, SIOCOUTQ, &queued) != 0 || queued < 0) return false;
  const bool fell = uint64_t(queued) < c->unacked;
  c->unacked = uint64_t(queued);
  return fell;
}

void send_now(Conn* c, std::string_view data, bool raw) {
  if (c->ssl != nullptr && !raw) {
    ERR_clear_error();
    (void)SSL_write(c->ssl, data.data(), int(data.size()));
    ERR_clear_error();
  } else {
    (void)::send(c->fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

bool drain(int fd) {
  char buf[16384];
  for (size_t total = 0; total < (1u << 20);) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    if (n <= 0) return false;
    total += size_t(n);
  }
  return true;
}

void release(Conn* c) {
  if (c->ssl != nullptr) {
    if (c->handshaken && !c->notified) (void)SSL_shutdown(c->ssl);
    SSL_free(c->ssl);
    c->ssl = nullptr;
    ERR_clear_error();
  }
  if (c->fd >= 0) ::close(c->fd);
  c->fd = -1;
}

size_t head_end(const std::string& in) {
  const size_t first = in.find('\n');
  if (first == in.npos) return 0;
  if (std::string_view(in).substr(0, first).find(" HTTP/") == std::string_view::npos)
    return first + 1;
  for (size_t at = first; at != in.npos; at = in.find('\n', at + 1)) {
    size_t next = at + 1;
    if (next < in.size() && in[next] == '\r') ++next;
    if (next < in.size() && in[next] == '\n') return next + 1;
  }
  return 0;
}

const char* reason_of(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string status_line(int status, int minor) {
  return "HTTP/1." + std::to_string(minor) + " " + std::to_string(status) + " " +
         reason_of(status) + "\r\n";
}

std::string refusal(int status) {
  const std::string body = std::string(reason_of(status)) + "\n";
  return status_line(status) + "Content-Type: text/plain; charset=utf-8\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace gym::exporter::http
