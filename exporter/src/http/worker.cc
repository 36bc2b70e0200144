// The workers: each runs the handler for one connection's request at a
// time, renders the reply and tries one send; what the socket does not take
// at once, the reactor sends (loop.h). A worker never waits on a peer.
#include <algorithm>

#include "http/state.h"

namespace gym::exporter {

using http::Clock;
using http::Conn;

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

// Answers the request at the head of c->in. Returns whether another one is
// here to answer now (its reply sent whole, the connection kept).
bool HttpLoop::State::answer(Conn* c) {
  const size_t end = http::head_end(c->in);
  HttpRequest req;
  const int bad =
      end > kMaxHead ? 431 : parse_request_head(std::string_view(c->in).substr(0, end), &req);
  c->in.erase(0, end);
  HttpReply reply;
  bool close = c->eof;
  if (bad != 0) {
    stats->refused(bad);
    c->out_head = http::refusal(bad);
    close = true;
    c->why = HttpStats::kBadRequest;
  } else {
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
    try {
      reply = handler(req);
    } catch (...) {  // out of memory, most likely: this request fails, not the exporter
      stats->refused(500);
      reply =
          HttpReply{500, "Content-Type: text/plain; charset=utf-8\r\n", "Internal Server Error\n"};
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      close = close || stopping;
    }
    c->out_head = "HTTP/1.1 " + std::to_string(reply.status) + " " + http::reason_of(reply.status) +
                  "\r\n" + reply.headers + "Content-Length: " + std::to_string(reply.body.size()) +
                  "\r\n" +
                  (close            ? "Connection: close\r\n"
                   : req.minor == 0 ? "Connection: keep-alive\r\n"  // as Go's server
                                    : "") +
                  "\r\n";
    if (!reply.head_only && reply.body.size() < 4096)
      c->out_head += reply.body;  // one send
    else if (!reply.head_only)
      c->out_body = std::move(reply.body);
    if (close) c->why = HttpStats::kDone;
  }
  ++c->requests;
  c->closing = close;
  c->sent = 0;
  c->reply_deadline = Clock::now() + opts.reply_timeout;
  bool moved = false;
  const http::Sent r = http::send_some(c, &moved);
  if (r == http::Sent::kFailed) c->failed = true;
  if (r != http::Sent::kAll) return false;  // the reactor sends the rest, or closes
  c->out_head.clear();
  std::string().swap(c->out_body);
  c->sent = 0;
  return !close && http::head_end(c->in) != 0;  // pipelined
}

}  // namespace gym::exporter
