// The exporter's HTTP server: the telemetry path, a landing page, /-/healthy
// and /-/ready, /api/v1/snapshot; zstd or gzip when asked; 405 for methods other
// than GET and HEAD; basic auth and TLS from the web configuration. Its
// connections are http/loop.h's: a few threads, made when needed.
//
// Thread-safety: requests are served concurrently by the loop's workers;
// the Exposition serializes scrapes.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "exposition/exposition.h"
#include "http/loop.h"
#include "web_config.h"

namespace gym::exporter {

class HttpServer {
 public:
  // What a request asks for, decided once (SelfMetrics::kPaths order): the
  // reply and the request's count both follow from it.
  enum Route : size_t { kTelemetry, kSnapshot, kDeaths, kHealthy, kReady, kLanding, kNotFound };
  size_t route(const std::string& uri) const;

  struct Options {
    // Where it listens (HttpLoop::Options): addresses, or systemd's sockets.
    std::vector<std::string> listen_addresses{":9478"};
    bool systemd_socket = false;
    mode_t unix_mode = 0660;
    std::string telemetry_path = "/metrics";
    int max_connections = 1024;  // open at once (idle ones included)
    WebConfig web;               // TLS and basic auth (--web.config.file)
    // The registry as JSON at /api/v1/snapshot (docs/snapshot.schema.json);
    // none: 404.
    std::function<std::string()> snapshot_json;
    int max_connections_per_peer = 0;  // 0: a quarter of max_connections
    // The deaths of servers' processes as JSON at /api/v1/deaths
    // (docs/deaths.schema.json), for the request's query (server=, since=,
    // reason=); a query it refuses sets `error` (a 400); none: 404.
    std::function<std::string(const std::string& query, std::string* error)> deaths_json;
  };
  // Starts serving, or returns nullptr with a one-line reason in `error`.
  static std::unique_ptr<HttpServer> start(const Options& options, Exposition& exposition,
                                           std::function<std::string()> landing_page,
                                           std::string* error);
  ~HttpServer();
  int port() const { return loop_->port(); }
  std::vector<std::string> addresses() const { return loop_->addresses(); }
  // Replaces the basic auth users (a reload); empty: no authentication.
  void set_basic_auth_users(std::map<std::string, std::string> users);

 private:
  HttpServer() = default;
  // The loop's handler: the route, serve(), then the request counted
  // (self_metrics.h).
  HttpReply handle(const HttpRequest& req);
  HttpReply serve(const HttpRequest& req, size_t route);
  HttpReply serve_telemetry(const HttpRequest& req, bool head);
  bool authorized(const HttpRequest& req);
  // A reply with the configured headers, a content type and `extra` headers.
  HttpReply reply(int status, const char* type, std::string body, bool head,
                  const char* extra = "") const;
  Options options_;
  std::string configured_headers_;  // web config http_server_config.headers, rendered
  std::mutex users_mu_;
  std::map<std::string, std::string> users_;
  PasswordCache passwords_;
  Exposition* exposition_ = nullptr;
  std::function<std::string()> landing_page_;
  std::unique_ptr<HttpLoop> loop_;  // last: stopped first
};

}  // namespace gym::exporter
