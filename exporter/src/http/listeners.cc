// Opening and closing the HTTP loop's listening sockets (listeners.h).
#include "http/listeners.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace gym::exporter::http {

namespace {

constexpr int kBacklog = 1024;

std::string errno_text(int e = errno) {
  std::string why = std::strerror(e);
  if (!why.empty()) why[0] = char(std::tolower(static_cast<unsigned char>(why[0])));
  return why;
}

std::pair<std::string, std::string> split_address(const std::string& address) {
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

// The port a TCP socket is bound to; 0 for any other socket.
int tcp_port(int fd) {
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) return 0;
  if (bound.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  if (bound.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return 0;
}

// A TCP listener on the first address `address` resolves to.
bool listen_tcp(const std::string& address, Listener& l, std::string* error) {
  const auto [host, service] = split_address(address);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int e =
          ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      e != 0 || found == nullptr) {
    *error = std::string("cannot resolve it: ") + ::gai_strerror(e);
    return false;
  }
  const addrinfo& a = *found;
  const int fd = ::socket(a.ai_family, a.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a.ai_protocol);
  const int on = 1;
  if (fd >= 0) (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (fd < 0 || ::bind(fd, a.ai_addr, a.ai_addrlen) != 0 || ::listen(fd, kBacklog) != 0) {
    *error = errno_text();
    if (fd >= 0) ::close(fd);
    ::freeaddrinfo(found);
    return false;
  }
  ::freeaddrinfo(found);
  l.fd = fd;
  l.port = tcp_port(fd);
  return true;
}

// Whether a Unix socket at `addr` accepts connections now.
bool live_socket(const sockaddr_un& addr) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const bool live = rc == 0 || errno == EAGAIN || errno == EINPROGRESS;
  ::close(fd);
  return live;
}

// A Unix listener at `path`, replacing a stale socket there, never a live
// one or anything else.
bool listen_unix(const std::string& path, mode_t mode, Listener& l, std::string* error) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path[0] != '/' || path.size() >= sizeof addr.sun_path) {
    *error = "a Unix socket's path must be absolute and shorter than " +
             std::to_string(sizeof addr.sun_path) + " bytes";
    return false;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      *error = "the path exists and is not a socket";
      return false;
    }
    if (live_socket(addr)) {
      *error = "a live socket is there (another process serves it)";
      return false;
    }
    ::unlink(path.c_str());  // a stale socket: its server is gone
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    *error = errno_text();
    if (fd >= 0) ::close(fd);
    return false;
  }
  l.fd = fd;
  l.unix_path = path;
  if (::lstat(path.c_str(), &st) == 0) l.unix_ino = st.st_ino;
  if (::chmod(path.c_str(), mode) != 0 || ::listen(fd, kBacklog) != 0) {
    *error = errno_text();
    close_listener(l);
    return false;
  }
  return true;
}

// The sockets systemd passed this process (from descriptor 3), each checked
// to be a listening stream socket; the variables are unset so that children
// do not take them for theirs.
bool systemd_listeners(std::vector<Listener>& out, std::string* error) {
  const char* pid = std::getenv("LISTEN_PID");
  const char* fds = std::getenv("LISTEN_FDS");
  const bool ours = pid != nullptr && std::strtol(pid, nullptr, 10) == ::getpid();
  const long n = fds != nullptr && ours ? std::strtol(fds, nullptr, 10) : 0;
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  if (n <= 0 || n > 64) {
    *error = "--web.systemd-socket: systemd passed no socket (LISTEN_PID, LISTEN_FDS)";
    return false;
  }
  for (int fd = 3; fd < 3 + n; ++fd) {
    int listening = 0, type = 0;
    socklen_t len = sizeof listening;
    const bool ok = ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 &&
                    listening != 0 &&
                    (len = sizeof type, ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0) &&
                    type == SOCK_STREAM;
    if (!ok) {
      *error = "--web.systemd-socket: descriptor " + std::to_string(fd) +
               " is not a listening stream socket";
      return false;
    }
    (void)::fcntl(fd, F_SETFD, FD_CLOEXEC);
    (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    Listener l;
    l.fd = fd;
    l.address = "systemd:" + std::to_string(fd);
    l.port = tcp_port(fd);
    out.push_back(std::move(l));
  }
  return true;
}

}  // namespace

bool unix_address(const std::string& address, std::string* path) {
  if (!address.starts_with("unix:")) return false;
  if (path != nullptr) *path = address.substr(5);
  return true;
}

bool systemd_passed_sockets() {
  const char* pid = std::getenv("LISTEN_PID");
  const char* fds = std::getenv("LISTEN_FDS");
  return pid != nullptr && fds != nullptr && std::strtol(pid, nullptr, 10) == ::getpid() &&
         std::strtol(fds, nullptr, 10) > 0;
}

bool open_listeners(const ListenOptions& options, std::vector<Listener>& out, std::string* error) {
  std::vector<Listener> made;
  bool ok = true;
  if (options.systemd || systemd_passed_sockets()) {
    ok = systemd_listeners(made, error);
  } else if (options.addresses.empty()) {
    *error = "no listen address";
    ok = false;
  }
  const bool systemd = !made.empty();
  for (size_t i = 0; ok && !systemd && i < options.addresses.size(); ++i) {
    const std::string& address = options.addresses[i];
    Listener l;
    l.address = address;
    std::string path, why;
    ok = unix_address(address, &path) ? listen_unix(path, options.unix_mode, l, &why)
                                      : listen_tcp(address, l, &why);
    if (!ok) *error = "cannot listen on " + address + ": " + why;
    if (ok) made.push_back(std::move(l));
  }
  if (!ok) {
    for (Listener& l : made)
      if (!l.address.starts_with("systemd:")) close_listener(l);
    return false;
  }
  out = std::move(made);
  return true;
}

void close_listener(Listener& l) {
  if (!l.unix_path.empty()) {
    struct stat st {};
    if (::lstat(l.unix_path.c_str(), &st) == 0 && st.st_ino == l.unix_ino)
      ::unlink(l.unix_path.c_str());
    l.unix_path.clear();
  }
  if (l.fd >= 0) ::close(l.fd);
  l.fd = -1;
}

}  // namespace gym::exporter::http
