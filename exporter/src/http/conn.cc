#include "http/conn.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace gym::exporter::http {

namespace {

Sent sent_of(Transport::Step s) {
  return s == Transport::Step::kWantRead || s == Transport::Step::kWantWrite ? Sent::kAgain
                                                                             : Sent::kFailed;
}

}  // namespace

// What is held, head then body, from `sent` on. A transport that retries the
// same bytes finds them again at `sent` until they went.
Sent send_some(Conn* c, bool* progress) {
  while (c->unsent() > 0) {
    const size_t body_at = c->sent > c->out_head.size() ? c->sent - c->out_head.size() : 0;
    const std::string_view held[] = {
        std::string_view(c->out_head).substr(std::min(c->sent, c->out_head.size())),
        std::string_view(c->out_body).substr(body_at)};
    Transport::Step step = Transport::Step::kFailed;
    const size_t w = c->io->write(c->fd, held, &step);
    if (w == 0) return sent_of(step);
    c->sent += w;
    *progress = true;
  }
  return Sent::kAll;
}

size_t send_with(Conn* c, std::span<const std::string_view> more, Sent* result) {
  *result = Sent::kAgain;
  if (c->io->retries_same_bytes()) return 0;
  bool progress = false;
  if (c->unsent() > 0 && (*result = send_some(c, &progress)) != Sent::kAll) return 0;
  size_t total = 0;
  for (std::string_view m : more) total += m.size();
  size_t taken = 0;
  while (taken < total) {
    std::string_view rest[4];
    size_t n = 0, skip = taken;
    for (std::string_view m : more) {
      if (skip >= m.size()) {
        skip -= m.size();
        continue;
      }
      if (n == 4) break;
      rest[n++] = m.substr(skip);
      skip = 0;
    }
    Transport::Step step = Transport::Step::kFailed;
    const size_t w = c->io->write(c->fd, std::span(rest, n), &step);
    if (w == 0) {
      *result = sent_of(step);
      return taken;
    }
    taken += w;
  }
  *result = Sent::kAll;
  return taken;
}

bool acknowledged(Conn* c) {
  int queued = 0;
  if (::ioctl(c->fd, SIOCOUTQ, &queued) != 0 || queued < 0) return false;
  const bool fell = uint64_t(queued) < c->unacked;
  c->unacked = uint64_t(queued);
  return fell;
}

void send_now(Conn* c, std::string_view data) {
  Transport::Step ignored;
  (void)c->io->write(c->fd, std::span(&data, 1), &ignored);
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
  c->io->close();
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
