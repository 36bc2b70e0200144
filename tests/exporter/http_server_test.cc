// The exporter's HTTP server (http/server.h) on real sockets: which route a
// path takes (the telemetry path as configured, the snapshot only when there
// is one, everything else 404), the methods it answers, HEAD, the reply's
// content type for each route, and each request counted under its route and
// status. The loop under it: http_loop_test.cc; hostile clients:
// http_hostile_test.cc; basic auth through the application: collector_test.cc.
#include "http/server.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "collector.h"
#include "exposition/exposition.h"
#include "http_client.h"
#include "self_metrics.h"

namespace gym::exporter {
namespace {

using testing::http;

// One family: a gauge that says the collector was asked.
class Up : public Collector {
 public:
  void collect(const Emit& emit) override {
    Families out;
    add_simple(out, "gym_server_up", 1, {{"nemo_gym_server_name", "routing"}});
    for (const Family& f : out) emit(f);
  }
};

struct Server {
  std::unique_ptr<Exposition> exposition;
  std::unique_ptr<HttpServer> server;
  explicit Server(bool with_snapshot, std::string telemetry_path = "/custom") {
    std::vector<std::unique_ptr<Collector>> c;
    c.push_back(std::make_unique<Up>());
    exposition = std::make_unique<Exposition>(std::move(c));
    HttpServer::Options o;
    o.listen_addresses = {"127.0.0.1:0"};
    o.telemetry_path = std::move(telemetry_path);
    if (with_snapshot) o.snapshot_json = [] { return std::string("{\"snapshot\":true}"); };
    std::string error;
    server = HttpServer::start(
        o, *exposition, [] { return std::string("<html>landing</html>"); }, &error);
    EXPECT_TRUE(server) << error;
  }
  int port() const { return server->port(); }
};

size_t code_index(int code) {
  for (size_t i = 0; i < SelfMetrics::kCodes.size(); ++i)
    if (SelfMetrics::kCodes[i] == code) return i;
  ADD_FAILURE() << "no code " << code;
  return 0;
}

TEST(HttpServer, EachPathTakesItsRouteAndAnyOtherIsNotFound) {
  Server with(true), without(false);
  ASSERT_TRUE(with.server && without.server);
  const HttpServer& s = *with.server;
  EXPECT_EQ(s.route("/custom"), HttpServer::kTelemetry);
  EXPECT_EQ(s.route("/api/v1/snapshot"), HttpServer::kSnapshot);
  EXPECT_EQ(without.server->route("/api/v1/snapshot"), HttpServer::kNotFound) << "none to serve";
  EXPECT_EQ(s.route("/-/healthy"), HttpServer::kHealthy);
  EXPECT_EQ(s.route("/-/ready"), HttpServer::kReady);
  EXPECT_EQ(s.route("/"), HttpServer::kLanding);
  for (const char* other : {"/metrics", "/custom/", "/CUSTOM", "/custom/x", "//", "", "/-/",
                            "/api/v1/snapshot/", "/-/healthy?"})
    EXPECT_EQ(s.route(other), HttpServer::kNotFound) << other;
}

TEST(HttpServer, EachRouteAnswersWithItsContentAndType) {
  Server s(true);
  ASSERT_TRUE(s.server);
  const auto telemetry = http(s.port(), "GET", "/custom");
  EXPECT_EQ(telemetry.status, 200);
  EXPECT_EQ(telemetry.headers.at("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(telemetry.body.find("gym_server_up{nemo_gym_server_name=\"routing\"} 1"),
            std::string::npos)
      << telemetry.body;
  EXPECT_EQ(http(s.port(), "GET", "/custom?name[]=gym_server_up").status, 200)
      << "the query is not part of the path";
  EXPECT_EQ(http(s.port(), "GET", "/custom?name[]=gym_other").body.find("gym_server_up"),
            std::string::npos)
      << "but it filters";
  const auto snapshot = http(s.port(), "GET", "/api/v1/snapshot");
  EXPECT_EQ(snapshot.status, 200);
  EXPECT_EQ(snapshot.headers.at("content-type"), "application/json");
  EXPECT_EQ(snapshot.body, "{\"snapshot\":true}");
  for (const char* probe : {"/-/healthy", "/-/ready"}) {
    const auto r = http(s.port(), "GET", probe);
    EXPECT_EQ(r.status, 200) << probe;
    EXPECT_EQ(r.body, "OK\n") << probe;
  }
  const auto landing = http(s.port(), "GET", "/");
  EXPECT_EQ(landing.headers.at("content-type"), "text/html; charset=utf-8");
  EXPECT_EQ(landing.body, "<html>landing</html>");
  const auto missing = http(s.port(), "GET", "/metrics");
  EXPECT_EQ(missing.status, 404) << "the telemetry path is /custom here";
  EXPECT_EQ(missing.body, "404 page not found\n");
}

TEST(HttpServer, OnlyGetAndHeadAreAnsweredAndHeadHasTheHeadersWithoutTheBody) {
  Server s(false);
  ASSERT_TRUE(s.server);
  for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS"}) {
    const auto r = http(s.port(), method, "/custom", "Content-Length: 0\r\n");
    EXPECT_EQ(r.status, 405) << method;
    EXPECT_EQ(r.headers.at("allow"), "GET, HEAD") << method;
  }
  // The landing page is the same every time: its HEAD says its GET's length.
  const auto get = http(s.port(), "GET", "/");
  const auto head = http(s.port(), "HEAD", "/");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
  EXPECT_EQ(head.headers.at("content-length"), std::to_string(get.body.size()));
  EXPECT_EQ(head.headers.at("content-type"), get.headers.at("content-type"));
  const auto scrape = http(s.port(), "HEAD", "/custom");
  EXPECT_EQ(scrape.status, 200);
  EXPECT_TRUE(scrape.body.empty());
  EXPECT_GT(std::stoul(scrape.headers.at("content-length")), 0u) << "a scrape's length";
}

TEST(HttpServer, EachRequestIsCountedUnderItsRouteAndStatus) {
  Server s(false);
  ASSERT_TRUE(s.server);
  SelfMetrics& m = SelfMetrics::process();
  const auto count = [&](size_t route, int code) { return m.requests(route, code_index(code)); };
  const uint64_t telemetry = count(HttpServer::kTelemetry, 200);
  const uint64_t other = count(HttpServer::kNotFound, 404);
  const uint64_t snapshot = count(HttpServer::kSnapshot, 404);
  const uint64_t refused = count(HttpServer::kReady, 405);
  http(s.port(), "GET", "/custom");
  http(s.port(), "HEAD", "/custom");
  http(s.port(), "GET", "/nowhere");
  http(s.port(), "GET", "/api/v1/snapshot");  // no snapshot here: "other", not "snapshot"
  http(s.port(), "POST", "/-/ready", "Content-Length: 0\r\n");
  EXPECT_EQ(count(HttpServer::kTelemetry, 200), telemetry + 2);
  EXPECT_EQ(count(HttpServer::kNotFound, 404), other + 2);
  EXPECT_EQ(count(HttpServer::kSnapshot, 404), snapshot);
  EXPECT_EQ(count(HttpServer::kReady, 405), refused + 1);
}

}  // namespace
}  // namespace gym::exporter
