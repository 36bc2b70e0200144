// Starting and stopping the HTTP loop (loop.h): its listeners, the reactor
// thread, and what is left when it stops.
#include "http/loop.h"

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
  for (http::Listener& l : listeners) http::close_listener(l);
  if (epfd >= 0) ::close(epfd);
  if (wake >= 0) ::close(wake);
  if (opts.tls != nullptr) SSL_CTX_free(opts.tls);
}

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
  const http::ListenOptions listen{options.listen_addresses, options.systemd_socket,
                                   options.unix_mode};
  if (!http::open_listeners(listen, state->listeners, error)) return nullptr;
  if (state->listeners.size() > State::kMaxListeners) {
    *error = "more than " + std::to_string(State::kMaxListeners) + " listen addresses";
    return nullptr;
  }
  for (const http::Listener& l : state->listeners)
    if (state->port == 0) state->port = l.port;
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
  for (size_t i = 0; i < state->listeners.size(); ++i) {
    ev.data.u64 = State::kListenTag + i;
    (void)epoll_ctl(state->epfd, EPOLL_CTL_ADD, state->listeners[i].fd, &ev);
  }
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

std::vector<std::string> HttpLoop::addresses() const {
  std::vector<std::string> out;
  for (const http::Listener& l : state_->listeners) out.push_back(l.address);
  return out;
}

int HttpLoop::workers() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->workers;
}

}  // namespace gym::exporter
