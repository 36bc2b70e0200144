// Starting and stopping the HTTP loop (loop.h): the listening socket, the
// reactor thread, and what is left when it stops.
#include "http/loop.h"

#include <netdb.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "http/state.h"

namespace gym::exporter {

HttpStats& HttpStats::process() {
  static auto* stats = new HttpStats();
  return *stats;
}

HttpLoop::State::~State() {
  if (listener >= 0) ::close(listener);
  if (epfd >= 0) ::close(epfd);
  if (wake >= 0) ::close(wake);
  if (opts.tls != nullptr) SSL_CTX_free(opts.tls);
}

namespace {

std::pair<std::string, std::string> split_address(const std::string& address) {
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos) return {"", address};
    const size_t colon = address.find(':', close);
    return {address.substr(1, close - 1),
            colon == std::string::npos ? "" : address.substr(colon + 1)};
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return {"", address};
  return {address.substr(0, colon), address.substr(colon + 1)};
}

// A listening socket on the first address of `address`, or -1 with a reason.
int listen_on(const std::string& address, int* port, std::string* error) {
  const auto [host, service] = split_address(address);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int e =
          ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      e != 0 || found == nullptr) {
    *error = std::string("cannot resolve it: ") + ::gai_strerror(e);
    return -1;
  }
  const addrinfo& a = *found;
  int fd = ::socket(a.ai_family, a.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a.ai_protocol);
  const int on = 1;
  if (fd >= 0) (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (fd < 0 || ::bind(fd, a.ai_addr, a.ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
    std::string why = std::strerror(errno);
    if (!why.empty()) why[0] = char(std::tolower(static_cast<unsigned char>(why[0])));
    *error = why;
    if (fd >= 0) ::close(fd);
    ::freeaddrinfo(found);
    return -1;
  }
  ::freeaddrinfo(found);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0)
    *port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

}  // namespace

std::unique_ptr<HttpLoop> HttpLoop::start(Options options, Handler handler, std::string* error) {
  // A peer that hangs up mid-reply must not kill the exporter (OpenSSL
  // writes with write(), which raises SIGPIPE).
  ::signal(SIGPIPE, SIG_IGN);
  auto state = std::make_shared<State>();
  if (options.max_connections_per_peer <= 0)
    options.max_connections_per_peer = std::max(1, options.max_connections / 4);
  state->stats = options.stats != nullptr ? options.stats : &HttpStats::process();
  state->opts = options;
  state->handler = std::move(handler);
  int port = 0;
  const int fd = listen_on(options.listen_address, &port, error);
  if (fd < 0) return nullptr;
  state->listener = fd;
  state->port = port;
  state->epfd = ::epoll_create1(EPOLL_CLOEXEC);
  state->wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (state->epfd < 0 || state->wake < 0) {
    *error = std::string("cannot wait for connections: ") + std::strerror(errno);
    return nullptr;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = State::kWakeTag;
  (void)epoll_ctl(state->epfd, EPOLL_CTL_ADD, state->wake, &ev);
  ev.data.u64 = State::kListenTag;
  (void)epoll_ctl(state->epfd, EPOLL_CTL_ADD, state->listener, &ev);
  std::unique_ptr<HttpLoop> loop(new HttpLoop);
  loop->state_ = state;
  state->reactor = std::thread([s = state.get()] { s->run(); });
  return loop;
}

HttpLoop::~HttpLoop() {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stopping = true;
  }
  s.work.notify_all();
  s.wake_reactor();
  s.reactor.join();
  std::unique_lock<std::mutex> lock(s.mu);
  s.gone.wait(lock, [&] { return s.workers == 0; });
  // The reactor is gone and no worker is left: what they still held closes.
  for (http::Conn* c : s.ready) {
    s.close_now(c, HttpStats::kShutdown);
    delete c;
  }
  for (http::Conn* c : s.returned) {
    s.close_now(c, HttpStats::kShutdown);
    delete c;
  }
  s.ready.clear();
  s.returned.clear();
}

int HttpLoop::port() const {
  return state_->port;
}

int HttpLoop::workers() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->workers;
}

}  // namespace gym::exporter
