#include "http_server.h"

#include <civetweb.h>
#include <spdlog/spdlog.h>

#include <netdb.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "exposition/negotiate.h"
#include "http_tls.h"
#include "logging.h"
#include "procfs.h"
#include "self_metrics.h"

namespace gym::exporter {

namespace {

// The name[] query parameters (URL-decoded), as client_python reads them.
std::set<std::string> requested_names(const char* query) {
  std::set<std::string> names;
  if (query == nullptr) return names;
  const size_t len = std::strlen(query);
  std::vector<char> buf(len + 1);
  // The brackets as typed, or percent-encoded (as Go's url.Values sends them).
  for (const char* key : {"name[]", "name%5B%5D"}) {
    for (size_t i = 0;; ++i) {
      const int n = mg_get_var2(query, len, key, buf.data(), buf.size(), i);
      if (n < 0) break;
      names.emplace(buf.data(), size_t(n));
    }
  }
  return names;
}

// `configured`: the web configuration's headers, on every reply.
void send(mg_connection* conn, const std::string& configured, int status, const char* reason,
          const char* type, const std::string& body, bool head, const char* extra_headers = "") {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s"
            "Cache-Control: no-store\r\n\r\n",
            status, reason, type, body.size(), extra_headers, configured.c_str());
  if (!head && !body.empty()) mg_write(conn, body.data(), body.size());
}

}  // namespace

namespace {

// "[host]:port" -> CivetWeb's listening_ports form.
std::string civet_port(const std::string& address) {
  if (!address.empty() && address[0] == ':') return address.substr(1);
  return address;
}

std::once_flag g_init;

// The host and port of a listen address ([host]:port, "[v6]:port" or
// ":port"); the host may be empty.
std::pair<std::string, std::string> split_listen_address(const std::string& address) {
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos) return {"", address};
    const size_t colon = address.find(':', close);
    return {address.substr(1, close - 1),
            colon == std::string::npos ? "" : address.substr(colon + 1)};
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return {"", address};
  return {address.substr(0, colon), address.substr(colon + 1)};
}

// Runs `use` on the stream addresses of host:port until it returns true.
template <class Use>
void for_each_address(const std::string& host, const std::string& port, int flags, Use use) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | flags;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found) != 0)
    return;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next)
    if (use(*a)) break;
  ::freeaddrinfo(found);
}

// Connects to the listener at `address` on `port` (an unspecified or empty
// host is this host's loopback) and hangs up.
void wake_listener(const std::string& address, int port) {
  std::string host = split_listen_address(address).first;
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  for_each_address(host, std::to_string(port), 0, [](const addrinfo& a) {
    const int fd = ::socket(a.ai_family, a.ai_socktype | SOCK_CLOEXEC, a.ai_protocol);
    if (fd < 0) return false;
    const bool woke = ::connect(fd, a.ai_addr, a.ai_addrlen) == 0;
    ::close(fd);
    return woke;
  });
}

// Why `address` cannot be bound (as CivetWeb would bind it), for a clear
// error: "address already in use"; empty when it can be (or no reason).
std::string bind_error(const std::string& address) {
  const auto [host, port] = split_listen_address(address);
  std::string why;
  for_each_address(host, port, AI_PASSIVE, [&](const addrinfo& a) {
    const int fd = ::socket(a.ai_family, a.ai_socktype | SOCK_CLOEXEC, a.ai_protocol);
    if (fd < 0) return false;
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    const bool bound = ::bind(fd, a.ai_addr, a.ai_addrlen) == 0;
    if (!bound) why = std::strerror(errno);
    ::close(fd);
    return true;  // the first address is the one that matters
  });
  if (!why.empty()) why[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(why[0])));
  return why;
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

// CivetWeb's options for `options`: strings that live as long as this.
struct CivetOptions {
  std::string ports;
  std::string threads;
  std::string pem;  // the certificate and key's memory file, by path
  int pem_fd = -1;
  std::vector<const char*> opts;

  ~CivetOptions() { close_pem(); }
  void close_pem() {
    if (pem_fd >= 0) ::close(pem_fd);
    pem_fd = -1;
  }
  bool build(const HttpServer::Options& options, std::string* error) {
    const WebConfig& web = options.web;
    ports = civet_port(options.listen_address) + (web.tls ? "s" : "");
    threads = std::to_string(options.threads);
    opts = {"listening_ports",    ports.c_str(), "num_threads",       threads.c_str(),
            "request_timeout_ms", "10000",       "enable_keep_alive", "yes",
            "max_request_size",   "16384"};
    if (web.tls) {
      pem_fd = tls::combined_pem(web, &pem, error);
      if (pem_fd < 0) return false;
      opts.insert(opts.end(), {"ssl_certificate", pem.c_str(), "ssl_protocol_version",
                               tls::protocol_version(web.min_version)});
      if (web.client_auth_type != "NoClientCert")
        opts.insert(opts.end(),
                    {"ssl_verify_peer",
                     web.client_auth_type == "RequireAndVerifyClientCert" ? "yes" : "optional",
                     "ssl_ca_file", web.client_ca_file.c_str()});
    }
    opts.push_back(nullptr);
    return true;
  }
};

}  // namespace

std::unique_ptr<HttpServer> HttpServer::start(const Options& options, Exposition& exposition,
                                              std::function<std::string()> landing_page,
                                              std::string* error) {
  std::call_once(g_init, [] { mg_init_library(MG_FEATURES_TLS); });
  std::unique_ptr<HttpServer> server(new HttpServer);
  server->options_ = options;
  server->exposition_ = &exposition;
  server->landing_page_ = std::move(landing_page);
  CivetOptions civet;
  if (!civet.build(options, error)) return nullptr;
  std::vector<const char*>& opts = civet.opts;
  server->users_ = options.web.basic_auth_users;
  for (const auto& [name, value] : options.web.headers)
    server->configured_headers_ += name + ": " + value + "\r\n";
  mg_callbacks callbacks{};
  // CivetWeb's own messages go to our log, at debug level.
  callbacks.log_message = [](const mg_connection*, const char* message) {
    spdlog::debug("civetweb: {}", message);
    return 1;
  };
  callbacks.init_ssl = &tls::init_ssl;
  mg_init_data init{};
  init.callbacks = &callbacks;
  init.user_data = server.get();
  init.configuration_options = opts.data();
  char text[256] = {0};
  unsigned code = 0;
  mg_error_data err{};
  err.code = &code;
  err.text = text;
  err.text_buffer_size = sizeof text;
  server->ctx_ = mg_start2(&init, &err);
  civet.close_pem();  // read at start
  if (server->ctx_ == nullptr) {
    if (error) {
      const std::string why = bind_error(options.listen_address);
      const std::string civet = text[0] ? std::string(text) : "unknown error";
      *error = "cannot listen on " + options.listen_address + ": " +
               (why.empty() ? civet : why + " (" + civet + ")");
    }
    return nullptr;
  }
  mg_server_port port{};
  if (mg_get_server_ports(server->ctx_, 1, &port) > 0) server->port_ = port.port;
  mg_set_request_handler(server->ctx_, "/", &HttpServer::handle, server.get());
  return server;
}

HttpServer::~HttpServer() {
  if (ctx_ == nullptr) return;
  // CivetWeb's listener waits in poll() with a 2 s timeout and mg_stop()
  // waits for it: connections to our own port wake it, so that a stop (and a
  // restart after SIGTERM) is prompt.
  std::atomic<bool> stopped{false};
  std::thread waker([&] {
    while (!stopped.load()) {
      wake_listener(options_.listen_address, port_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  mg_stop(ctx_);
  stopped = true;
  waker.join();
}

void HttpServer::set_basic_auth_users(std::map<std::string, std::string> users) {
  std::lock_guard<std::mutex> lock(users_mu_);
  users_ = std::move(users);
}

bool HttpServer::authorized(mg_connection* conn) {
  std::string user;
  std::string hash;
  std::string password;
  {
    std::lock_guard<std::mutex> lock(users_mu_);
    if (users_.empty()) return true;
    const char* header = mg_get_header(conn, "Authorization");
    if (header == nullptr || std::strncmp(header, "Basic ", 6) != 0) return false;
    const std::string pair = base64_decode(header + 6);
    const auto colon = pair.find(':');
    if (colon == std::string::npos) return false;
    user = pair.substr(0, colon);
    auto it = users_.find(user);
    if (it == users_.end()) return false;
    hash = it->second;
    password = pair.substr(colon + 1);
  }
  return passwords_.check(user, password, hash);  // bcrypt is slow: outside the lock
}

static_assert(HttpServer::kNotFound == SelfMetrics::kPaths.size() - 1, "the routes are the paths");

size_t HttpServer::route(const std::string& uri) const {
  if (uri == options_.telemetry_path) return kTelemetry;
  if (uri == "/api/v1/snapshot" && options_.snapshot_json) return kSnapshot;
  if (uri == "/-/healthy") return kHealthy;
  if (uri == "/-/ready") return kReady;
  if (uri == "/") return kLanding;
  return kNotFound;
}

int HttpServer::handle(mg_connection* conn, void* self_ptr) {
  auto* self = static_cast<HttpServer*>(self_ptr);
  const mg_request_info* req = mg_get_request_info(conn);
  const size_t to = self->route(req->local_uri ? req->local_uri : "");
  const int code = self->serve(conn, req, to);
  SelfMetrics::process().count_request(to, code);
  return code;
}

int HttpServer::serve(mg_connection* conn, const mg_request_info* req, size_t to) {
  const std::string method = req->request_method ? req->request_method : "";
  const bool head = method == "HEAD";
  if (!authorized(conn)) {
    send(conn, configured_headers_, 401, "Unauthorized", "text/plain; charset=utf-8",
         "Unauthorized\n", head, "WWW-Authenticate: Basic realm=\"gym-exporter\"\r\n");
    return 401;
  }
  if (method != "GET" && !head) {
    send(conn, configured_headers_, 405, "Method Not Allowed", "text/plain; charset=utf-8",
         "method " + method + " not allowed\n", false, "Allow: GET, HEAD\r\n");
    return 405;
  }
  switch (to) {
    case kTelemetry:
      return serve_telemetry(conn, req, head);
    case kSnapshot:
      send(conn, configured_headers_, 200, "OK", "application/json", options_.snapshot_json(),
           head);
      return 200;
    case kHealthy:
    case kReady:
      send(conn, configured_headers_, 200, "OK", "text/plain; charset=utf-8", "OK\n", head);
      return 200;
    case kLanding:
      send(conn, configured_headers_, 200, "OK", "text/html; charset=utf-8", landing_page_(), head);
      return 200;
    default:
      send(conn, configured_headers_, 404, "Not Found", "text/plain; charset=utf-8",
           "404 page not found\n", head);
      return 404;
  }
}

int HttpServer::serve_telemetry(mg_connection* conn, const mg_request_info* req, bool head) {
  const char* accept = mg_get_header(conn, "Accept");
  const Format format = negotiate(accept);
  const Encoder& encoder = encoder_for(format, utf8_names(accept, format));
  const std::string content_type(encoder.content_type());
  std::string body = exposition_->render(encoder, requested_names(req->query_string));
  const bool gzip = accepts_gzip(mg_get_header(conn, "Accept-Encoding"));
  if (log_enabled(spdlog::level::debug))
    log_event(spdlog::level::debug, "scrape",
              {{"format", std::string(encoder.name())},
               {"bytes", std::to_string(body.size())},
               {"gzip", gzip ? "true" : "false"}});
  // Vary on every reply, gzipped or not: caches must key on both.
  if (gzip) {
    send(conn, configured_headers_, 200, "OK", content_type.c_str(), gzip_compress(body), head,
         "Content-Encoding: gzip\r\nVary: Accept, Accept-Encoding\r\n");
  } else {
    send(conn, configured_headers_, 200, "OK", content_type.c_str(), body, head,
         "Vary: Accept, Accept-Encoding\r\n");
  }
  return 200;
}

}  // namespace gym::exporter
