// The HTTP server's pure parts: content type and coding negotiation, gzip
// and zstd.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <random>
#include <set>
#include <string_view>

#include "contract/table.h"
#include "decompress.h"
#include "exposition/exposition.h"
#include "exposition/negotiate.h"
#include "http/compression.h"
#include "http/loop.h"
#include "http/server.h"

namespace gym::exporter {
namespace {

using testing::gunzip;
using testing::unzstd;

TEST(AcceptEncoding, TheHigherQOfZstdAndGzipWinsZstdOnATieAndIdentityWhenNeither) {
  EXPECT_EQ(choose_coding(nullptr), Coding::kIdentity);
  EXPECT_EQ(choose_coding(""), Coding::kIdentity);
  EXPECT_EQ(choose_coding("gzip"), Coding::kGzip) << "what Prometheus 2 sends";
  EXPECT_EQ(choose_coding("zstd"), Coding::kZstd);
  EXPECT_EQ(choose_coding("GZip"), Coding::kGzip);
  EXPECT_EQ(choose_coding("ZSTD"), Coding::kZstd);
  EXPECT_EQ(choose_coding("deflate, gzip;q=0.5, br"), Coding::kGzip);
  EXPECT_EQ(choose_coding("gzip ; q=1.0"), Coding::kGzip);
  EXPECT_EQ(choose_coding("gzip;q=0"), Coding::kIdentity);
  EXPECT_EQ(choose_coding("gzip; q=0.000"), Coding::kIdentity);
  EXPECT_EQ(choose_coding("identity"), Coding::kIdentity);
  EXPECT_EQ(choose_coding("x-gzip"), Coding::kIdentity) << "another coding's name";
  EXPECT_EQ(choose_coding("gzipped, zstandard"), Coding::kIdentity);
  EXPECT_EQ(choose_coding("*"), Coding::kZstd) << "any: the faster";
  EXPECT_EQ(choose_coding("*;q=0"), Coding::kIdentity);
  EXPECT_EQ(choose_coding("gzip;q=0, *"), Coding::kZstd) << "gzip named and refused";
  EXPECT_EQ(choose_coding("zstd;q=0, *"), Coding::kGzip) << "zstd named and refused";
  EXPECT_EQ(choose_coding("*;q=0, gzip"), Coding::kGzip) << "gzip named and accepted";
  EXPECT_EQ(choose_coding("gzip;q=abc"), Coding::kIdentity) << "an unreadable quality is 0";
  EXPECT_EQ(choose_coding("gzip;q=2"), Coding::kIdentity) << "out of range";
  // What Prometheus 3.15 sends with zstd-scrape, and curl --compressed.
  EXPECT_EQ(choose_coding("zstd, gzip"), Coding::kZstd);
  EXPECT_EQ(choose_coding("deflate, gzip, br, zstd"), Coding::kZstd) << "a tie: zstd";
  EXPECT_EQ(choose_coding("zstd;q=0.5, gzip"), Coding::kGzip) << "the higher q";
  EXPECT_EQ(choose_coding("zstd, gzip;q=0.9"), Coding::kZstd);
  EXPECT_EQ(choose_coding("gzip;q=0.5, identity"), Coding::kIdentity) << "identity preferred";
  EXPECT_EQ(choose_coding("gzip, identity;q=0"), Coding::kGzip);
  EXPECT_STREQ(coding_name(Coding::kZstd), "zstd");
  EXPECT_STREQ(coding_name(Coding::kGzip), "gzip");
  EXPECT_STREQ(coding_name(Coding::kIdentity), "");
}

// 8 MB of exposition-like lines with random values: compressed output of
// many of a coder's 64 KiB pieces.
std::string random_exposition() {
  std::mt19937_64 rng(7);
  std::string body;
  while (body.size() < (size_t{8} << 20))
    body += "gym_x_total{server=\"s" + std::to_string(rng() % 1000) + "\"} " +
            std::to_string(rng()) + "\n";
  return body;
}

TEST(Gzip, ABodyOfManyChunksAndAnEmptyOneComeBackWhole) {
  const std::string body = random_exposition();
  const std::string zipped = compress(Coding::kGzip, body);
  ASSERT_GT(zipped.size(), size_t{4} << 16) << "spans several chunks";
  EXPECT_LT(zipped.size(), body.size() / 2);
  EXPECT_EQ(gunzip(zipped), body);
  const std::string empty = compress(Coding::kGzip, "");
  EXPECT_FALSE(empty.empty()) << "a gzip stream even of nothing";
  z_stream zs{};
  ASSERT_EQ(inflateInit2(&zs, 15 + 16), Z_OK);
  char c;
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(empty.data()));
  zs.avail_in = uInt(empty.size());
  zs.next_out = reinterpret_cast<Bytef*>(&c);
  zs.avail_out = 1;
  EXPECT_EQ(inflate(&zs, Z_FINISH), Z_STREAM_END);
  EXPECT_EQ(zs.total_out, 0u);
  inflateEnd(&zs);
}

TEST(Zstd, ABodyOfManyPiecesAndAnEmptyOneComeBackWholeSmallerThanGzip) {
  const std::string body = random_exposition();
  const std::string packed = compress(Coding::kZstd, body);
  ASSERT_GT(packed.size(), size_t{4} << 16) << "spans several pieces";
  EXPECT_EQ(unzstd(packed), body);
  EXPECT_LE(packed.size(), compress(Coding::kGzip, body).size() * 12 / 10)
      << "at most 1.2 times gzip's bytes";
  const std::string empty = compress(Coding::kZstd, "");
  EXPECT_FALSE(empty.empty()) << "a frame even of nothing";
  EXPECT_EQ(ZSTD_getFrameContentSize(empty.data(), empty.size()), ZSTD_CONTENTSIZE_UNKNOWN)
      << "a streamed frame: its size is not known when it starts";
  EXPECT_EQ(ZSTD_findFrameCompressedSize(empty.data(), empty.size()), empty.size());
  EXPECT_EQ(unzstd(packed.substr(0, packed.size() - 1)), "") << "cut short";
}

TEST(Coders, APooledCoderLeftHalfwayStartsItsNextStreamAfresh) {
  for (Coding c : {Coding::kGzip, Coding::kZstd}) {
    const std::string body = random_exposition().substr(0, 300000);
    {
      std::shared_ptr<Coder> coder = acquire_coder(c);
      ASSERT_TRUE(coder);
      std::string dropped;
      ASSERT_TRUE(coder->add(body, [&](std::string_view p) { dropped.append(p); }));
    }  // back to the pool unfinished: a reply cut short
    for (int i = 0; i < 3; ++i) {
      std::shared_ptr<Coder> coder = acquire_coder(c);
      ASSERT_TRUE(coder);
      std::string out;
      const auto to = [&](std::string_view p) { out.append(p); };
      ASSERT_TRUE(coder->add(body, to) && coder->finish(to));
      EXPECT_EQ(c == Coding::kZstd ? unzstd(out) : gunzip(out), body) << coding_name(c) << " " << i;
    }
  }
  EXPECT_EQ(acquire_coder(Coding::kIdentity), nullptr);
}

TEST(Accept, PrometheusGetsOpenMetricsAndEveryoneElseText) {
  // Prometheus 2.x, by default.
  EXPECT_EQ(negotiate("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                      "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
            Format::kOpenMetrics);
  // Prometheus 3.x, by default (UTF-8 names allowed; ours need no escaping).
  EXPECT_EQ(negotiate("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
                      "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;"
                      "escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"),
            Format::kOpenMetrics);
  // With native histograms: protobuf first.
  EXPECT_EQ(negotiate("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                      "encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,"
                      "application/openmetrics-text;version=0.0.1;q=0.75,text/plain;"
                      "version=0.0.4;q=0.5,*/*;q=0.1"),
            Format::kProtobuf);
  // Protobuf without its message or in another encoding is not ours.
  EXPECT_EQ(negotiate("application/vnd.google.protobuf;encoding=delimited"), Format::kText);
  EXPECT_EQ(negotiate("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                      "encoding=text"),
            Format::kText);
  EXPECT_EQ(negotiate("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                      "encoding=delimited;q=0.4,application/openmetrics-text;q=0.5"),
            Format::kOpenMetrics);
  // Prometheus told to prefer the classic text format.
  EXPECT_EQ(negotiate("text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;"
                      "q=0.5"),
            Format::kText);
  EXPECT_EQ(negotiate("text/plain;version=1.0.0;escaping=underscores"), Format::kText);
  // curl, browsers, nothing at all.
  EXPECT_EQ(negotiate(nullptr), Format::kText);
  EXPECT_EQ(negotiate(""), Format::kText);
  EXPECT_EQ(negotiate("*/*"), Format::kText) << "a tie goes to text";
  EXPECT_EQ(negotiate("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
            Format::kText);
  EXPECT_EQ(negotiate("Application/OpenMetrics-Text"), Format::kOpenMetrics) << "any case";
  EXPECT_EQ(negotiate("application/*"), Format::kOpenMetrics);
  EXPECT_EQ(negotiate("application/openmetrics-text; version=\"1.0.0\""), Format::kOpenMetrics);
  // Refused, unknown or unreadable: text, the fallback.
  EXPECT_EQ(negotiate("application/openmetrics-text;q=0"), Format::kText);
  EXPECT_EQ(negotiate("application/openmetrics-text;version=2.0.0"), Format::kText);
  EXPECT_EQ(negotiate("application/openmetrics-text;q=x"), Format::kText);
  EXPECT_EQ(negotiate("application/json"), Format::kText);
  EXPECT_EQ(negotiate(",,;;,=;q"), Format::kText);
}

TEST(Accept, HeaderListsKeepParametersAndQualities) {
  const auto items = parse_header_list(" a/b ; Version=\"1\" ;q=0.5, c/d;q=7 ,, e/f;x");
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].value, "a/b");
  EXPECT_EQ(items[0].param("version"), "1");
  EXPECT_DOUBLE_EQ(items[0].q, 0.5);
  EXPECT_EQ(items[1].q, 0) << "out of range";
  EXPECT_EQ(items[2].q, 1);
  EXPECT_TRUE(items[2].params.empty()) << "a parameter without a value";
}

TEST(RequestHead, MethodPathQueryVersionAndHeadersWithNamesInLowerCase) {
  HttpRequest r;
  ASSERT_EQ(parse_request_head("GET /a%20b/c?name%5B%5D=x&y=1 HTTP/1.0\r\n"
                               "Accept-Encoding:  gzip \r\nX-Empty:\r\nACCEPT: text/plain",
                               &r),
            0);
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.path, "/a b/c") << "percent-decoded";
  EXPECT_EQ(r.query, "name%5B%5D=x&y=1") << "as sent";
  EXPECT_EQ(r.minor, 0);
  ASSERT_NE(r.header("accept-encoding"), nullptr);
  EXPECT_STREQ(r.header("accept-encoding"), "gzip") << "trimmed";
  EXPECT_STREQ(r.header("x-empty"), "");
  EXPECT_STREQ(r.header("accept"), "text/plain");
  EXPECT_EQ(r.header("authorization"), nullptr);
}

TEST(RequestHead, MalformedLinesGet400AndOtherVersions505) {
  HttpRequest r;
  EXPECT_EQ(parse_request_head("GET /", &r), 400) << "no version";
  EXPECT_EQ(parse_request_head("GET  / HTTP/1.1", &r), 400) << "two spaces";
  EXPECT_EQ(parse_request_head("GET / HTTP/1.1 x", &r), 400);
  EXPECT_EQ(parse_request_head("G(T / HTTP/1.1", &r), 400) << "not a token";
  EXPECT_EQ(parse_request_head("GET / HTTP/2.0", &r), 505);
  EXPECT_EQ(parse_request_head("GET / FTP/1.1", &r), 400);
  EXPECT_EQ(parse_request_head("GET / HTTP/1.1\r\nNo-Colon", &r), 400);
  EXPECT_EQ(parse_request_head("GET / HTTP/1.1\r\n: empty name", &r), 400);
  EXPECT_EQ(parse_request_head("GET / HTTP/1.1\r\nA: b\r\n folded", &r), 400);
  EXPECT_EQ(parse_request_head("GET / HTTP/1.1\r\nBad Name: x", &r), 400);
  using namespace std::string_view_literals;
  EXPECT_EQ(parse_request_head("GET / HTTP/1.1\r\nA\0B: x"sv, &r), 400) << "a NUL in a name";
  EXPECT_EQ(parse_request_head("G\0T / HTTP/1.1"sv, &r), 400) << "a NUL in the method";
  EXPECT_EQ(parse_request_head("GET /%zz%4 HTTP/1.1\r\nHost: h", &r), 0);
  EXPECT_EQ(r.path, "/%zz%4") << "a malformed escape is kept as sent";
}

// RFC 9112 §6.3 and §3.2: what a client or a proxy in front could read
// another way is refused (400, and the loop closes the connection).
TEST(RequestHead, FramingThatCouldBeReadTwoWaysIs400) {
  using namespace std::string_view_literals;
  HttpRequest r;
  auto with = [&](std::string_view headers) {
    return parse_request_head("GET / HTTP/1.1\r\nHost: h\r\n" + std::string(headers), &r);
  };
  for (const char* cl :
       {"-1", "abc", "+5", "5, 7", "0x10", "1 2", "", "-0", "5,5", " 5x", "99999999999999999999"})
    EXPECT_EQ(with(std::string("Content-Length: ") + cl), 400) << "Content-Length: " << cl;
  EXPECT_EQ(with("Content-Length: 5\r\nContent-Length: 7"), 400) << "two lengths";
  ASSERT_EQ(with("Content-Length: 5\r\nContent-Length: 5"), 0) << "the same length twice";
  EXPECT_EQ(r.content_length, 5u);
  ASSERT_EQ(with("Content-Length: 0"), 0);
  EXPECT_EQ(r.content_length, 0u);
  EXPECT_EQ(with("Transfer-Encoding: chunked\r\nContent-Length: 3"), 400);
  ASSERT_EQ(with("Transfer-Encoding: chunked"), 0);
  EXPECT_TRUE(r.transfer_encoding);
  EXPECT_EQ(with("X: a\0b"sv), 400) << "a NUL in a value";
  EXPECT_EQ(with("X: a\rb"), 400) << "a bare CR";
  EXPECT_EQ(with("X: a\x7f"), 400) << "DEL";
  EXPECT_EQ(with("X: \x01"), 400);
  EXPECT_EQ(with("X: a\r\r\n"), 400) << "a CR before the line's own";
  EXPECT_EQ(with("X: a\tb\r\nY: caf\xc3\xa9"), 0) << "a tab and UTF-8 are fine";
  EXPECT_EQ(parse_request_head("GET /a\0b HTTP/1.1\r\nHost: h"sv, &r), 400)
      << "a NUL in the target";
  EXPECT_EQ(parse_request_head("GET / HTTP/1.1\r\nX: y", &r), 400) << "HTTP/1.1 without Host";
  EXPECT_EQ(with("Host: h2"), 400) << "two Host lines";
  EXPECT_EQ(parse_request_head("GET / HTTP/1.1\r\nHost: a b", &r), 400) << "not a host";
  EXPECT_EQ(parse_request_head("GET / HTTP/1.1\r\nHost: a/b", &r), 400);
  EXPECT_EQ(parse_request_head("GET / HTTP/1.1\r\nHost: [::1]:9478", &r), 0);
  EXPECT_EQ(parse_request_head("GET / HTTP/1.0", &r), 0) << "HTTP/1.0 needs no Host";
  ASSERT_EQ(parse_request_head("GET http://node7:9478/metrics?x=1 HTTP/1.1\r\nHost: node7", &r), 0)
      << "absolute-form";
  EXPECT_EQ(r.path, "/metrics");
  EXPECT_EQ(r.query, "x=1");
  ASSERT_EQ(parse_request_head("GET HTTPS://node7 HTTP/1.1\r\nHost: node7", &r), 0);
  EXPECT_EQ(r.path, "/");
}

TEST(RequestHead, TheConnectionOptionsOfEveryLineDecideWhetherItStaysOpen) {
  HttpRequest r;
  auto keeps = [&](std::string_view version_and_headers) {
    EXPECT_EQ(parse_request_head("GET / " + std::string(version_and_headers), &r), 0);
    return r.keep_alive;
  };
  EXPECT_TRUE(keeps("HTTP/1.1\r\nHost: h"));
  EXPECT_FALSE(keeps("HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, close"));
  EXPECT_FALSE(keeps("HTTP/1.1\r\nHost: h\r\nConnection: CLOSE , TE"));
  EXPECT_FALSE(keeps("HTTP/1.1\r\nHost: h\r\nConnection: TE\r\nConnection: close"));
  EXPECT_FALSE(keeps("HTTP/1.0"));
  EXPECT_TRUE(keeps("HTTP/1.0\r\nConnection: Keep-Alive"));
  EXPECT_FALSE(keeps("HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close"));
}

TEST(QueryValues, EveryValueOfAKeyDecodedWhetherTheKeyIsEscapedOrNot) {
  EXPECT_EQ(query_values("name[]=a&name%5B%5D=b%20c&x=1&name[]=d+e&name[]", "name[]"),
            (std::vector<std::string>{"a", "b c", "d e", ""}));
  EXPECT_TRUE(query_values("", "name[]").empty());
  EXPECT_TRUE(query_values("names=a", "name[]").empty());
}

}  // namespace
}  // namespace gym::exporter
