#include "http_server.h"

#include <civetweb.h>
#include <zlib.h>

#include <cstring>
#include <mutex>

namespace gym::exporter {

namespace {

constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

void send(mg_connection* conn, int status, const char* reason, const char* type,
          const std::string& body, bool head, const char* extra_headers = "") {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
            "Cache-Control: no-store\r\n\r\n",
            status, reason, type, body.size(), extra_headers);
  if (!head && !body.empty()) mg_write(conn, body.data(), body.size());
}

bool accepts_gzip(mg_connection* conn) {
  const char* ae = mg_get_header(conn, "Accept-Encoding");
  return ae != nullptr && std::strstr(ae, "gzip") != nullptr;
}

// "[host]:port" -> CivetWeb's listening_ports form.
std::string civet_port(const std::string& address) {
  if (!address.empty() && address[0] == ':') return address.substr(1);
  return address;
}

std::once_flag g_init;

}  // namespace

std::string gzip_compress(const std::string& in) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
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
  std::call_once(g_init, [] { mg_init_library(0); });
  std::unique_ptr<HttpServer> server(new HttpServer);
  server->options_ = options;
  server->exposition_ = &exposition;
  server->landing_page_ = std::move(landing_page);
  const std::string ports = civet_port(options.listen_address);
  const std::string threads = std::to_string(options.threads);
  const char* opts[] = {"listening_ports",
                        ports.c_str(),
                        "num_threads",
                        threads.c_str(),
                        "request_timeout_ms",
                        "10000",
                        "enable_keep_alive",
                        "yes",
                        "max_request_size",
                        "16384",
                        nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };  // we log
  mg_init_data init{};
  init.callbacks = &callbacks;
  init.user_data = server.get();
  init.configuration_options = opts;
  char text[256] = {0};
  unsigned code = 0;
  mg_error_data err{};
  err.code = &code;
  err.text = text;
  err.text_buffer_size = sizeof text;
  server->ctx_ = mg_start2(&init, &err);
  if (server->ctx_ == nullptr) {
    if (error)
      *error = "cannot listen on " + options.listen_address + ": " +
               (text[0] ? std::string(text) : "unknown error");
    return nullptr;
  }
  mg_server_port port{};
  if (mg_get_server_ports(server->ctx_, 1, &port) > 0) server->port_ = port.port;
  mg_set_request_handler(server->ctx_, "/", &HttpServer::handle, server.get());
  return server;
}

HttpServer::~HttpServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

int HttpServer::handle(mg_connection* conn, void* self_ptr) {
  auto* self = static_cast<HttpServer*>(self_ptr);
  const mg_request_info* req = mg_get_request_info(conn);
  const std::string method = req->request_method ? req->request_method : "";
  const std::string uri = req->local_uri ? req->local_uri : "";
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    send(conn, 405, "Method Not Allowed", "text/plain; charset=utf-8",
         "method " + method + " not allowed\n", false, "Allow: GET, HEAD\r\n");
    return 405;
  }
  if (uri == self->options_.telemetry_path) {
    std::string body = self->exposition_->render();
    if (accepts_gzip(conn)) {
      send(conn, 200, "OK", kMetricsContentType, gzip_compress(body), head,
           "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n");
    } else {
      send(conn, 200, "OK", kMetricsContentType, body, head);
    }
    return 200;
  }
  if (uri == "/-/healthy" || uri == "/-/ready") {
    send(conn, 200, "OK", "text/plain; charset=utf-8", "OK\n", head);
    return 200;
  }
  if (uri == "/") {
    send(conn, 200, "OK", "text/html; charset=utf-8", self->landing_page_(), head);
    return 200;
  }
  send(conn, 404, "Not Found", "text/plain; charset=utf-8", "404 page not found\n", head);
  return 404;
}

}  // namespace gym::exporter
