// The sockets the HTTP loop accepts connections on: TCP ("[host]:port",
// port 0 picks a free one), Unix ("unix:/path"), or those systemd passed
// (socket activation: LISTEN_PID and LISTEN_FDS, sd_listen_fds(3)). Sockets
// passed to this process are used whenever there are any (a .socket unit
// started it), instead of the addresses; `systemd` makes them required.
//
// A Unix socket is made with `unix_mode` and removed when closed (if the
// path is still the socket made). A path that is a live socket (one that
// accepts a connection: another exporter's) is refused; a stale one (a
// crashed exporter's) is replaced; a path that is anything else is refused.
//
// Thread-safety: plain functions; open_listeners reads and unsets the
// environment (systemd's variables), so call it before other threads do.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace gym::exporter::http {

struct Listener {
  int fd = -1;
  std::string address;    // as configured, or "systemd:FD"
  std::string unix_path;  // a Unix socket made here: removed when closed
  ino_t unix_ino = 0;
  int port = 0;  // a TCP listener's bound port; 0 otherwise
};

struct ListenOptions {
  std::vector<std::string> addresses;  // ignored with systemd
  bool systemd = false;                // systemd's sockets required
  mode_t unix_mode = 0660;
};

// Whether `address` is "unix:/path" (and the path, in `path`).
bool unix_address(const std::string& address, std::string* path = nullptr);

// Whether systemd passed this process sockets (LISTEN_PID is ours).
bool systemd_passed_sockets();

// Every listener, or none and false with a one-line reason in `error`.
bool open_listeners(const ListenOptions& options, std::vector<Listener>& out, std::string* error);

// Closes it, removing the Unix socket it made.
void close_listener(Listener& l);

}  // namespace gym::exporter::http
