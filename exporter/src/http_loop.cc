#include "http_loop.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <thread>

namespace gym::exporter {

using Clock = std::chrono::steady_clock;

// ---- connections ---------------------------------------------------------

namespace {

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

struct Conn {
  int fd = -1;
  SSL* ssl = nullptr;
  bool handshaken = false;
  bool peeked = false;  // TLS: the first byte was seen to start a handshake
  std::string in;       // received, not yet answered
  Clock::time_point deadline;
  std::list<Conn*>::iterator waiting;  // in the loop's list while it waits
  uint32_t events = 0;                 // what epoll waits for
  bool eof = false;                    // the peer sent all it will
  bool closing = false;                // answered, to close (after lingering)
  bool notified = false;               // TLS close_notify sent
};

// Reads and discards what the peer has sent (up to 1 MiB now). Returns
// whether the peer may send more: false once it has closed, or failed.
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

// One try at sending a small reply on a connection about to close (through
// TLS unless `raw`): the waiting thread never blocks on a peer.
void send_now(Conn* c, std::string_view data, bool raw = false) {
  if (c->ssl != nullptr && !raw) {
    ERR_clear_error();
    (void)SSL_write(c->ssl, data.data(), int(data.size()));
    ERR_clear_error();
  } else {
    (void)::send(c->fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

// Closes a connection's socket (a TLS one with a close_notify, if it can go
// now); the Conn itself stays, with fd -1.
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

void close_conn(Conn* c) {
  release(c);
  delete c;
}

// Waits until `fd` is ready for `events`, for the write timeout at most and
// not past `deadline`.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    const auto left = std::min<Clock::duration>(HttpLoop::kWriteTimeout, deadline - Clock::now());
    if (left <= Clock::duration::zero()) return false;
    const int n =
        ::poll(&p, 1, int(std::chrono::duration_cast<std::chrono::milliseconds>(left).count()) + 1);
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

// Writes all of `data`: blocking on poll, bounded by the write timeout for
// each step of progress and by `deadline` for all of it (a peer that reads a
// byte now and then does not keep a worker).
bool write_all(Conn* c, std::string_view data,
               Clock::time_point deadline = Clock::now() + HttpLoop::kReplyTimeout) {
  while (!data.empty()) {
    if (c->ssl != nullptr) {
      ERR_clear_error();
      const int n = SSL_write(c->ssl, data.data(), int(std::min<size_t>(data.size(), 1 << 20)));
      if (n > 0) {
        data.remove_prefix(size_t(n));
        continue;
      }
      const int e = SSL_get_error(c->ssl, n);
      if (e == SSL_ERROR_WANT_WRITE && wait_fd(c->fd, POLLOUT, deadline)) continue;
      if (e == SSL_ERROR_WANT_READ && wait_fd(c->fd, POLLIN, deadline)) continue;
      return false;
    }
    const ssize_t n = ::send(c->fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(size_t(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(c->fd, POLLOUT, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

// A small reply for a request the loop refuses itself.
std::string refusal(int status) {
  const std::string body = std::string(reason_of(status)) + "\n";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason_of(status) +
         "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

// The end of a complete request head in `in` (after its blank line, its
// lines ended by CRLF or LF, mixed as they come), or 0. A first line that is
// whole but no HTTP/1.x request line (HTTP/0.9, say) ends the head there: it
// is answered 400 at once rather than after the head deadline.
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

}  // namespace

struct HttpLoop::State : std::enable_shared_from_this<HttpLoop::State> {
  Options opts;
  Handler handler;
  int listener = -1;
  int port = 0;
  int epfd = -1;
  int wake = -1;  // eventfd: stop, or connections handed back
  std::thread loop;

  std::mutex mu;
  std::condition_variable work;  // ready, or stopping
  std::condition_variable gone;  // a worker exited
  std::deque<Conn*> ready;       // request heads complete, for the workers
  std::vector<Conn*> returned;   // answered, kept alive: back to the loop
  int workers = 0;
  int idle_workers = 0;
  bool stopping = false;
  std::atomic<int> open{0};  // connections, wherever they are

  // The loop thread's own.
  std::list<Conn*> waiting;  // connections in epoll, oldest first
  bool accepting = true;     // the listener is in epoll
  // Dropped during this round of events, deleted after it: a later event
  // of the same round may still name one.
  std::vector<Conn*> dropped;

  ~State() {
    if (listener >= 0) ::close(listener);
    if (epfd >= 0) ::close(epfd);
    if (wake >= 0) ::close(wake);
    if (opts.tls != nullptr) SSL_CTX_free(opts.tls);
  }

  // epoll data: these tags for the eventfd and the listener; a connection's
  // pointer (aligned, so never either) for a connection.
  static constexpr uint64_t kWakeTag = 1;
  static constexpr uint64_t kListenTag = 3;

  void run();
  void accept_new();
  void on_event(Conn* c);
  // Waits for `events` on `c`; `timeout` from now when given, else the
  // deadline it has.
  void wait_for(Conn* c, uint32_t events, std::optional<Clock::duration> timeout = {});
  void unwait(Conn* c);
  void dispatch(Conn* c);
  void drop(Conn* c) {
    unwait(c);
    open.fetch_sub(1);
    release(c);
    dropped.push_back(c);
  }
  // A closing connection's lingering close: its write side is shut (after a
  // TLS close_notify), and what the peer still sends is read and dropped
  // until it closes too or kLinger passes. Closing a socket with unread
  // data sends a reset, which can overtake the reply.
  void linger(Conn* c) {
    if (c->ssl != nullptr && c->handshaken && !c->notified) (void)SSL_shutdown(c->ssl);
    ERR_clear_error();
    c->notified = true;
    c->closing = true;
    (void)::shutdown(c->fd, SHUT_WR);
    wait_for(c, EPOLLIN | EPOLLRDHUP, Clock::duration(kLinger));
  }
  void take_back();
  // Takes the listener in or out of epoll: at max_connections with every
  // connection being answered, new ones wait in the kernel's backlog.
  void set_accepting(bool on) {
    if (on == accepting) return;
    epoll_event ev{};
    ev.events = on ? uint32_t{EPOLLIN} : 0u;
    ev.data.u64 = kListenTag;
    (void)epoll_ctl(epfd, EPOLL_CTL_MOD, listener, &ev);
    accepting = on;
  }
  void expire();
  static void work_loop(std::shared_ptr<State> self);
  void serve(Conn* c);
};

void HttpLoop::State::wait_for(Conn* c, uint32_t events, std::optional<Clock::duration> timeout) {
  if (timeout) c->deadline = Clock::now() + *timeout;
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = c;
  if (c->events == 0) {
    (void)epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev);
    waiting.push_back(c);
    c->waiting = std::prev(waiting.end());
  } else if (c->events != events) {
    (void)epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
  }
  c->events = events;
}

void HttpLoop::State::unwait(Conn* c) {
  if (c->events == 0) return;
  (void)epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, nullptr);
  waiting.erase(c->waiting);
  c->events = 0;
}

void HttpLoop::State::accept_new() {
  for (;;) {
    // At max_connections, the connection that has waited the longest (idle,
    // or sending its head slowly) makes room for a new one. With none
    // waiting (all being answered), the new one waits to be accepted until
    // one is done. Those the workers have just answered wait again first:
    // they may not have been taken back yet.
    const bool full = open.load() >= opts.max_connections;
    if (full) {
      take_back();
      if (waiting.empty()) return set_accepting(false);
    }
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
      // Out of descriptors: the connection idle the longest goes, or the
      // next try waits a little (the listener stays readable).
      if (!waiting.empty()) {
        drop(waiting.front());
        continue;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    if (fd < 0) return;  // EAGAIN: all taken
    if (full && !waiting.empty()) drop(waiting.front());
    const int on = 1;
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    auto* c = new Conn;
    c->fd = fd;
    if (opts.tls != nullptr) {
      c->ssl = SSL_new(opts.tls);
      if (c->ssl == nullptr || SSL_set_fd(c->ssl, fd) != 1) {
        close_conn(c);
        continue;
      }
    } else {
      c->handshaken = true;
    }
    open.fetch_add(1);
    wait_for(c, EPOLLIN | EPOLLRDHUP, opts.head_timeout);
  }
}

void HttpLoop::State::on_event(Conn* c) {
  if (c->fd < 0) return;  // dropped earlier in this round
  if (c->closing) {
    if (!drain(c->fd)) drop(c);
    return;
  }
  if (!c->handshaken) {
    if (!c->peeked) {
      // Before the handshake: what is not a TLS record is not served. Plain
      // HTTP gets a 400 saying why (as Go's servers, and so node_exporter,
      // answer); anything else is closed without a word.
      unsigned char first = 0;
      const ssize_t n = ::recv(c->fd, &first, 1, MSG_PEEK);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
      if (n <= 0) return drop(c);
      if (first != 0x16) {
        if (first >= 'A' && first <= 'Z')
          send_now(c,
                   "HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                   "Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n",
                   true);
        return linger(c);
      }
      c->peeked = true;  // OpenSSL reads the rest, however it is split
    }
    ERR_clear_error();
    const int r = SSL_accept(c->ssl);
    if (r != 1) {
      const int e = SSL_get_error(c->ssl, r);
      ERR_clear_error();
      if (e == SSL_ERROR_WANT_READ) return wait_for(c, EPOLLIN | EPOLLRDHUP);
      if (e == SSL_ERROR_WANT_WRITE) return wait_for(c, EPOLLOUT);
      return drop(c);
    }
    c->handshaken = true;
  }
  // Read what is there, up to one head's worth more than a head may be.
  const bool was_empty = c->in.empty();
  char buf[16384];
  for (;;) {
    if (c->in.size() > kMaxHead) break;
    ssize_t n;
    if (c->ssl != nullptr) {
      ERR_clear_error();
      n = SSL_read(c->ssl, buf, sizeof buf);
      if (n <= 0) {
        const int e = SSL_get_error(c->ssl, int(n));
        ERR_clear_error();
        if (e == SSL_ERROR_WANT_READ) break;
        if (e == SSL_ERROR_WANT_WRITE) return wait_for(c, EPOLLOUT);
        if (e == SSL_ERROR_ZERO_RETURN) c->eof = true;
        if (c->eof && head_end(c->in) != 0) break;  // answered, then closed
        return drop(c);                             // closed, or broken
      }
    } else {
      n = ::recv(c->fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n == 0) c->eof = true;
      if (n == 0 && head_end(c->in) != 0) break;  // answered, then closed
      if (n <= 0) return drop(c);
    }
    c->in.append(buf, size_t(n));
  }
  if (head_end(c->in) != 0) return dispatch(c);
  if (c->in.size() > kMaxHead) {
    send_now(c, refusal(431));
    return linger(c);
  }
  // The head's clock starts at its first byte; until then, the idle one.
  if (was_empty && !c->in.empty() && c->events != 0) {
    wait_for(c, EPOLLIN | EPOLLRDHUP, Clock::duration(opts.head_timeout));
  } else {
    wait_for(c, EPOLLIN | EPOLLRDHUP,
             c->events == 0 ? std::optional<Clock::duration>(opts.head_timeout) : std::nullopt);
  }
}

void HttpLoop::State::dispatch(Conn* c) {
  unwait(c);
  bool spawn = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    ready.push_back(c);
    if (idle_workers < int(ready.size()) && workers < kMaxWorkers) {
      ++workers;
      spawn = true;
    }
  }
  if (spawn) {
    std::thread(work_loop, shared_from_this()).detach();
  } else {
    work.notify_one();
  }
}

void HttpLoop::State::take_back() {
  std::vector<Conn*> back;
  {
    std::lock_guard<std::mutex> lock(mu);
    back.swap(returned);
  }
  for (Conn* c : back) {
    if (c->closing) {
      linger(c);  // answered; the worker asked for the connection to close
    } else if (head_end(c->in) != 0) {
      dispatch(c);  // a pipelined request, already here
    } else if (c->ssl != nullptr && SSL_pending(c->ssl) > 0) {
      on_event(c);
    } else {
      wait_for(
          c, EPOLLIN | EPOLLRDHUP,
          c->in.empty() ? Clock::duration(opts.idle_timeout) : Clock::duration(opts.head_timeout));
    }
  }
}

void HttpLoop::State::expire() {
  const auto now = Clock::now();
  for (auto it = waiting.begin(); it != waiting.end();) {
    Conn* c = *it++;
    if (c->deadline <= now) drop(c);
  }
}

void HttpLoop::State::run() {
  epoll_event events[64];
  auto last_expiry = Clock::now();
  for (;;) {
    const int n = epoll_wait(epfd, events, 64, 250);
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) break;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        uint64_t count;
        (void)!::read(wake, &count, sizeof count);
        take_back();
      } else if (tag == kListenTag) {
        accept_new();
      } else {
        on_event(static_cast<Conn*>(events[i].data.ptr));
      }
    }
    if (Clock::now() - last_expiry >= std::chrono::milliseconds(250)) {
      expire();
      last_expiry = Clock::now();
    }
    for (Conn* c : dropped) delete c;
    dropped.clear();
    // Room again (a connection closed here or by a worker): accept.
    if (!accepting && (open.load() < opts.max_connections || !waiting.empty())) set_accepting(true);
  }
  // Stopping: the waiting connections close; those being answered close
  // when their worker is done.
  while (!waiting.empty()) drop(waiting.front());
  for (Conn* c : dropped) delete c;
  dropped.clear();
  std::vector<Conn*> back;
  {
    std::lock_guard<std::mutex> lock(mu);
    back.swap(returned);
  }
  for (Conn* c : back) {
    open.fetch_sub(1);
    close_conn(c);
  }
}

void HttpLoop::State::serve(Conn* c) {
  bool keep = false;  // kept alive: back to wait for the next request
  for (;;) {
    const size_t end = head_end(c->in);
    HttpRequest req;
    const int bad =
        end > kMaxHead ? 431 : parse_request_head(std::string_view(c->in).substr(0, end), &req);
    c->in.erase(0, end);
    bool close = c->eof;
    if (bad != 0) {
      c->closing = write_all(c, refusal(bad));
      break;
    }
    // A body (none is expected) is skipped when it is all here; otherwise
    // the connection closes after the reply (the parser refused a length
    // that is not one number: 400 and close).
    close = close || !req.keep_alive || req.transfer_encoding;
    if (req.content_length) {
      if (*req.content_length > c->in.size())
        close = true;
      else
        c->in.erase(0, size_t(*req.content_length));
    }
    HttpReply reply;
    try {
      reply = handler(req);
    } catch (...) {  // out of memory, most likely: this request fails, not the exporter
      reply =
          HttpReply{500, "Content-Type: text/plain; charset=utf-8\r\n", "Internal Server Error\n"};
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      close = close || stopping;
    }
    std::string head = "HTTP/1.1 " + std::to_string(reply.status) + " " + reason_of(reply.status) +
                       "\r\n" + reply.headers +
                       "Content-Length: " + std::to_string(reply.body.size()) + "\r\n" +
                       (close            ? "Connection: close\r\n"
                        : req.minor == 0 ? "Connection: keep-alive\r\n"  // as Go's server
                                         : "") +
                       "\r\n";
    if (!reply.head_only && reply.body.size() < 4096) {
      head += reply.body;  // one write
      reply.body.clear();
    }
    const auto deadline = Clock::now() + kReplyTimeout;
    if (!write_all(c, head, deadline) || (!reply.head_only && !write_all(c, reply.body, deadline)))
      break;  // the peer is gone, or too slow: closed at once
    if (close) {
      c->closing = true;
      break;
    }
    if (head_end(c->in) != 0) continue;  // pipelined
    keep = true;
    break;
  }
  // Back to the waiting thread: to wait for the next request, or (closing)
  // for a lingering close. A connection whose reply failed closes now.
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!stopping && (keep || c->closing)) {
      returned.push_back(c);
      const uint64_t one = 1;
      (void)!::write(wake, &one, sizeof one);
      return;
    }
  }
  open.fetch_sub(1);
  close_conn(c);
  const uint64_t one = 1;  // a listener paused at max_connections resumes
  (void)!::write(wake, &one, sizeof one);
}

void HttpLoop::State::work_loop(std::shared_ptr<State> self) {
  std::unique_lock<std::mutex> lock(self->mu);
  for (;;) {
    if (self->ready.empty() && !self->stopping) {
      ++self->idle_workers;
      const bool woke = self->work.wait_for(lock, self->opts.worker_idle,
                                            [&] { return !self->ready.empty() || self->stopping; });
      --self->idle_workers;
      if (!woke) break;  // idle too long: retire
    }
    if (self->ready.empty()) break;  // stopping
    Conn* c = self->ready.front();
    self->ready.pop_front();
    lock.unlock();
    self->serve(c);
    lock.lock();
  }
  --self->workers;
  self->gone.notify_all();
}

// ---- start and stop ------------------------------------------------------

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
  state->loop = std::thread([s = state.get()] { s->run(); });
  return loop;
}

HttpLoop::~HttpLoop() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stopping = true;
  }
  state_->work.notify_all();
  const uint64_t one = 1;
  (void)!::write(state_->wake, &one, sizeof one);
  state_->loop.join();
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->gone.wait(lock, [&] { return state_->workers == 0; });
  // Nothing waits now; what the workers left ready is closed here.
  for (Conn* c : state_->ready) close_conn(c);
  state_->ready.clear();
}

int HttpLoop::port() const {
  return state_->port;
}

int HttpLoop::workers() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->workers;
}

}  // namespace gym::exporter
