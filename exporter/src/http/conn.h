// One connection of the HTTP loop (loop.h), and the socket work on it that
// never blocks: reading a head, sending what the socket takes of a reply,
// draining, closing. Which thread may touch a Conn is its state's owner
// (loop.h); it moves between threads only under the loop's lock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "http/stats.h"
#include "http/transport.h"

namespace gym::exporter::http {

using Clock = std::chrono::steady_clock;

struct Conn {
  int fd = -1;
  std::unique_ptr<Transport> io;  // never null: plain or TLS (transport.h)
  std::string peer;               // the peer's address, raw bytes (the per-peer cap)
  // Set by a worker before the last send of a reply that closes the
  // connection, cleared when the reactor takes it back: the peer may have
  // all of it (and connect again) before the worker hands it back.
  std::atomic<bool> finishing{false};
  std::string in;  // received, not yet answered
  Clock::time_point accepted;
  Clock::time_point deadline;          // the reactor gives up waiting then
  std::list<Conn*>::iterator waiting;  // in the reactor's list while it waits
  uint32_t events = 0;                 // what epoll waits for (0: not in epoll)
  bool eof = false;                    // the peer sent all it will
  bool closing = false;                // answered: to close, after lingering
  bool failed = false;                 // a send or a stream failed: closed at once
  uint32_t requests = 0;               // answered on it
  HttpStats::State state = HttpStats::kWaiting;
  HttpStats::Close why = HttpStats::kPeerClosed;  // counted when it closes

  // The reply being sent (state serving, then sending): its head, then its
  // body, from `sent` on.
  std::string out_head, out_body;
  size_t sent = 0;
  Clock::time_point reply_deadline;  // all of it sent by then
  uint64_t unacked = 0;              // bytes the kernel held, at the last look
  Clock::time_point progress_at;     // when the peer was last seen to acknowledge

  size_t unsent() const { return out_head.size() + out_body.size() - sent; }
};

enum class Sent { kAll, kAgain, kFailed };
// Sends what the socket takes now of c's reply; `progress` is set when any
// byte went.
Sent send_some(Conn* c, bool* progress);
// Sends what is held of c's reply, then as much of `more` (not held: a
// streamed piece) as the socket takes now, without copying it. Returns the
// bytes of `more` sent, the rest to be held by the caller; `result` says
// whether all went. A transport that retries the same bytes (TLS) sends
// nothing here (returns 0, kAgain): all is held first.
size_t send_with(Conn* c, std::span<const std::string_view> more, Sent* result);
// Whether the peer acknowledged bytes of the reply since the last look
// (SIOCOUTQ fell): progress even when the socket reports no room.
bool acknowledged(Conn* c);
// One try at sending a small reply on a connection about to close.
void send_now(Conn* c, std::string_view data);
// Reads and discards what the peer has sent (up to 1 MiB now). Returns
// whether the peer may send more: false once it has closed, or failed.
bool drain(int fd);
// Closes the transport (TLS: with a close_notify when it can go now) and the
// socket; the Conn stays, with fd -1.
void release(Conn* c);

// The end of a complete request head in `in` (after its blank line, lines
// ended by CRLF or LF, mixed as they come), or 0. A whole first line that is
// no HTTP/1.x request line (HTTP/0.9, say) ends the head there: it is
// answered 400 at once rather than after the head deadline.
size_t head_end(const std::string& in);
const char* reason_of(int status);
// "HTTP/1.<minor> <status> <reason>\r\n": the one writer of a status line.
std::string status_line(int status, int minor = 1);
// A small reply for a request the loop refuses itself (it closes).
std::string refusal(int status);

}  // namespace gym::exporter::http
