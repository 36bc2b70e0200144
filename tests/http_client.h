// A minimal HTTP/1.1 client for tests of the exporter: one request per
// connection, to 127.0.0.1; a chunked body is put back together (and
// checked: a body cut short or badly framed is "<bad chunking>").
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <map>
#include <sstream>
#include <string>

namespace gym::testing {

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

// A TCP connection to 127.0.0.1:port; -1 when it cannot be made.
inline int connect_loopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The body of a chunked reply (RFC 9112 7.1), or "<bad chunking>" when it is
// not one whole chunked body (cut short, a size that is not hex).
inline std::string dechunk(const std::string& raw) {
  std::string body;
  for (size_t at = 0;;) {
    const size_t eol = raw.find("\r\n", at);
    if (eol == std::string::npos || eol == at || eol - at > 15) return "<bad chunking>";
    size_t size = 0;
    for (size_t i = at; i < eol; ++i) {
      const char c = char(std::tolower(raw[i]));
      if (!std::isxdigit(static_cast<unsigned char>(c))) return "<bad chunking>";
      size = size * 16 + size_t(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    at = eol + 2;
    if (size == 0) return raw.compare(at, std::string::npos, "\r\n") == 0 ? body : "<bad chunking>";
    if (raw.size() < at + size + 2 || raw.compare(at + size, 2, "\r\n") != 0)
      return "<bad chunking>";
    body.append(raw, at, size);
    at += size + 2;
  }
}

inline Response http(int port, const std::string& method, const std::string& path,
                     const std::string& extra_headers = "") {
  Response r;
  const int fd = connect_loopback(port);
  if (fd < 0) return r;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" +
                    extra_headers + "\r\n";
  ::send(fd, req.data(), req.size(), 0);
  std::string raw;
  char buf[8192];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) raw.append(buf, size_t(n));
  ::close(fd);
  auto end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return r;
  std::istringstream head(raw.substr(0, end));
  std::string line;
  std::getline(head, line);
  r.status = std::stoi(line.substr(9, 3));
  while (std::getline(head, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (char& c : name) c = char(std::tolower(c));
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    if (!value.empty() && value.back() == '\r') value.pop_back();
    r.headers[name] = value;
  }
  r.body = raw.substr(end + 4);
  if (r.headers.count("transfer-encoding") != 0 && r.headers["transfer-encoding"] == "chunked")
    r.body = dechunk(r.body);
  return r;
}

}  // namespace gym::testing
