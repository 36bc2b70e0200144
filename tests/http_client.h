// A minimal HTTP/1.1 client for tests of the exporter: one request per
// connection, to 127.0.0.1.
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
  return r;
}

}  // namespace gym::testing
