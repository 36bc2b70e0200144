// The exporter's connections: one thread waits on every connection (epoll)
// until a whole request head has arrived, and only then hands it to a worker
// thread, made when one is needed and retired when idle. So an idle
// keep-alive connection, or one that sends half a request and stops, costs a
// descriptor and a small buffer, never a thread: the exporter keeps a few
// threads at idle and still answers a scrape beside hundreds of such
// connections. TLS (OpenSSL) is done here too: the handshake and the request
// head in the waiting thread, without blocking it.
//
// Limits: a request head over 16 KiB gets 431; one not complete within the
// head timeout (10 s) is closed, as is a kept-alive connection idle for the
// idle timeout (60 s); at max_connections, a new connection closes the one
// that has waited the longest (or, when all are being answered, waits in the
// kernel's backlog until one is done). A reply that makes no progress for
// kWriteTimeout, or is not sent within kReplyTimeout, is abandoned; one that
// closes its connection is followed by a lingering close (kLinger). At most kMaxWorkers requests
// are answered at once; more wait, in order, for a worker.
//
// Thread-safety: start() and the destructor from one thread; the handler is
// called from any worker, concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http_request.h"

struct ssl_ctx_st;

namespace gym::exporter {

// A reply: the status line and headers (without Content-Length and
// Connection, which the loop adds), and the body.
struct HttpReply {
  int status = 200;
  std::string headers;  // "Name: value\r\n" lines
  std::string body;
  bool head_only = false;  // HEAD: Content-Length of body, no body sent
};

class HttpLoop {
 public:
  static constexpr auto kWriteTimeout = std::chrono::seconds(10);  // per step of progress
  static constexpr auto kReplyTimeout = std::chrono::seconds(60);  // a whole reply
  // After a reply that closes its connection, what the peer still sends is
  // read and dropped for this long at most, then the connection closes.
  static constexpr auto kLinger = std::chrono::seconds(1);
  static constexpr size_t kMaxHead = 16384;
  static constexpr int kMaxWorkers = 8;

  using Handler = std::function<HttpReply(const HttpRequest&)>;
  struct Options {
    std::string listen_address = ":9478";  // [host]:port; port 0 picks a free one
    int max_connections = 1024;
    ssl_ctx_st* tls = nullptr;  // taken over (freed by the loop); null: plain HTTP
    // A request head must be complete this long after its first byte (or,
    // on a new connection, after the connection).
    std::chrono::milliseconds head_timeout{10000};
    // A kept-alive connection may wait this long for its next request.
    std::chrono::milliseconds idle_timeout{60000};
    // A worker with nothing to do this long exits.
    std::chrono::milliseconds worker_idle{5000};
  };
  // Listens and starts the waiting thread, or returns nullptr with a reason.
  static std::unique_ptr<HttpLoop> start(Options options, Handler handler, std::string* error);
  // Stops accepting, closes idle connections, waits for the replies in
  // progress (each bounded by kWriteTimeout).
  ~HttpLoop();
  int port() const;
  // Worker threads alive now (for tests).
  int workers() const;

  struct State;  // the loop's state, shared with its threads

 private:
  HttpLoop() = default;
  std::shared_ptr<State> state_;
};

}  // namespace gym::exporter
