// The kernel's process events (the proc connector: netlink
// NETLINK_CONNECTOR, group CN_IDX_PROC): every fork, exec and exit on the
// host as it happens, with an exit's wait status. Only whole processes:
// a thread's fork or exit is not one. Subscribing takes root or
// CAP_NET_ADMIN in the host's network and pid namespaces; without them,
// open() says why and nothing else changes.
//
// Thread-safety: parse_proc_events is pure; one ProcConnector belongs to one
// thread (its reader), close() excepted.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gym::exporter::procev {

struct ProcEvent {
  enum class Kind : uint8_t { kFork, kExec, kExit };
  Kind kind = Kind::kExit;
  pid_t pid = 0;        // the process (its thread group id)
  pid_t parent = 0;     // kFork: the parent process
  uint32_t status = 0;  // kExit: the wait(2) status (WIFEXITED, WTERMSIG...)
};

// The events of one netlink datagram (several messages may share it),
// appended to `out`. Returns the messages it skipped as malformed (too short,
// not the proc connector's); thread events and event kinds it does not use
// are skipped silently.
uint64_t parse_proc_events(std::string_view datagram, std::vector<ProcEvent>& out);

class ProcConnector {
 public:
  // Subscribed, or nullptr with `why` (no permission, no connector).
  static std::unique_ptr<ProcConnector> open(std::string* why);
  ~ProcConnector();
  ProcConnector(const ProcConnector&) = delete;
  ProcConnector& operator=(const ProcConnector&) = delete;

  enum class Read {
    kEvents,   // some arrived (appended)
    kTimeout,  // none within the timeout
    kLost,     // the kernel dropped events (the socket's buffer overran);
               // those read before are appended
    kClosed,   // the socket failed or was closed: no more events
  };
  // Waits up to `timeout` for a datagram; `malformed` counts skipped messages.
  Read read(std::vector<ProcEvent>& out, std::chrono::milliseconds timeout, uint64_t* malformed);
  // Ends a read() waiting now, and every later one, at once with kTimeout:
  // how its reader is told to stop. Any thread.
  void wake();

 private:
  ProcConnector(int fd, int wake) : fd_(fd), wake_(wake) {}
  int fd_;
  int wake_;  // an eventfd read() also waits on
};

}  // namespace gym::exporter::procev
