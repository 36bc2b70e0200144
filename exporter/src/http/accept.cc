// Accepting connections (loop.h): within max_connections and each peer's
// cap, making room by closing the connection that has waited the longest.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "http/state.h"

namespace gym::exporter {

using http::Clock;
using http::Conn;

namespace {

// The peer's address as raw bytes (an IPv4-mapped IPv6 one as IPv4); the
// clients of Unix sockets are one peer.
std::string peer_key(const sockaddr_storage& from) {
  if (from.ss_family == AF_UNIX) return "unix";
  if (from.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(from).sin_addr;
    return std::string(reinterpret_cast<const char*>(&a), sizeof a);
  }
  if (from.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(from).sin6_addr;
    const char* bytes = reinterpret_cast<const char*>(&a);
    if (IN6_IS_ADDR_V4MAPPED(&a)) return std::string(bytes + 12, 4);
    return std::string(bytes, sizeof a);
  }
  return {};
}

}  // namespace

void HttpLoop::State::set_accepting(bool on) {
  if (on == accepting) return;
  for (size_t i = 0; i < listeners.size(); ++i) {
    epoll_event ev{};
    ev.events = on ? uint32_t{EPOLLIN} : 0u;
    ev.data.u64 = kListenTag + i;
    (void)epoll_ctl(epfd, EPOLL_CTL_MOD, listeners[i].fd, &ev);
  }
  accepting = on;
}

void HttpLoop::State::accept_new(int listener) {
  for (;;) {
    // At max_connections, the connection that has waited the longest makes
    // room for a new one. With none waiting (all at a worker), the new one
    // waits in the backlog until one is done. Those the workers have just
    // answered wait again first: they may not have been taken back yet.
    const bool full = open.load() >= opts.max_connections;
    if (full) {
      take_back();
      if (waiting.empty()) return set_accepting(false);
    }
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    const int fd =
        ::accept4(listener, reinterpret_cast<sockaddr*>(&from), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
      // Out of descriptors: the connection idle the longest goes, or the
      // next try waits a little (the listener stays readable).
      if (!waiting.empty()) {
        drop(waiting.front(), HttpStats::kEvicted);
        continue;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    if (fd < 0) return;  // EAGAIN: all taken
    if (full && !waiting.empty()) drop(waiting.front(), HttpStats::kEvicted);
    admit(fd, peer_key(from));
  }
}

int HttpLoop::State::counted(const std::string& peer) const {
  const auto p = peers.find(peer);
  if (p == peers.end()) return 0;
  int n = 0;
  for (const Conn* c : p->second) {
    const bool at_worker = c->events == 0;  // the reactor's own field: no race
    n += at_worker ? !c->finishing.load(std::memory_order_acquire)
                   : c->state != HttpStats::kLingering;
  }
  return n;
}

bool HttpLoop::State::make_room_for(const std::string& peer) {
  const auto oldest = std::find_if(waiting.begin(), waiting.end(), [&](const Conn* w) {
    return w->peer == peer && w->state != HttpStats::kLingering;
  });
  if (oldest == waiting.end()) return false;
  drop(*oldest, HttpStats::kEvicted);
  return true;
}

// A new connection, within its peer's cap. A connection that is done (its
// last reply wholly sent, or being finished by a worker) does not count: a
// client that closes one connection before it opens the next is never
// refused. At the cap, the peer's own connection that has waited the longest
// makes room; with none waiting (all at a worker), the new one is closed.
void HttpLoop::State::admit(int fd, std::string peer) {
  if (counted(peer) >= opts.max_connections_per_peer && !make_room_for(peer)) {
    ::close(fd);
    stats->closed(HttpStats::kEvicted);
    return;
  }
  const int on = 1;
  if (peer != "unix") (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  if (opts.send_buffer > 0)
    (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &opts.send_buffer, sizeof opts.send_buffer);
  auto* c = new Conn;
  c->fd = fd;
  c->accepted = Clock::now();
  c->io = opts.tls != nullptr ? http::tls_transport(opts.tls, fd) : http::plain_transport();
  if (c->io == nullptr) {
    ::close(fd);
    delete c;
    stats->closed(HttpStats::kTlsError);
    return;
  }
  c->peer = std::move(peer);
  peers[c->peer].push_back(c);
  open.fetch_add(1);
  stats->enter(HttpStats::kWaiting);
  wait_for(
      c, EPOLLIN | EPOLLRDHUP,
      c->io->ready() ? opts.head_timeout : std::min(opts.handshake_timeout, opts.head_timeout));
}

}  // namespace gym::exporter
