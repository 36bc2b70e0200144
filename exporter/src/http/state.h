// The HTTP loop's state (loop.h), shared by the reactor (reactor.cc), the
// workers (worker.cc) and the loop's owner (loop.cc). Internal to the loop.
//
// Thread-safety: what is under "the reactor's own" is touched by the reactor
// thread only (and by the owner after joining it); the rest under `mu`.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "http/conn.h"
#include "http/listeners.h"
#include "http/loop.h"

namespace gym::exporter {

struct HttpLoop::State : std::enable_shared_from_this<HttpLoop::State> {
  using Conn = http::Conn;
  using Clock = http::Clock;

  Options opts;
  Handler handler;
  HttpStats* stats = nullptr;
  std::vector<http::Listener> listeners;
  int port = 0;  // the first TCP listener's
  int epfd = -1;
  int wake = -1;  // eventfd: stop, or connections handed back
  std::thread reactor;

  std::mutex mu;
  std::condition_variable work;  // ready, or stopping
  std::condition_variable gone;  // a worker exited
  std::deque<Conn*> ready;       // request heads complete, for the workers
  std::vector<Conn*> returned;   // served by a worker: back to the reactor
  int workers = 0;
  int idle_workers = 0;
  bool stopping = false;
  std::atomic<int> open{0};  // connections, wherever they are

  // The reactor's own.
  std::list<Conn*> waiting;                         // connections in epoll, oldest first
  std::map<std::string, std::vector<Conn*>> peers;  // open connections by peer address
  size_t sending_bytes = 0;                         // unsent bytes of replies it sends
  bool accepting = true;                            // the listeners are in epoll
  std::optional<Clock::time_point> stop_by;         // stopping: give up sending then
  // Closed during this round of events, deleted after it: a later event of
  // the same round may still name one.
  std::vector<Conn*> dropped;

  ~State();

  // epoll data: these tags for the eventfd and listener i (kListenTag + i,
  // below a page); a connection's pointer (never in the first page) for a
  // connection.
  static constexpr uint64_t kWakeTag = 1;
  static constexpr uint64_t kListenTag = 16;
  static constexpr size_t kMaxListeners = 64;

  // Moves c to state s, counted.
  void enter(Conn* c, HttpStats::State s) {
    stats->leave(c->state);
    stats->enter(s);
    c->state = s;
  }
  void wake_reactor() {
    const uint64_t one = 1;
    (void)!::write(wake, &one, sizeof one);
  }

  // reactor.cc
  void run();
  bool stop_round();
  void accept_new(int listener);
  void admit(int fd, std::string peer);
  // The peer's connections that count against its cap: not done (lingering
  // after its last reply, or at a worker finishing it).
  int counted(const std::string& peer) const;
  // Closes the peer's oldest waiting connection that counts, if any.
  bool make_room_for(const std::string& peer);
  void on_event(Conn* c);
  void read_head(Conn* c);
  void on_sending(Conn* c);
  void after_reply(Conn* c);
  void wait_for(Conn* c, uint32_t events, std::optional<Clock::duration> timeout = {});
  void unwait(Conn* c);
  void dispatch(Conn* c);
  void linger(Conn* c);
  void take_back();
  void set_accepting(bool on);
  void expire();
  void make_room_for_sending(const Conn* keep);
  // Closes c now, counted with its reason (the reactor's, or the owner's
  // once the reactor is gone).
  void drop(Conn* c, HttpStats::Close why);
  void close_now(Conn* c, HttpStats::Close why);

  // worker.cc
  static void work_loop(std::shared_ptr<State> self);
  void serve(Conn* c);
  bool answer(Conn* c);
  void reply_to(Conn* c, const HttpRequest& req);
  HttpReply run_handler(const HttpRequest& req);
  void stream_body(Conn* c, const HttpReply& reply);
  bool send_held(Conn* c);
  static void held_sent(Conn* c);
  static void forget_sent(Conn* c);
};

}  // namespace gym::exporter
