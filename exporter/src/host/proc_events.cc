#include "host/proc_events.h"

#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gym::exporter::procev {

namespace {

// One message: a netlink header, the connector's, then the event. The
// kernel aligns each message to NLMSG_ALIGNTO; `at` need not be aligned, so
// every field is copied out, never read in place.
template <class T>
T copy_at(std::string_view bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

bool parse_one(std::string_view msg, std::vector<ProcEvent>& out) {
  const size_t cn_at = NLMSG_HDRLEN;
  if (msg.size() < cn_at + sizeof(cn_msg)) return false;
  const auto cn = copy_at<cn_msg>(msg, cn_at);
  if (cn.id.idx != CN_IDX_PROC || cn.id.val != CN_VAL_PROC) return false;
  const size_t ev_at = cn_at + sizeof(cn_msg);
  // The event's header and the largest member we read (exit's).
  constexpr size_t kHead = offsetof(proc_event, event_data);
  if (cn.len < kHead || msg.size() - ev_at < kHead) return false;
  const auto what = copy_at<uint32_t>(msg, ev_at + offsetof(proc_event, what));
  const size_t data_at = ev_at + kHead;
  const size_t have = std::min<size_t>(cn.len, msg.size() - ev_at) - kHead;
  ProcEvent e;
  switch (what) {
    case proc_event::PROC_EVENT_FORK: {
      using Fork = decltype(proc_event::event_data.fork);
      if (have < sizeof(Fork)) return false;
      const auto f = copy_at<Fork>(msg, data_at);
      if (f.child_pid != f.child_tgid) return true;  // a thread
      e = {ProcEvent::Kind::kFork, f.child_tgid, f.parent_tgid, 0};
      break;
    }
    case proc_event::PROC_EVENT_EXEC: {
      using Exec = decltype(proc_event::event_data.exec);
      if (have < sizeof(Exec)) return false;
      const auto x = copy_at<Exec>(msg, data_at);
      e = {ProcEvent::Kind::kExec, x.process_tgid, 0, 0};
      break;
    }
    case proc_event::PROC_EVENT_EXIT: {
      // exit_code and exit_signal come first in every kernel's layout; the
      // parent fields (4.18 on) are not read.
      constexpr size_t kExit = 4 * sizeof(uint32_t);
      if (have < kExit) return false;
      const auto pid = copy_at<int32_t>(msg, data_at);
      const auto tgid = copy_at<int32_t>(msg, data_at + 4);
      const auto code = copy_at<uint32_t>(msg, data_at + 8);
      if (pid != tgid) return true;  // a thread of a process that lives on
      e = {ProcEvent::Kind::kExit, tgid, 0, code};
      break;
    }
    default:
      return true;  // an event we do not use (uid, sid, comm, ptrace...)
  }
  if (e.pid <= 0) return false;
  out.push_back(e);
  return true;
}

}  // namespace

uint64_t parse_proc_events(std::string_view datagram, std::vector<ProcEvent>& out) {
  uint64_t malformed = 0;
  while (datagram.size() >= NLMSG_HDRLEN) {
    const auto h = copy_at<nlmsghdr>(datagram, 0);
    if (h.nlmsg_len < NLMSG_HDRLEN || h.nlmsg_len > datagram.size()) return malformed + 1;
    if (h.nlmsg_type != NLMSG_NOOP && h.nlmsg_type != NLMSG_ERROR &&
        !parse_one(datagram.substr(0, h.nlmsg_len), out))
      ++malformed;
    const size_t next = NLMSG_ALIGN(h.nlmsg_len);
    if (next >= datagram.size()) break;
    datagram.remove_prefix(next);
  }
  return malformed;
}

std::unique_ptr<ProcConnector> ProcConnector::open(std::string* why) {
  const int fd = ::socket(PF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_CONNECTOR);
  if (fd < 0) {
    *why = std::string("netlink connector socket: ") + std::strerror(errno);
    return nullptr;
  }
  // A larger buffer rides out a burst (a fork storm) while the reader sleeps.
  const int bytes = 4 << 20;
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes);
  sockaddr_nl addr{};
  addr.nl_family = AF_NETLINK;
  addr.nl_groups = CN_IDX_PROC;
  addr.nl_pid = 0;  // the kernel assigns one
  // The subscription: a netlink header, the connector's, then the op.
  nlmsghdr h{};
  cn_msg cn{};
  const uint32_t op = PROC_CN_MCAST_LISTEN;
  char listen[NLMSG_HDRLEN + sizeof cn + sizeof op] = {};
  h.nlmsg_len = sizeof listen;
  h.nlmsg_type = NLMSG_DONE;
  cn.id = {CN_IDX_PROC, CN_VAL_PROC};
  cn.len = sizeof op;
  std::memcpy(listen, &h, sizeof h);
  std::memcpy(listen + NLMSG_HDRLEN, &cn, sizeof cn);
  std::memcpy(listen + NLMSG_HDRLEN + sizeof cn, &op, sizeof op);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::send(fd, listen, sizeof listen, 0) != ssize_t(sizeof listen)) {
    *why = std::string("subscribing to process events: ") + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  const int wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    *why = std::string("eventfd: ") + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<ProcConnector>(new ProcConnector(fd, wake));
}

ProcConnector::~ProcConnector() {
  ::close(fd_);
  ::close(wake_);
}

void ProcConnector::wake() {
  const uint64_t one = 1;
  (void)!::write(wake_, &one, sizeof one);
}

ProcConnector::Read ProcConnector::read(std::vector<ProcEvent>& out,
                                        std::chrono::milliseconds timeout, uint64_t* malformed) {
  pollfd p[2] = {{fd_, POLLIN, 0}, {wake_, POLLIN, 0}};
  const int ready = ::poll(p, 2, int(timeout.count()));
  if (ready == 0 || (ready < 0 && errno == EINTR)) return Read::kTimeout;
  if (ready < 0) return Read::kClosed;
  if (p[1].revents != 0) return Read::kTimeout;  // woken: its reader stops
  alignas(nlmsghdr) char buf[16384];
  bool any = false;
  // At most 256 datagrams a call: a fork storm does not keep it here.
  for (int i = 0; i < 256; ++i) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      *malformed += parse_proc_events(std::string_view(buf, size_t(n)), out);
      any = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ENOBUFS) return Read::kLost;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return Read::kClosed;
  }
  return any ? Read::kEvents : Read::kTimeout;
}

}  // namespace gym::exporter::procev
