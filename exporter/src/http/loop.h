// The exporter's connections. One thread, the reactor, waits on every
// connection (epoll) and does all the waiting a peer can make us do: for a
// TLS handshake, a request head, the next request of a kept-alive
// connection, the sending of a reply the peer reads slowly, a lingering
// close. Worker threads (made when needed, retired when idle) only run the
// handler and render the reply. So an idle, half-sent or slowly read
// connection costs a descriptor and its buffers, never a thread: eight
// workers answer every scrape beside hundreds of such connections.
//
// The life of a connection (HttpStats::State), and who owns it:
//   waiting    the reactor, in epoll: a TLS handshake (handshake_timeout
//              from the connection, inside the head deadline), a request
//              head (head_timeout from its first byte), or the next request
//              of a kept-alive connection (idle_timeout).
//   ready      the queue under the lock: a whole head, for the next worker.
//   serving    one worker: the handler runs, the reply is rendered and one
//              send tried (a streamed reply: one send a piece as it is
//              rendered). Pipelined requests already here are served in turn.
//   sending    the reactor: what the socket did not take at once is sent as
//              the peer reads. Progress is the bytes the peer acknowledged
//              (the socket's queue fell), looked at on each event and every
//              quarter of write_timeout, never bytes the kernel took into
//              its buffers (an autotuned send buffer takes more from a peer
//              that reads nothing): write_timeout after the last progress
//              (a quarter later at most), or reply_timeout in all, closes it.
//   lingering  the reactor: after a reply that closes the connection, the
//              write side is shut and what the peer still sends is read and
//              dropped, kLinger at most (closing over unread data sends a
//              reset, which can overtake the reply).
//   closed     by the reactor (or, when the loop stops, by its owner), with
//              a reason (HttpStats::Close).
// Sent, a kept-alive reply's connection waits again (or is ready at once
// with a pipelined head); a closing one lingers.
//
// Limits: a head over kMaxHead gets 431. At max_connections, a new
// connection closes the one that has waited the longest in the reactor (or,
// with all of them at a worker, waits in the kernel's backlog). One peer
// address holds max_connections_per_peer at most, counting connections that
// are not done (a connection lingering after its last reply, or at a worker
// sending it, is done): beyond, its own oldest waiting connection makes room. Replies being sent
// hold kMaxSending bytes at most: beyond, the oldest is closed. At most kMaxWorkers requests are
// answered at once; more wait, in order, for a worker.
//
// Thread-safety: start() and the destructor from one thread; the handler is
// called from any worker, concurrently.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "http/request.h"
#include "http/stats.h"

struct ssl_ctx_st;

namespace gym::exporter {

// A reply: the status line and headers (without Content-Length,
// Transfer-Encoding and Connection, which the loop adds), and the body.
struct HttpReply {
  int status = 200;
  std::string headers;  // "Name: value\r\n" lines
  std::string body;
  bool head_only = false;  // HEAD: Content-Length of body, no body sent
  // Or a body rendered as it is sent: called once, by the worker, with a
  // writer for its pieces. To an HTTP/1.1 GET each piece is sent as it
  // comes (chunked), what the socket does not take at once queued for the
  // reactor: the body is never held whole unless its reader is slow, and
  // the stream never waits on the socket. For HEAD and HTTP/1.0 it is
  // rendered into `body` first. If it throws once pieces are sent, the
  // connection closes without the last chunk: the reply is cut short, never
  // taken for whole.
  using Writer = std::function<void(std::string_view)>;
  std::function<void(const Writer&)> stream;
};

class HttpLoop {
 public:
  static constexpr auto kLinger = std::chrono::seconds(1);
  static constexpr size_t kMaxHead = 16384;
  static constexpr int kMaxWorkers = 8;
  // Bytes of replies the reactor holds for slow readers, in all.
  static constexpr size_t kMaxSending = size_t{256} << 20;

  using Handler = std::function<HttpReply(const HttpRequest&)>;
  struct Options {
    // "[host]:port" (port 0 picks a free one) or "unix:/path" (made with
    // unix_mode), each accepted on; or, with systemd_socket, the sockets
    // systemd passed (listeners.h).
    std::vector<std::string> listen_addresses{":9478"};
    bool systemd_socket = false;
    mode_t unix_mode = 0660;
    int max_connections = 1024;
    // Connections of one peer address at most; 0: a quarter of
    // max_connections (at least 1).
    int max_connections_per_peer = 0;
    ssl_ctx_st* tls = nullptr;  // taken over (freed by the loop); null: plain HTTP
    // A TLS handshake must be done this long after the connection (and
    // within the head timeout).
    std::chrono::milliseconds handshake_timeout{5000};
    // A request head must be complete this long after its first byte (or,
    // on a new connection, after the connection).
    std::chrono::milliseconds head_timeout{10000};
    // A kept-alive connection may wait this long for its next request.
    std::chrono::milliseconds idle_timeout{60000};
    // A reply being sent is given up after this long without progress, or
    // after reply_timeout in all.
    std::chrono::milliseconds write_timeout{10000};
    std::chrono::milliseconds reply_timeout{60000};
    // SO_SNDBUF of each connection; 0: the kernel's, autotuned (up to
    // net.ipv4.tcp_wmem's 4 MiB, which takes most replies whole).
    int send_buffer = 0;
    // A worker with nothing to do this long exits.
    std::chrono::milliseconds worker_idle{5000};
    HttpStats* stats = nullptr;  // where it counts; null: HttpStats::process()
  };
  // Listens and starts the reactor, or returns nullptr with a reason.
  static std::unique_ptr<HttpLoop> start(Options options, Handler handler, std::string* error);
  // Stops accepting, closes the waiting connections, waits for the workers
  // (each handler call, then no more).
  ~HttpLoop();
  // The first TCP listener's port (0: none).
  int port() const;
  // What it listens on: the addresses, or "systemd:FD" for a passed socket.
  std::vector<std::string> addresses() const;
  // Worker threads alive now (for tests).
  int workers() const;

  struct State;  // the loop's state, shared with its threads

 private:
  HttpLoop() = default;
  std::shared_ptr<State> state_;
};

}  // namespace gym::exporter
