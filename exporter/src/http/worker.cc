// The workers: each runs the handler for one connection's request at a
// time, renders the reply and tries one send; what the socket does not take
// at once, the reactor sends (loop.h). A worker never waits on a peer.
#include <openssl/crypto.h>

#include <algorithm>
#include <cstdio>

#include "http/state.h"

namespace gym::exporter {

using http::Clock;
using http::Conn;

void HttpLoop::State::work_loop(std::shared_ptr<State> self) {
  std::unique_lock<std::mutex> lock(self->mu);
  for (;;) {
    if (self->ready.empty() && !self->stopping) {
      ++self->idle_workers;
      (void)self->work.wait_for(lock, self->opts.worker_idle,
                                [&] { return !self->ready.empty() || self->stopping; });
      --self->idle_workers;
    }
    if (self->ready.empty()) {
      // Leaving (idle too long, or stopping). This thread's OpenSSL state
      // is freed now, while the loop's owner waits for it: a worker is
      // detached, and left to its exit, OpenSSL's thread destructor takes a
      // global lock that OpenSSL's own atexit cleanup may already have freed
      // (ThreadSanitizer saw it once in a suite run: heap-use-after-free in
      // CRYPTO_THREAD_write_lock). A request that came meanwhile keeps it:
      // the reactor counted it as a worker and spawned none for it.
      lock.unlock();
      OPENSSL_thread_stop();
      lock.lock();
      if (self->ready.empty()) break;
      continue;
    }
    Conn* c = self->ready.front();
    self->ready.pop_front();
    lock.unlock();
    self->serve(c);
    lock.lock();
  }
  --self->workers;
  self->gone.notify_all();
}

// Answers the requests whose heads are here, then hands the connection back
// to the reactor: to send the rest of a reply, to linger, to wait for the
// next request, or (failed) to close.
void HttpLoop::State::serve(Conn* c) {
  enter(c, HttpStats::kServing);
  while (answer(c)) {
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    returned.push_back(c);
  }
  wake_reactor();
}

namespace {
// The status line and headers of `reply`: its length, or chunked.
std::string head_of(const HttpReply& reply, bool chunked, bool close, int minor) {
  return http::status_line(reply.status) + reply.headers +
         (chunked ? std::string("Transfer-Encoding: chunked\r\n")
                  : "Content-Length: " + std::to_string(reply.body.size()) + "\r\n") +
         (close        ? "Connection: close\r\n"
          : minor == 0 ? "Connection: keep-alive\r\n"  // as Go's server
                       : "") +
         "\r\n";
}
}  // namespace

// Answers the request at the head of c->in. Returns whether another one is
// here to answer now (its reply sent whole, the connection kept).
bool HttpLoop::State::answer(Conn* c) {
  const size_t end = http::head_end(c->in);
  HttpRequest req;
  const int bad =
      end > kMaxHead ? 431 : parse_request_head(std::string_view(c->in).substr(0, end), &req);
  c->in.erase(0, end);
  ++c->requests;
  c->sent = 0;
  c->reply_deadline = Clock::now() + opts.reply_timeout;
  if (bad != 0) {
    stats->refused(bad);
    c->out_head = http::refusal(bad);
    c->closing = true;
    c->why = HttpStats::kBadRequest;
  } else {
    reply_to(c, req);
  }
  if (c->closing) c->finishing.store(true, std::memory_order_release);  // its last send
  if (!send_held(c)) return false;  // the reactor sends the rest, or closes
  std::string().swap(c->out_body);
  return !c->closing && http::head_end(c->in) != 0;  // pipelined
}

void HttpLoop::State::reply_to(Conn* c, const HttpRequest& req) {
  // A body (none is expected) is skipped when it is all here; otherwise the
  // connection closes after the reply (the parser refused a length that is
  // not one number: 400 and close).
  bool close = c->eof || !req.keep_alive || req.transfer_encoding;
  if (req.content_length) {
    if (*req.content_length > c->in.size())
      close = true;
    else
      c->in.erase(0, size_t(*req.content_length));
  }
  HttpReply reply = run_handler(req);
  {
    std::lock_guard<std::mutex> lock(mu);
    close = close || stopping;
  }
  c->closing = close;
  if (close) c->why = HttpStats::kDone;
  const bool chunked = bool(reply.stream);
  c->out_head = head_of(reply, chunked, close, req.minor);
  if (chunked) return stream_body(c, reply);
  if (!reply.head_only && reply.body.size() < 4096)
    c->out_head += reply.body;  // one send
  else if (!reply.head_only)
    c->out_body = std::move(reply.body);
}

// The handler's reply; a streamed one rendered whole when it cannot be
// streamed (HEAD, HTTP/1.0).
HttpReply HttpLoop::State::run_handler(const HttpRequest& req) {
  try {
    HttpReply reply = handler(req);
    if (reply.stream && (reply.head_only || req.minor == 0)) {
      reply.stream([&reply](std::string_view piece) { reply.body.append(piece); });
      reply.stream = nullptr;
    }
    return reply;
  } catch (...) {  // out of memory, most likely: this request fails, not the exporter
    stats->refused(500);
    HttpReply failed;
    failed.status = 500;
    failed.headers = "Content-Type: text/plain; charset=utf-8\r\n";
    failed.body = "Internal Server Error\n";
    return failed;
  }
}

// Sends a streamed body as it is rendered: each piece framed as a chunk,
// appended to what is unsent, and one send tried; what the socket does not
// take waits for the reactor (the stream never waits on the peer). A stream
// that fails is a 500 before its first piece, and after it a reply cut
// short: closed without its last chunk.
void HttpLoop::State::stream_body(Conn* c, const HttpReply& reply) {
  bool started = false;
  const auto write = [&](std::string_view piece) {
    if (piece.empty() || c->failed) return;
    started = true;
    char size[24];
    const int n = std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
    const std::string_view chunk[] = {{size, size_t(n)}, piece, "\r\n"};
    // Sent from the piece itself as far as the socket takes it; the rest
    // held (a copy) for the reactor.
    http::Sent r;
    size_t skip = http::send_with(c, chunk, &r);
    if (r == http::Sent::kFailed) {
      c->failed = true;
      c->why = HttpStats::kPeerClosed;
      return;
    }
    if (r == http::Sent::kAll) return held_sent(c);
    for (std::string_view part : chunk) {
      if (skip < part.size()) c->out_body.append(part.substr(skip));
      skip -= std::min(skip, part.size());
    }
    if (c->io->retries_same_bytes())
      (void)send_held(c);  // it sends only what is held
    else
      forget_sent(c);
  };
  try {
    reply.stream(write);
    c->out_body += "0\r\n\r\n";
  } catch (...) {  // out of memory, most likely: this request fails, not the exporter
    stats->refused(500);
    c->why = HttpStats::kBadRequest;
    if (started) {
      c->failed = true;
      return;
    }
    c->out_head = http::refusal(500);
    c->out_body.clear();
    c->closing = true;
  }
}

// Sends what the socket takes now of c's reply. Returns whether all of it
// went.
bool HttpLoop::State::send_held(Conn* c) {
  if (c->failed) return false;
  bool moved = false;
  const http::Sent r = http::send_some(c, &moved);
  if (r == http::Sent::kAll) {
    held_sent(c);
    return true;
  }
  if (r == http::Sent::kFailed) {
    c->failed = true;
    c->why = HttpStats::kPeerClosed;
  } else {
    forget_sent(c);
  }
  return false;
}

// What went of the body held is dropped from the front once it is half of
// it (each byte moved once on average).
void HttpLoop::State::forget_sent(Conn* c) {
  if (c->sent <= c->out_head.size()) return;
  const size_t went = c->sent - c->out_head.size();
  if (2 * went < c->out_body.size()) return;
  c->out_body.erase(0, went);
  c->sent = c->out_head.size();
}

// All that was held of c's reply is sent: none is (its memory kept for the
// next piece).
void HttpLoop::State::held_sent(Conn* c) {
  c->out_head.clear();
  c->out_body.clear();
  c->sent = 0;
}

}  // namespace gym::exporter
