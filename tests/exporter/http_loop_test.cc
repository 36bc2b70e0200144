// The HTTP loop (http/loop.h) on real sockets: keep-alive and pipelining,
// HTTP/1.0, the limits (head size, head and idle timeouts, connections at
// once), workers made on demand and retired, and that idle connections hold
// no thread. The parsers alone are in http_test.cc.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "http/loop.h"
#include "http_client.h"
#include "test_support.h"

namespace gym::exporter {
namespace {

using namespace std::chrono_literals;
using testing::connect_loopback;

// A loop on a free loopback port whose handler answers the path, counts
// requests, and throws for /throw.
struct Loop {
  std::atomic<int> requests{0};
  std::unique_ptr<HttpLoop> loop;
  explicit Loop(HttpLoop::Options o = {}) {
    o.listen_addresses = {"127.0.0.1:0"};
    std::string error;
    loop = HttpLoop::start(
        o,
        [this](const HttpRequest& r) {
          ++requests;
          if (r.path == "/throw") throw std::runtime_error("no");
          if (r.path == "/slow") std::this_thread::sleep_for(300ms);
          HttpReply reply;
          reply.headers = "Content-Type: text/plain\r\n";
          reply.body = "path " + r.path + " query " + r.query + "\n";
          reply.head_only = r.method == "HEAD";
          return reply;
        },
        &error);
    EXPECT_TRUE(loop) << error;
  }
  int port() const { return loop->port(); }
};

void send_all(int fd, const std::string& s) {
  ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), ssize_t(s.size()));
}

// Reads replies off `fd` until `count` whole ones (by Content-Length) are
// in, the peer closes, or 5 s pass. Returns the raw bytes.
std::string read_replies(int fd, int count, bool* closed = nullptr) {
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string raw;
  auto whole = [&] {
    int n = 0;
    size_t at = 0;
    for (;;) {
      const size_t end = raw.find("\r\n\r\n", at);
      if (end == std::string::npos) return n;
      const size_t cl = raw.find("Content-Length: ", at);
      if (cl == std::string::npos || cl > end) return n;
      // A reply to HEAD has a Content-Length and no body: its next reply
      // starts right after the blank line.
      size_t len = std::stoul(raw.substr(cl + 16));
      if (raw.compare(end + 4, 5, "HTTP/") == 0) len = 0;
      if (raw.size() < end + 4 + len) return n;
      at = end + 4 + len;
      ++n;
    }
  };
  char buf[4096];
  if (closed) *closed = false;
  while (whole() < count) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (closed) *closed = n == 0;
      break;
    }
    raw.append(buf, size_t(n));
  }
  return raw;
}

// Whether the server has closed `fd` (within 5 s).
bool closed_by_server(int fd) {
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char c;
  return ::recv(fd, &c, 1, 0) == 0;
}

int count_of(const std::string& s, const std::string& part) {
  int n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

TEST(HttpLoop, AKeptAliveConnectionServesOneRequestAfterAnother) {
  Loop l;
  const int fd = connect_loopback(l.port());
  for (int i = 0; i < 3; ++i) {
    send_all(fd, "GET /a?x=" + std::to_string(i) + " HTTP/1.1\r\nHost: h\r\n\r\n");
    const std::string r = read_replies(fd, 1);
    EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
    EXPECT_NE(r.find("path /a query x=" + std::to_string(i) + "\n"), std::string::npos) << r;
    EXPECT_EQ(r.find("Connection: close"), std::string::npos);
  }
  ::close(fd);
  EXPECT_EQ(l.requests.load(), 3);
}

TEST(HttpLoop, PipelinedRequestsAreAnsweredInOrder) {
  Loop l;
  const int fd = connect_loopback(l.port());
  send_all(fd,
           "GET /one HTTP/1.1\r\nHost: h\r\n\r\nHEAD /two HTTP/1.1\r\nHost: h\r\n\r\n"
           "GET /three HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  bool closed = false;
  const std::string r = read_replies(fd, 3, &closed);
  const size_t one = r.find("path /one"), three = r.find("path /three");
  EXPECT_NE(one, std::string::npos) << r;
  EXPECT_NE(three, std::string::npos) << r;
  EXPECT_LT(one, three);
  EXPECT_EQ(r.find("path /two"), std::string::npos) << "HEAD: no body";
  EXPECT_EQ(count_of(r, "HTTP/1.1 200 OK"), 3) << r;
  EXPECT_TRUE(closed_by_server(fd)) << "closed after the request that asked for it";
  ::close(fd);
}

TEST(HttpLoop, Http10ClosesUnlessAskedToKeepAlive) {
  Loop l;
  int fd = connect_loopback(l.port());
  send_all(fd, "GET /x HTTP/1.0\r\n\r\n");
  std::string r = read_replies(fd, 1);
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
  EXPECT_TRUE(closed_by_server(fd));
  ::close(fd);
  fd = connect_loopback(l.port());
  send_all(fd, "GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  r = read_replies(fd, 1);
  send_all(fd, "GET /y HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
  r += read_replies(fd, 1);
  EXPECT_EQ(count_of(r, "200 OK"), 2) << r;
  ::close(fd);
}

// `ab -k` (HTTP/1.0 with Connection: keep-alive) waits for the reply to say
// so: a kept 1.0 connection is acknowledged, as Go's server does.
TEST(HttpLoop, AnHttp10ConnectionKeptAliveIsAcknowledgedInTheReply) {
  Loop l;
  const int fd = connect_loopback(l.port());
  send_all(fd, "GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  const std::string r = read_replies(fd, 1);
  EXPECT_NE(r.find("\r\nConnection: keep-alive\r\n"), std::string::npos) << r;
  send_all(fd, "GET /y HTTP/1.0\r\n\r\n");
  const std::string last = read_replies(fd, 1);
  EXPECT_NE(last.find("path /y"), std::string::npos) << last;
  EXPECT_NE(last.find("Connection: close"), std::string::npos) << last;
  EXPECT_TRUE(closed_by_server(fd));
  ::close(fd);
}

// RFC 9112 §6.3: a message whose length can be read two ways is answered 400
// and its connection closed; what follows is never read as a request.
TEST(HttpLoop, ALengthThatIsNotOneNumberIs400AndTheBodyIsNeverARequest) {
  Loop l;
  for (const std::string lengths :
       {"Content-Length: 0\r\nContent-Length: 37", "Content-Length: +37", "Content-Length: 37, 0",
        "Content-Length: -0", "Content-Length: 0x25"}) {
    const int fd = connect_loopback(l.port());
    send_all(fd, "GET /a HTTP/1.1\r\nHost: h\r\n" + lengths +
                     "\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n");
    bool closed = false;
    const std::string r = read_replies(fd, 2, &closed);
    EXPECT_EQ(r.rfind("HTTP/1.1 400 ", 0), 0u) << lengths << "\n" << r;
    EXPECT_EQ(r.find("smuggled"), std::string::npos) << lengths;
    EXPECT_TRUE(closed) << lengths;
    ::close(fd);
  }
  EXPECT_EQ(l.requests.load(), 0) << "none reached the handler";
}

TEST(HttpLoop, CloseAmongTheConnectionOptionsOrOnASecondLineCloses) {
  Loop l;
  for (const std::string connection : {"Connection: keep-alive, close", "Connection: close, TE",
                                       "Connection: TE\r\nConnection: close"}) {
    const int fd = connect_loopback(l.port());
    send_all(fd, "GET /c HTTP/1.1\r\nHost: h\r\n" + connection + "\r\n\r\n");
    const std::string r = read_replies(fd, 1);
    EXPECT_NE(r.find("path /c"), std::string::npos) << connection;
    EXPECT_NE(r.find("Connection: close"), std::string::npos) << connection;
    EXPECT_TRUE(closed_by_server(fd)) << connection;
    ::close(fd);
  }
}

// Heads the parser refuses (RFC 9112 §3.2, §5), and ones it must take.
TEST(HttpLoop, NoOrTwoHostsAndControlBytesGet400AndAnAbsoluteTargetIsServed) {
  Loop l;
  auto reply_to = [&](const std::string& req) {
    const int fd = connect_loopback(l.port());
    send_all(fd, req);
    const std::string r = read_replies(fd, 1);
    ::close(fd);
    return r;
  };
  using namespace std::string_literals;
  EXPECT_EQ(reply_to("GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 400 ", 0), 0u) << "no Host";
  EXPECT_EQ(reply_to("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").rfind("HTTP/1.1 400 ", 0), 0u);
  EXPECT_EQ(reply_to("GET / HTTP/1.1\r\nHost: h\r\nX: a\0b\r\n\r\n"s).rfind("HTTP/1.1 400 ", 0), 0u)
      << "a NUL in a value";
  EXPECT_EQ(reply_to("GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n").rfind("HTTP/1.1 400 ", 0), 0u)
      << "a bare CR";
  EXPECT_EQ(reply_to("GET /a\0b HTTP/1.1\r\nHost: h\r\n\r\n"s).rfind("HTTP/1.1 400 ", 0), 0u)
      << "a NUL in the target";
  const std::string absolute = reply_to("GET http://h:1/abs?q=1 HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(absolute.rfind("HTTP/1.1 200 ", 0), 0u) << absolute;
  EXPECT_NE(absolute.find("path /abs query q=1"), std::string::npos) << absolute;
  EXPECT_EQ(l.requests.load(), 1) << "only the absolute-form one reached the handler";
}

// Within the head deadline (10 s), not after it: an HTTP/0.9 line is no
// request to wait for, and a head may end its lines with CRLF or LF mixed.
TEST(HttpLoop, AnHttp09LineAndAMixedLineEndingHeadAreAnsweredAtOnce) {
  HttpLoop::Options o;
  o.head_timeout = 30s;
  Loop l(o);
  int fd = connect_loopback(l.port());
  send_all(fd, "GET /\r\n");
  bool closed = false;
  std::string r = read_replies(fd, 1, &closed);  // gives up after 5 s
  EXPECT_EQ(r.rfind("HTTP/1.1 400 ", 0), 0u) << r;
  ::close(fd);
  fd = connect_loopback(l.port());
  send_all(fd, "GET /mixed HTTP/1.1\nHost: h\n\r\n");
  r = read_replies(fd, 1);
  EXPECT_NE(r.find("path /mixed"), std::string::npos) << r;
  ::close(fd);
}

TEST(HttpLoop, ARequestSentWholeThenHalfClosedIsAnswered) {
  Loop l;
  const int fd = connect_loopback(l.port());
  send_all(fd, "GET /bye HTTP/1.1\r\nHost: h\r\n\r\n");
  ::shutdown(fd, SHUT_WR);
  const std::string r = read_replies(fd, 1);
  EXPECT_NE(r.find("path /bye"), std::string::npos) << r;
  // Whether the reply says Connection: close depends on whether the end
  // was read with the request or after it; the connection closes either way.
  EXPECT_TRUE(closed_by_server(fd));
  ::close(fd);
}

TEST(HttpLoop, AHeadOver16KiBGets431AndMalformedOnes400Or505) {
  Loop l;
  auto status_of = [&](const std::string& req) {
    const int fd = connect_loopback(l.port());
    ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    const std::string r = read_replies(fd, 1);
    ::close(fd);
    return r.size() > 12 ? std::stoi(r.substr(9, 3)) : 0;
  };
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n"), 431);
  EXPECT_EQ(status_of("NONSENSE\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nno colon here\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET /throw HTTP/1.1\r\nHost: h\r\n\r\n"), 500) << "a handler's exception";
  EXPECT_EQ(status_of("GET /fine HTTP/1.1\r\nHost: h\r\n\r\n"), 200);
  EXPECT_EQ(l.requests.load(), 2) << "the refused ones never reach the handler";
}

TEST(HttpLoop, HalfSentHeadsAndIdleConnectionsCloseAtTheirTimeouts) {
  HttpLoop::Options o;
  o.head_timeout = 300ms;
  o.idle_timeout = 600ms;
  Loop l(o);
  const int silent = connect_loopback(l.port());
  const int half = connect_loopback(l.port());
  send_all(half, "GET /metrics HTTP/1.1\r\nHost:");
  const int kept = connect_loopback(l.port());
  send_all(kept, "GET /k HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_NE(read_replies(kept, 1).find("path /k"), std::string::npos);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(closed_by_server(silent));
  EXPECT_TRUE(closed_by_server(half));
  EXPECT_TRUE(closed_by_server(kept));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 500ms) << "the idle one waits longer";
  for (int fd : {silent, half, kept}) ::close(fd);
}

TEST(HttpLoop, AtMaxConnectionsTheOneIdleLongestMakesRoom) {
  HttpLoop::Options o;
  o.max_connections = 3;
  o.max_connections_per_peer = 3;  // one peer here: the cap of all, not its own
  Loop l(o);
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(connect_loopback(l.port()));
    std::this_thread::sleep_for(50ms);  // accepted in this order
  }
  const testing::Response r = testing::http(l.port(), "GET", "/new");
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(closed_by_server(idle[0])) << "the connection waiting longest went";
  timeval tv{0, 200000};
  ::setsockopt(idle[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char c;
  EXPECT_EQ(::recv(idle[1], &c, 1, 0), -1) << "the next one still waits";
  for (int fd : idle) ::close(fd);
}

TEST(HttpLoop, AtMaxConnectionsWithAllBeingAnsweredANewOneWaitsItsTurn) {
  HttpLoop::Options o;
  o.max_connections = 1;
  Loop l(o);
  std::thread slow([&] { EXPECT_EQ(testing::http(l.port(), "GET", "/slow").status, 200); });
  std::this_thread::sleep_for(100ms);  // /slow is being answered
  const testing::Response r = testing::http(l.port(), "GET", "/next");
  EXPECT_EQ(r.status, 200) << "accepted once /slow was done, not refused";
  EXPECT_NE(r.body.find("path /next"), std::string::npos);
  slow.join();
  EXPECT_EQ(l.requests.load(), 2);
}

TEST(HttpLoop, IdleAndHalfSentConnectionsHoldNoThreadAndWorkersRetire) {
  HttpLoop::Options o;
  o.worker_idle = 300ms;
  Loop l(o);
  // One request first: a worker is made for it, then retires.
  EXPECT_EQ(testing::http(l.port(), "GET", "/first").status, 200);
  EXPECT_GE(l.loop->workers(), 1);
  for (int i = 0; i < 100 && l.loop->workers() > 0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(l.loop->workers(), 0) << "retired after worker_idle";
  const int before = testing::threads_of(::getpid());
  std::vector<int> fds;
  for (int i = 0; i < 500; ++i) {
    fds.push_back(connect_loopback(l.port()));
    if (i % 2 == 1) send_all(fds.back(), "GET /metrics HTTP/1.1\r\nHost: x\r\n");
  }
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(testing::threads_of(::getpid()), before) << "500 waiting connections, no thread more";
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 16; ++i)
    clients.emplace_back([&] { ok += testing::http(l.port(), "GET", "/m").status == 200; });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 16);
  EXPECT_LE(l.loop->workers(), HttpLoop::kMaxWorkers);
  for (int fd : fds) ::close(fd);
}

}  // namespace
}  // namespace gym::exporter
