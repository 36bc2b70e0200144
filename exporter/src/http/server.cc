#include "http/server.h"

#include <spdlog/spdlog.h>

#include <strings.h>

#include <cstring>
#include <set>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include "exposition/negotiate.h"
#include "http/compression.h"
#include "http/tls.h"
#include "logging.h"
#include "self_metrics.h"

namespace gym::exporter {

namespace {

// The name[] query parameters (URL-decoded), as client_python reads them:
// the brackets as typed, or percent-encoded (as Go's url.Values sends them).
std::set<std::string> requested_names(const std::string& query) {
  std::set<std::string> names;
  for (std::string& v : query_values(query, "name[]")) names.insert(std::move(v));
  return names;
}

std::string base64_decode(const std::string& in) {
  static const std::string chars =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (char c : in) {
    if (c == '=') break;
    const auto pos = chars.find(c);
    if (pos == std::string::npos) return {};
    val = (val << 6) + int(pos);
    bits += 6;
    if (bits >= 0) {
      out.push_back(char((val >> bits) & 0xFF));
      bits -= 8;
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<HttpServer> HttpServer::start(const Options& options, Exposition& exposition,
                                              std::function<std::string()> landing_page,
                                              std::string* error) {
  std::unique_ptr<HttpServer> server(new HttpServer);
  server->options_ = options;
  server->exposition_ = &exposition;
  server->landing_page_ = std::move(landing_page);
  server->users_ = options.web.basic_auth_users;
  for (const auto& [name, value] : options.web.headers)
    server->configured_headers_ += name + ": " + value + "\r\n";
  HttpLoop::Options loop;
  loop.listen_addresses = options.listen_addresses;
  loop.systemd_socket = options.systemd_socket;
  loop.unix_mode = options.unix_mode;
  loop.max_connections = options.max_connections;
  loop.max_connections_per_peer = options.max_connections_per_peer;
  if (options.web.tls) {
    std::string why;
    loop.tls = tls::make_context(options.web, &why);
    if (loop.tls == nullptr) {
      *error = "cannot serve TLS: " + why;
      return nullptr;
    }
  }
  // spdlog's registry (a function-local static of its library) made here,
  // before the loop's threads: workers that met it first at once raced on
  // its making (ThreadSanitizer, the first scrapes of a test).
  (void)log_enabled(spdlog::level::debug);
  HttpServer* self = server.get();
  server->loop_ = HttpLoop::start(
      loop, [self](const HttpRequest& req) { return self->handle(req); }, error);
  if (!server->loop_) return nullptr;
  return server;
}

HttpServer::~HttpServer() = default;

void HttpServer::set_basic_auth_users(std::map<std::string, std::string> users) {
  std::lock_guard<std::mutex> lock(users_mu_);
  users_ = std::move(users);
}

bool HttpServer::authorized(const HttpRequest& req) {
  std::string user;
  std::string hash;
  std::string password;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(users_mu_);
    if (users_.empty()) return true;
    const char* header = req.header("authorization");
    // The scheme is case-insensitive (RFC 9110 §11.1).
    if (header == nullptr || strncasecmp(header, "Basic ", 6) != 0) return false;
    const std::string pair = base64_decode(header + 6);
    const auto colon = pair.find(':');
    // A NUL would end the password where bcrypt reads it: never a credential.
    if (colon == std::string::npos || pair.find('\0') != std::string::npos) return false;
    user = pair.substr(0, colon);
    password = pair.substr(colon + 1);
    auto it = users_.find(user);
    known = it != users_.end();
    // An unknown user is checked against a configured hash all the same,
    // so that the time a refusal takes does not say which users exist.
    hash = known ? it->second : users_.begin()->second;
  }
  const bool ok = passwords_.check(known ? user : "", password, hash);  // slow: outside the lock
  return known && ok;
}

static_assert(HttpServer::kNotFound == SelfMetrics::kPaths.size() - 1, "the routes are the paths");

size_t HttpServer::route(const std::string& uri) const {
  if (uri == options_.telemetry_path) return kTelemetry;
  if (uri == "/api/v1/snapshot" && options_.snapshot_json) return kSnapshot;
  if (uri == "/api/v1/deaths" && options_.deaths_json) return kDeaths;
  if (uri == "/-/healthy") return kHealthy;
  if (uri == "/-/ready") return kReady;
  if (uri == "/") return kLanding;
  return kNotFound;
}

HttpReply HttpServer::reply(int status, const char* type, std::string body, bool head,
                            const char* extra) const {
  HttpReply r;
  r.status = status;
  r.headers = std::string("Content-Type: ") + type + "\r\n" + extra + configured_headers_;
  r.body = std::move(body);
  r.head_only = head;
  return r;
}

HttpReply HttpServer::handle(const HttpRequest& req) {
  const size_t to = route(req.path);
  HttpReply r = serve(req, to);
  if (!r.stream) {
    SelfMetrics::process().count_request(to, r.status);
    return r;
  }
  // A streamed reply is counted once rendered, as a whole one: a scrape
  // does not count itself.
  r.stream = [inner = std::move(r.stream), to, status = r.status](const HttpReply::Writer& w) {
    inner(w);
    SelfMetrics::process().count_request(to, status);
  };
  return r;
}

HttpReply HttpServer::serve(const HttpRequest& req, size_t to) {
  const bool head = req.method == "HEAD";
  if (!authorized(req))
    return reply(401, "text/plain; charset=utf-8", "Unauthorized\n", head,
                 "WWW-Authenticate: Basic realm=\"gym-exporter\"\r\n");
  if (req.method != "GET" && !head)
    return reply(405, "text/plain; charset=utf-8", "method " + req.method + " not allowed\n", false,
                 "Allow: GET, HEAD\r\n");
  switch (to) {
    case kTelemetry:
      return serve_telemetry(req, head);
    case kSnapshot:
      return reply(200, "application/json", options_.snapshot_json(), head);
    case kDeaths: {
      std::string error;
      std::string body = options_.deaths_json(req.query, &error);
      if (!error.empty()) return reply(400, "text/plain; charset=utf-8", error + "\n", head);
      return reply(200, "application/json", std::move(body), head);
    }
    case kHealthy:
    case kReady:
      return reply(200, "text/plain; charset=utf-8", "OK\n", head);
    case kLanding:
      return reply(200, "text/html; charset=utf-8", landing_page_(), head);
    default:
      return reply(404, "text/plain; charset=utf-8", "404 page not found\n", head);
  }
}

// The exposition streamed: rendered, compressed and sent a piece at a time
// (http/loop.h), so that a scrape holds a few pieces, not the reply once
// plain and once compressed.
HttpReply HttpServer::serve_telemetry(const HttpRequest& req, bool head) {
  const Negotiated wanted = negotiate_accept(req.header("accept"));
  const Encoder* encoder = &encoder_for(wanted.format, wanted.escaping);
  // Compression that cannot start (no memory for the coder's state) leaves
  // the reply plain. Vary on every reply, compressed or not: caches must
  // key on both.
  const std::shared_ptr<Coder> coder = acquire_coder(choose_coding(req.header("accept-encoding")));
  const std::string headers =
      (coder ? std::string("Content-Encoding: ") + coding_name(coder->coding()) + "\r\n" : "") +
      "Vary: Accept, Accept-Encoding\r\n";
  HttpReply r = reply(200, std::string(encoder->content_type()).c_str(), {}, head, headers.c_str());
  r.stream = [this, encoder, coder,
              names = requested_names(req.query)](const HttpReply::Writer& to) {
    size_t bytes = 0;
    if (!coder) {
      bytes = exposition_->render(*encoder, names, to);
    } else {
      bytes = exposition_->render(*encoder, names, [&](std::string_view piece) {
        if (!coder->add(piece, to)) throw std::runtime_error("compression failed");
      });
      if (!coder->finish(to)) throw std::runtime_error("compression failed");
    }
    if (log_enabled(spdlog::level::debug))
      log_event(spdlog::level::debug, "scrape",
                {{"format", std::string(encoder->name())},
                 {"bytes", std::to_string(bytes)},
                 {"encoding", coder ? coding_name(coder->coding()) : "identity"}});
  };
  return r;
}

}  // namespace gym::exporter
