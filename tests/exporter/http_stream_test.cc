// A scrape streamed (Exposition::render with pieces, the coders, the loop's
// chunked replies), on real sockets: the pieces are the whole exposition and
// never much more than a piece each; a chunked reply, plain, gzip or zstd, is
// the exposition the text encoder renders whole; HEAD and HTTP/1.0 get it
// whole with its length; a stream that fails before its first piece is a
// 500 and after it a reply cut short; and a reader at 10 KiB/s does not
// delay another client's scrape.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "collector.h"
#include "contract/families.h"
#include "decompress.h"
#include "exposition/exposition.h"
#include "exposition/text.h"
#include "http/compression.h"
#include "http/loop.h"
#include "http/server.h"
#include "http_client.h"

namespace gym::exporter {
namespace {

using testing::gunzip;
using testing::unzstd;

using namespace std::chrono_literals;
using testing::http;

// `servers` servers in blocks of `block` (three families of `block` samples
// each); a name repeats from block to block, which the framing under test
// does not look at.
class Servers : public Collector {
 public:
  explicit Servers(int servers, int block = 40) : servers_(servers), block_(block) {}
  void collect(const Emit& emit) override {
    for (int first = 0; first < servers_; first += block_) {
      Families out;
      auto [up, processes, memory] = add_families(
          out, {"gym_server_up", "gym_server_processes", "gym_server_memory_usage_bytes"});
      for (int i = first; i < std::min(servers_, first + block_); ++i) {
        const LabelPairs server = server_labels("server-" + std::to_string(i), "resources");
        add_metric(*up, server).gauge.value = 1;
        add_metric(*processes, server).gauge.value = i % 7;
        LabelPairs rss = server;
        rss.emplace_back("memory_type", "rss");
        add_metric(*memory, rss).gauge.value = 1e6 + i;
      }
      for (const Family& f : out) emit(f);
    }
  }

 private:
  int servers_, block_;
};

std::unique_ptr<Exposition> exposition_of(int servers, int block = 40) {
  std::vector<std::unique_ptr<Collector>> c;
  c.push_back(std::make_unique<Servers>(servers, block));
  return std::make_unique<Exposition>(std::move(c));
}

struct Server {
  std::unique_ptr<Exposition> exposition;
  std::unique_ptr<HttpServer> server;
  explicit Server(int servers) : exposition(exposition_of(servers)) {
    HttpServer::Options o;
    o.listen_addresses = {"127.0.0.1:0"};
    std::string error;
    server = HttpServer::start(
        o, *exposition, [] { return std::string(); }, &error);
    EXPECT_TRUE(server) << error;
  }
  int port() const { return server->port(); }
};

// The exposition with its one line that changes every scrape dropped.
std::string steady(std::string text) {
  const size_t at = text.find("\ngym_exporter_scrape_duration_seconds ");
  if (at == std::string::npos) return "<no scrape duration>";
  return text.erase(at + 1, text.find('\n', at + 1) - at);
}

// Whether two expositions are the same, saying where they part if not.
::testing::AssertionResult same(const std::string& a, const std::string& b) {
  if (a == b) return ::testing::AssertionSuccess();
  size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
  return ::testing::AssertionFailure()
         << a.size() << " and " << b.size() << " bytes, apart at " << at << ": \""
         << a.substr(at, 80) << "\" vs \"" << b.substr(at, 80) << "\"";
}

// The pieces of `e`'s exposition in `encoder`'s format, checked: together
// the exposition rendered whole, each but the last a piece or more, and
// none more than a piece and `part` bytes; each ends a line.
void check_pieces(Exposition& e, const Encoder& encoder, size_t part) {
  const std::string whole = steady(e.render(encoder, {}));
  std::vector<std::string> pieces;
  const size_t bytes = e.render(encoder, {}, [&](std::string_view p) { pieces.emplace_back(p); });
  std::string joined;
  for (const std::string& p : pieces) joined += p;
  EXPECT_EQ(bytes, joined.size());
  EXPECT_TRUE(same(steady(joined), whole));
  ASSERT_GT(pieces.size(), 8u);
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i].back(), '\n') << "piece " << i;
    EXPECT_LT(pieces[i].size(), Exposition::kPiece + part) << "piece " << i;
    if (i + 1 < pieces.size()) {
      EXPECT_GE(pieces[i].size(), Exposition::kPiece) << "piece " << i;
    }
  }
}

TEST(Stream, TheExpositionsPiecesAreItWholeAndHoldAPieceAndOnePartAtMost) {
  // Families of 40 samples (about 10 KB), never split: a piece holds several.
  check_pieces(*exposition_of(3000), TextEncoder(), 12 << 10);
  check_pieces(*exposition_of(3000), OpenMetricsEncoder(), 12 << 10);
  // Three families of 5,000 samples (about 500 KB each): written in parts
  // of kPartSeries samples (about 130 bytes a sample here).
  check_pieces(*exposition_of(5000, 5000), TextEncoder(), Exposition::kPartSeries * 160);
  check_pieces(*exposition_of(5000, 5000), OpenMetricsEncoder(), Exposition::kPartSeries * 160);
}

TEST(Stream, ACoderInPiecesMakesOneStreamOfTheWholeInPiecesOfAtMostAPiece) {
  std::string body;
  for (int i = 0; body.size() < (size_t{4} << 20); ++i)
    body += "gym_x_total{server=\"s" + std::to_string(i * 7919 % 100003) + "\"} " +
            std::to_string(i * 2654435761u) + "\n";
  for (Coding c : {Coding::kGzip, Coding::kZstd}) {
    std::shared_ptr<Coder> coder = acquire_coder(c);
    ASSERT_TRUE(coder);
    std::string packed;
    size_t pieces = 0;
    const auto to = [&](std::string_view p) {
      EXPECT_LE(p.size(), Coder::kPiece);
      EXPECT_FALSE(p.empty());
      packed.append(p);
      ++pieces;
    };
    for (size_t at = 0; at < body.size(); at += 100000)
      ASSERT_TRUE(coder->add(std::string_view(body).substr(at, 100000), to));
    ASSERT_TRUE(coder->finish(to));
    EXPECT_GT(pieces, 2u) << coding_name(c);
    EXPECT_TRUE(same(c == Coding::kGzip ? gunzip(packed) : unzstd(packed), body));
    if (c == Coding::kGzip) {
      EXPECT_TRUE(same(packed, compress(c, body))) << "the same stream as compressed whole";
    }
  }
}

TEST(Stream, AScrapeIsChunkedPlainGzippedOrZstdAndHeadOrHttp10GetsItWhole) {
  Server s(3000);
  ASSERT_TRUE(s.server);
  const std::string whole = steady(s.exposition->render(TextEncoder(), {}));
  const auto plain = http(s.port(), "GET", "/metrics");
  EXPECT_EQ(plain.status, 200);
  EXPECT_EQ(plain.headers.at("transfer-encoding"), "chunked");
  EXPECT_EQ(plain.headers.count("content-length"), 0u);
  EXPECT_TRUE(same(steady(plain.body), whole));
  const auto zipped = http(s.port(), "GET", "/metrics", "Accept-Encoding: gzip\r\n");
  EXPECT_EQ(zipped.headers.at("transfer-encoding"), "chunked");
  EXPECT_EQ(zipped.headers.at("content-encoding"), "gzip");
  EXPECT_LT(zipped.body.size(), whole.size() / 4);
  EXPECT_TRUE(same(steady(gunzip(zipped.body)), whole));
  // Prometheus 3.15 with zstd-scrape; an unknown coding is not taken.
  const auto packed = http(s.port(), "GET", "/metrics", "Accept-Encoding: zstd, gzip\r\n");
  EXPECT_EQ(packed.headers.at("transfer-encoding"), "chunked");
  EXPECT_EQ(packed.headers.at("content-encoding"), "zstd");
  EXPECT_EQ(packed.headers.at("vary"), "Accept, Accept-Encoding");
  EXPECT_LT(packed.body.size(), whole.size() / 4);
  EXPECT_TRUE(same(steady(unzstd(packed.body)), whole));
  const auto other = http(s.port(), "GET", "/metrics", "Accept-Encoding: br\r\n");
  EXPECT_EQ(other.headers.count("content-encoding"), 0u);
  EXPECT_TRUE(same(steady(other.body), whole));
  const auto head = http(s.port(), "HEAD", "/metrics");
  EXPECT_EQ(head.headers.count("transfer-encoding"), 0u);
  // The exposition's length (its scrape duration's digits may differ).
  const size_t length = std::stoul(head.headers.at("content-length"));
  EXPECT_LT(std::max(length, plain.body.size()) - std::min(length, plain.body.size()), 24u);
  EXPECT_TRUE(head.body.empty());
  // HTTP/1.0 knows no chunks: the reply whole, with its length.
  const int fd = testing::connect_loopback(s.port());
  ASSERT_GE(fd, 0);
  const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), ssize_t(req.size()));
  std::string raw;
  char buf[65536];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) raw.append(buf, size_t(n));
  ::close(fd);
  const size_t end = raw.find("\r\n\r\n");
  ASSERT_NE(end, std::string::npos);
  const std::string headers = raw.substr(0, end);
  EXPECT_EQ(headers.find("Transfer-Encoding"), std::string::npos) << headers;
  EXPECT_NE(headers.find("Content-Length: " + std::to_string(raw.size() - end - 4)),
            std::string::npos)
      << headers;
  EXPECT_TRUE(same(steady(raw.substr(end + 4)), whole));
}

TEST(Stream, CompressedScrapesCutShortAndHostileCodingsLeaveTheNextScrapeWhole) {
  Server s(3000);
  ASSERT_TRUE(s.server);
  const std::string whole = steady(s.exposition->render(TextEncoder(), {}));
  // Clients that read a little of a zstd or gzip reply and hang up: their
  // coders go back to the pool unfinished, and the next reply starts afresh.
  for (int i = 0; i < 20; ++i) {
    const int fd = testing::connect_loopback(s.port());
    ASSERT_GE(fd, 0);
    const std::string req = std::string("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: ") +
                            (i % 2 == 0 ? "zstd" : "gzip") + "\r\n\r\n";
    ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), ssize_t(req.size()));
    char buf[512];
    EXPECT_GT(::recv(fd, buf, sizeof buf, 0), 0);
    ::close(fd);
  }
  // Accept-Encoding values a client could send: long lists, odd q-values.
  const std::string many = [] {
    std::string h;
    for (int i = 0; i < 500; ++i) h += "zstd;q=0." + std::to_string(i % 10) + ", ";
    return h + "gzip;q=0.95";
  }();
  for (const std::string& coding :
       {many, std::string("zstd;q=NaN, gzip;q=1e400"), std::string("zstd;;;q=1;q=0, gzip"),
        std::string(",,,zstd"), std::string("zstd;q=\"1\""), std::string("identity;q=0")}) {
    const auto r = http(s.port(), "GET", "/metrics", "Accept-Encoding: " + coding + "\r\n");
    ASSERT_EQ(r.status, 200) << coding;
    const auto enc = r.headers.find("content-encoding");
    const std::string body = enc == r.headers.end()  ? r.body
                             : enc->second == "zstd" ? unzstd(r.body)
                                                     : gunzip(r.body);
    EXPECT_TRUE(same(steady(body), whole)) << coding.substr(0, 40);
  }
}

TEST(Stream, AStreamThatFailsIsA500BeforeItsFirstPieceAndCutShortAfter) {
  HttpStats stats;
  HttpLoop::Options o;
  o.listen_addresses = {"127.0.0.1:0"};
  o.stats = &stats;
  std::string error;
  auto loop = HttpLoop::start(
      o,
      [](const HttpRequest& r) {
        HttpReply reply;
        reply.headers = "Content-Type: text/plain\r\n";
        const bool early = r.path == "/early";
        reply.stream = [early](const HttpReply::Writer& write) {
          if (!early) write(std::string(100000, 'x'));
          throw std::runtime_error("out of memory, say");
        };
        return reply;
      },
      &error);
  ASSERT_TRUE(loop) << error;
  const auto early = http(loop->port(), "GET", "/early");
  EXPECT_EQ(early.status, 500);
  EXPECT_EQ(early.body, "Internal Server Error\n");
  const auto late = http(loop->port(), "GET", "/late");
  EXPECT_EQ(late.status, 200) << "its head was sent";
  EXPECT_TRUE(late.body == "<bad chunking>")
      << "no last chunk, never taken for whole: " << late.body.size() << " bytes";
  EXPECT_EQ(stats.refusals[2].load(), 2u) << "both counted as 500s";
  EXPECT_EQ(HttpStats::kRefusals[2], 500);
}

TEST(Stream, AReaderAt10KiBPerSecondDoesNotDelayAnotherClientsScrape) {
  Server s(20000);  // about 5 MB of exposition: 500 s at 10 KiB/s
  ASSERT_TRUE(s.server);
  // A small receive window, set before connecting: what it does not read
  // stays with the server.
  const int slow = ::socket(AF_INET, SOCK_STREAM, 0);
  const int window = 4096;
  ::setsockopt(slow, SOL_SOCKET, SO_RCVBUF, &window, sizeof window);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(uint16_t(s.port()));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(slow, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(slow, req.data(), req.size(), MSG_NOSIGNAL), ssize_t(req.size()));
  size_t slow_got = 0;
  char buf[1024];
  const auto read_slowly = [&](int kib) {  // 1 KiB every 100 ms
    for (int i = 0; i < kib; ++i) {
      const ssize_t n = ::recv(slow, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) slow_got += size_t(n);
      std::this_thread::sleep_for(100ms);
    }
  };
  read_slowly(10);
  ASSERT_GT(slow_got, 0u) << "its reply has started";
  // Scrapes of another client, each whole, while the slow one is still far
  // from the end of its own: its rendering waits on no one.
  for (int i = 0; i < 3; ++i) {
    const auto other = http(s.port(), "GET", "/metrics");
    EXPECT_EQ(other.status, 200);
    EXPECT_NE(other.body.find("\ngym_exporter_scrape_duration_seconds "), std::string::npos)
        << "whole: " << other.body.size() << " bytes";
    EXPECT_GT(other.body.size(), size_t{4} << 20);
    read_slowly(5);
    EXPECT_GE(HttpStats::process().in(HttpStats::kSending), 1)
        << "the slow reader's reply, rendered, is still being sent";
  }
  ::close(slow);
}

}  // namespace
}  // namespace gym::exporter
