#include "http_server.h"

#include <civetweb.h>
#include <spdlog/spdlog.h>
#include <zlib.h>

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
#include "logging.h"
#include "procfs.h"
#include "self_metrics.h"

// The few OpenSSL calls made here (CivetWeb loads OpenSSL itself, at run
// time; the exporter links libssl.so.3 for these alone, so no headers).
extern "C" {
struct ssl_st;
struct ssl_ctx_st;
void SSL_CTX_set_info_callback(ssl_ctx_st* ctx, void (*cb)(const ssl_st*, int, int));
int SSL_get_fd(const ssl_st* ssl);
unsigned long ERR_peek_last_error(void);
void ERR_clear_error(void);
}

namespace gym::exporter {

namespace {

// Plain HTTP to the TLS port: OpenSSL fails the handshake on seeing an HTTP
// request (SSL_R_HTTP_REQUEST) and CivetWeb closes the connection. As Go's
// servers (and so node_exporter) do, answer 400 first, saying why.
void answer_plain_http(const ssl_st* ssl, int where, int ret) {
  constexpr int kAcceptExit = 0x2002;  // SSL_CB_ACCEPT_EXIT
  if (where != kAcceptExit || ret > 0) return;
  const unsigned long e = ERR_peek_last_error();
  // OpenSSL 3's error codes: library in bits 23..30 (SSL is 20), reason in
  // bits 0..22 (SSL_R_HTTP_REQUEST is 156); bit 31 marks system errors.
  if ((e & 0x80000000UL) != 0 || ((e >> 23) & 0xFF) != 20 || (e & 0x7FFFFF) != 156) return;
  static constexpr char kReply[] =
      "HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
      "Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";
  if (const int fd = SSL_get_fd(ssl); fd >= 0)
    (void)::send(fd, kReply, sizeof kReply - 1, MSG_NOSIGNAL);
  ERR_clear_error();  // not left for the thread's next handshake to see
}

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

bool accepts_gzip(const char* accept_encoding) {
  if (accept_encoding == nullptr) return false;
  // Codings with optional q-values (RFC 9110 12.5.3): gzip unless its q, or
  // that of * when gzip is not named, is 0.
  std::optional<double> gzip, any;
  for (const HeaderItem& item : parse_header_list(accept_encoding)) {
    if (item.value == "gzip")
      gzip = item.q;
    else if (item.value == "*")
      any = item.q;
  }
  if (gzip) return *gzip > 0;
  return any && *any > 0;
}

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

// CivetWeb wants the certificate and its key in one PEM file: both go to an
// anonymous memory file (memfd), named to CivetWeb by its /proc/self/fd
// path. The key never reaches a filesystem, and nothing is left behind
// however the exporter ends. Returns the descriptor (closed once the server
// has read it) or -1 with a reason.
int combined_pem(const WebConfig& web, std::string* path, std::string* error) {
  std::string pem;
  for (const std::string* f : {&web.cert_file, &web.key_file}) {
    std::string text;
    if (procfs::read_file(*f, text) != procfs::ReadStatus::kOk) {
      *error = "cannot read " + *f;
      return -1;
    }
    pem += text;
    if (!pem.empty() && pem.back() != '\n') pem += '\n';
  }
  const int fd = ::memfd_create("gym-exporter-tls", MFD_CLOEXEC);
  if (fd < 0) {
    *error = std::string("cannot create a memory file for the TLS key: ") + std::strerror(errno);
    return -1;
  }
  size_t done = 0;
  while (done < pem.size()) {
    const ssize_t n = ::write(fd, pem.data() + done, pem.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error = std::string("cannot write the TLS key to memory: ") + std::strerror(errno);
      ::close(fd);
      return -1;
    }
    done += size_t(n);
  }
  *path = "/proc/self/fd/" + std::to_string(fd);
  return fd;
}

const char* protocol_version(const std::string& min_version) {
  if (min_version == "TLS10") return "2";
  if (min_version == "TLS11") return "3";
  if (min_version == "TLS13") return "5";
  return "4";  // TLS12
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
      pem_fd = combined_pem(web, &pem, error);
      if (pem_fd < 0) return false;
      opts.insert(opts.end(), {"ssl_certificate", pem.c_str(), "ssl_protocol_version",
                               protocol_version(web.min_version)});
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

std::string gzip_compress(const std::string& in) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return {};
  std::string out;
  out.resize(deflateBound(&zs, in.size()) + 32);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

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
  callbacks.init_ssl = [](void* ssl_ctx, void*) {
    SSL_CTX_set_info_callback(static_cast<ssl_ctx_st*>(ssl_ctx), answer_plain_http);
    return 0;  // CivetWeb goes on with its own set-up
  };
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

int HttpServer::handle(mg_connection* conn, void* self_ptr) {
  auto* self = static_cast<HttpServer*>(self_ptr);
  const mg_request_info* req = mg_get_request_info(conn);
  const std::string uri = req->local_uri ? req->local_uri : "";
  const int code = self->serve(conn, req, uri);
  size_t path = SelfMetrics::kPaths.size() - 1;  // other
  if (uri == self->options_.telemetry_path)
    path = 0;
  else if (uri == "/api/v1/snapshot" && self->options_.snapshot_json)
    path = 1;
  else if (uri == "/-/healthy")
    path = 2;
  else if (uri == "/-/ready")
    path = 3;
  else if (uri == "/")
    path = 4;
  SelfMetrics::process().count_request(path, code);
  return code;
}

int HttpServer::serve(mg_connection* conn, const mg_request_info* req, const std::string& uri) {
  HttpServer* self = this;
  if (!self->authorized(conn)) {
    send(conn, configured_headers_, 401, "Unauthorized", "text/plain; charset=utf-8",
         "Unauthorized\n", std::strcmp(req->request_method ? req->request_method : "", "HEAD") == 0,
         "WWW-Authenticate: Basic realm=\"gym-exporter\"\r\n");
    return 401;
  }
  const std::string method = req->request_method ? req->request_method : "";
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    send(conn, configured_headers_, 405, "Method Not Allowed", "text/plain; charset=utf-8",
         "method " + method + " not allowed\n", false, "Allow: GET, HEAD\r\n");
    return 405;
  }
  if (uri == self->options_.telemetry_path) {
    const char* accept = mg_get_header(conn, "Accept");
    const Format format = negotiate(accept);
    const Encoder& encoder = encoder_for(format, utf8_names(accept, format));
    const std::string content_type(encoder.content_type());
    std::string body = self->exposition_->render(encoder, requested_names(req->query_string));
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
  if (uri == "/api/v1/snapshot" && self->options_.snapshot_json) {
    send(conn, configured_headers_, 200, "OK", "application/json", self->options_.snapshot_json(),
         head);
    return 200;
  }
  if (uri == "/-/healthy" || uri == "/-/ready") {
    send(conn, configured_headers_, 200, "OK", "text/plain; charset=utf-8", "OK\n", head);
    return 200;
  }
  if (uri == "/") {
    send(conn, configured_headers_, 200, "OK", "text/html; charset=utf-8", self->landing_page_(),
         head);
    return 200;
  }
  send(conn, configured_headers_, 404, "Not Found", "text/plain; charset=utf-8",
       "404 page not found\n", head);
  return 404;
}

}  // namespace gym::exporter
