// The reactor: the one thread that waits on every connection (loop.h).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "http/state.h"

namespace gym::exporter {

using http::Clock;
using http::Conn;

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

void HttpLoop::State::close_now(Conn* c, HttpStats::Close why) {
  if (c->state == HttpStats::kSending) sending_bytes -= std::min(sending_bytes, c->unsent());
  stats->leave(c->state);
  stats->closed(why);
  if (auto p = peers.find(c->peer); p != peers.end()) {
    std::erase(p->second, c);
    if (p->second.empty()) peers.erase(p);
  }
  open.fetch_sub(1);
  http::release(c);
}

void HttpLoop::State::drop(Conn* c, HttpStats::Close why) {
  unwait(c);
  close_now(c, why);
  dropped.push_back(c);
}

void HttpLoop::State::linger(Conn* c) {
  c->io->finish();
  c->closing = true;
  enter(c, HttpStats::kLingering);
  (void)::shutdown(c->fd, SHUT_WR);
  wait_for(c, EPOLLIN | EPOLLRDHUP, Clock::duration(kLinger));
}

void HttpLoop::State::on_event(Conn* c) {
  if (c->fd < 0) return;  // closed earlier in this round
  if (c->state == HttpStats::kLingering) {
    if (!http::drain(c->fd)) drop(c, c->why);
    return;
  }
  if (c->state == HttpStats::kSending) return on_sending(c);
  if (!c->io->ready()) {
    switch (c->io->handshake(c->fd)) {
      case http::Transport::Step::kDone:
        c->deadline = c->accepted + opts.head_timeout;  // the head's clock goes on
        break;
      case http::Transport::Step::kWantRead:
        return wait_for(c, EPOLLIN | EPOLLRDHUP);
      case http::Transport::Step::kWantWrite:
        return wait_for(c, EPOLLOUT);
      case http::Transport::Step::kEnd:
        return drop(c, HttpStats::kPeerClosed);
      case http::Transport::Step::kRefused:
        c->why = HttpStats::kTlsError;
        return linger(c);
      case http::Transport::Step::kFailed:
        return drop(c, HttpStats::kTlsError);
    }
  }
  read_head(c);
}

void HttpLoop::State::read_head(Conn* c) {
  // Read what is there, up to one head's worth more than a head may be.
  const bool was_empty = c->in.empty();
  char buf[16384];
  for (;;) {
    if (c->in.size() > kMaxHead) break;
    http::Transport::Step step = http::Transport::Step::kFailed;
    const size_t n = c->io->read(c->fd, buf, sizeof buf, &step);
    if (n == 0) {
      if (step == http::Transport::Step::kWantRead) break;
      if (step == http::Transport::Step::kWantWrite) return wait_for(c, EPOLLOUT);
      if (step == http::Transport::Step::kEnd) c->eof = true;
      if (c->eof && http::head_end(c->in) != 0) break;  // answered, then closed
      return drop(c, HttpStats::kPeerClosed);           // closed, or broken
    }
    c->in.append(buf, n);
  }
  if (http::head_end(c->in) != 0) return dispatch(c);
  if (c->in.size() > kMaxHead) {
    http::send_now(c, http::refusal(431));
    stats->refused(431);
    c->why = HttpStats::kBadRequest;
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

// Sends what the socket takes of a reply the peer reads slowly. Progress is
// what the peer acknowledged (the socket's queue fell since the last look),
// never bytes the kernel took into its buffers: a send buffer autotuned
// larger takes more of a reply from a peer that reads nothing. The reply is
// given up write_timeout after the last progress, which a look every quarter
// of it dates (so within a quarter late).
void HttpLoop::State::on_sending(Conn* c) {
  const bool acked = http::acknowledged(c);  // before this send adds to the queue
  bool moved = false;
  const size_t before = c->unsent();
  const http::Sent r = http::send_some(c, &moved);
  sending_bytes -= std::min(sending_bytes, before - c->unsent());
  if (r == http::Sent::kFailed) return drop(c, HttpStats::kPeerClosed);
  if (r == http::Sent::kAll) return after_reply(c);
  const auto now = Clock::now();
  if (acked) c->progress_at = now;
  if (now - c->progress_at >= opts.write_timeout || now >= c->reply_deadline)
    return drop(c, HttpStats::kWriteTimeout);
  c->deadline = std::min(
      {c->progress_at + opts.write_timeout, now + opts.write_timeout / 4, c->reply_deadline});
  (void)http::acknowledged(c);  // the queue after this send, to tell progress from
  wait_for(c, EPOLLOUT);
}

// A reply is sent: the connection lingers (closing), serves the next
// request (pipelined, already here), or waits for one.
void HttpLoop::State::after_reply(Conn* c) {
  c->out_head.clear();
  std::string().swap(c->out_body);
  c->sent = 0;
  if (c->closing) return linger(c);
  if (http::head_end(c->in) != 0) return dispatch(c);
  enter(c, HttpStats::kWaiting);
  if (c->io->pending()) return read_head(c);
  wait_for(c, EPOLLIN | EPOLLRDHUP,
           c->in.empty() ? Clock::duration(opts.idle_timeout) : Clock::duration(opts.head_timeout));
}

void HttpLoop::State::dispatch(Conn* c) {
  unwait(c);
  enter(c, HttpStats::kReady);
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

// The connections the workers are done with.
void HttpLoop::State::take_back() {
  std::vector<Conn*> back;
  {
    std::lock_guard<std::mutex> lock(mu);
    back.swap(returned);
  }
  for (Conn* c : back) {
    // Back with the reactor: its state says whether it still counts. A peer
    // that connected again while it was being finished and is now over its
    // cap (the last send did not take it all) loses its oldest waiting one.
    c->finishing.store(false, std::memory_order_relaxed);
    if (c->failed) {
      drop(c, c->why);  // a send failed (peer_closed), or a stream (bad_request)
    } else if (c->unsent() > 0) {
      enter(c, HttpStats::kSending);
      sending_bytes += c->unsent();
      c->unacked = 0;
      (void)http::acknowledged(c);
      c->progress_at = Clock::now();
      wait_for(c, EPOLLOUT,
               std::min<Clock::duration>(opts.write_timeout / 4, c->reply_deadline - Clock::now()));
      make_room_for_sending(c);
    } else {
      after_reply(c);
    }
  }
  for (Conn* c : back)
    if (c->fd >= 0 && counted(c->peer) > opts.max_connections_per_peer)
      (void)make_room_for(c->peer);
}

// Over kMaxSending bytes of replies being sent: the oldest go (not `keep`).
void HttpLoop::State::make_room_for_sending(const Conn* keep) {
  for (auto it = waiting.begin(); sending_bytes > kMaxSending && it != waiting.end();) {
    Conn* c = *it++;
    if (c != keep && c->state == HttpStats::kSending) drop(c, HttpStats::kEvicted);
  }
}

void HttpLoop::State::expire() {
  const auto now = Clock::now();
  for (auto it = waiting.begin(); it != waiting.end();) {
    Conn* c = *it++;
    if (c->deadline > now) continue;
    if (c->state == HttpStats::kSending) {
      on_sending(c);
    } else if (c->state == HttpStats::kLingering) {
      drop(c, c->why);
    } else {
      const bool idle = c->io->ready() && c->in.empty() && c->requests > 0;
      drop(c, idle ? HttpStats::kIdleTimeout : HttpStats::kHeadTimeout);
    }
  }
}

// Whether the reactor is done. Stopping, it accepts no more and closes what
// waits for a request; it goes on sending replies and taking back what the
// workers finish, write_timeout at most.
bool HttpLoop::State::stop_round() {
  bool busy = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!stopping) return false;
    busy = workers > 0 || !ready.empty() || !returned.empty();
  }
  const auto now = Clock::now();
  if (!stop_by) {
    stop_by = now + opts.write_timeout;
    set_accepting(false);
  }
  bool left = false;
  for (auto it = waiting.begin(); it != waiting.end();) {
    Conn* c = *it++;
    if (c->state == HttpStats::kWaiting)
      drop(c, HttpStats::kShutdown);
    else
      left = true;
  }
  return now >= *stop_by || (!left && !busy);
}

void HttpLoop::State::run() {
  epoll_event events[64];
  auto last_expiry = Clock::now();
  while (!stop_round()) {
    const int n = epoll_wait(epfd, events, 64, 250);
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        uint64_t count;
        (void)!::read(wake, &count, sizeof count);
        take_back();
      } else if (tag >= kListenTag && tag < kListenTag + listeners.size()) {
        accept_new(listeners[tag - kListenTag].fd);
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
    // Room again (a connection closed): accept.
    if (!accepting && !stop_by && (open.load() < opts.max_connections || !waiting.empty()))
      set_accepting(true);
  }
  // Done: what still waits closes; what the workers still hold, their owner
  // closes (loop.cc).
  while (!waiting.empty()) drop(waiting.front(), HttpStats::kShutdown);
  for (Conn* c : dropped) delete c;
  dropped.clear();
}

}  // namespace gym::exporter
