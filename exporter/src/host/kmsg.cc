#include "host/kmsg.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace gym::exporter::kmsg {

namespace {

// The number after `key` in `text` (digits, then optionally "kB").
std::optional<uint64_t> number_after(std::string_view text, std::string_view key) {
  const size_t at = text.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  const char* begin = text.data() + at + key.size();
  uint64_t v = 0;
  const auto r = std::from_chars(begin, text.data() + text.size(), v);
  if (r.ec != std::errc() || r.ptr == begin) return std::nullopt;
  return v;
}

std::optional<uint64_t> kb_after(std::string_view text, std::string_view key) {
  const std::optional<uint64_t> kb = number_after(text, key);
  if (!kb || *kb > (UINT64_MAX >> 10)) return std::nullopt;
  return *kb << 10;
}

// The value of `key=` in a comma-separated list, up to the next comma.
std::string field(std::string_view text, std::string_view key) {
  size_t at = 0;
  while ((at = text.find(key, at)) != std::string_view::npos) {
    if (at == 0 || text[at - 1] == ',' || text[at - 1] == ':') break;
    at += key.size();
  }
  if (at == std::string_view::npos) return {};
  const size_t from = at + key.size();
  const size_t to = text.find(',', from);
  return std::string(text.substr(from, to == std::string_view::npos ? to : to - from));
}

std::optional<pid_t> pid_of(std::optional<uint64_t> v) {
  if (!v || *v == 0 || *v > uint64_t(INT32_MAX)) return std::nullopt;
  return pid_t(*v);
}

}  // namespace

std::string_view record_message(std::string_view record) {
  const size_t semi = record.find(';');
  if (semi == std::string_view::npos) return {};
  std::string_view head = record.substr(0, semi);
  if (head.find(',') == std::string_view::npos) return {};
  std::string_view msg = record.substr(semi + 1);
  return msg.substr(0, msg.find('\n'));
}

std::optional<OomKill> OomParser::message(std::string_view text) {
  if (text.starts_with("memory: usage ")) {
    usage_ = kb_after(text, "memory: usage ");
    limit_ = kb_after(text, "limit ");
    return std::nullopt;
  }
  if (text.starts_with("oom-kill:")) {
    OomKill k;
    const std::optional<pid_t> pid = pid_of(number_after(text, ",pid="));
    if (!pid) return std::nullopt;
    k.pid = *pid;
    k.task = field(text, "task=");
    k.oom_memcg = field(text, "oom_memcg=");
    k.task_memcg = field(text, "task_memcg=");
    pending_ = std::move(k);
    return std::nullopt;
  }
  const size_t killed = text.find("Killed process ");
  if (killed == std::string_view::npos) return std::nullopt;
  const std::string_view rest = text.substr(killed);
  const std::optional<pid_t> pid = pid_of(number_after(rest, "Killed process "));
  if (!pid) return std::nullopt;
  OomKill k;
  if (pending_ && pending_->pid == *pid) k = std::move(*pending_);
  k.pid = *pid;
  if (const size_t open = rest.find(" ("), close = rest.rfind(") total-vm");
      k.task.empty() && open != std::string_view::npos && close != std::string_view::npos &&
      close > open)
    k.task = std::string(rest.substr(open + 2, close - open - 2));
  k.anon_rss_bytes = kb_after(rest, "anon-rss:");
  k.file_rss_bytes = kb_after(rest, "file-rss:");
  k.shmem_rss_bytes = kb_after(rest, "shmem-rss:");
  if (text.starts_with("Memory cgroup out of memory")) {
    k.memcg_usage_bytes = usage_;
    k.memcg_limit_bytes = limit_;
  }
  pending_.reset();
  usage_.reset();
  limit_.reset();
  return k;
}

std::unique_ptr<KmsgReader> KmsgReader::open(const std::string& path, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *why = path + ": " + std::strerror(errno);
    return nullptr;
  }
  (void)::lseek(fd, 0, SEEK_END);  // from now on
  return std::unique_ptr<KmsgReader>(new KmsgReader(fd));
}

KmsgReader::~KmsgReader() {
  ::close(fd_);
}

std::vector<OomKill> KmsgReader::read(uint64_t* lost) {
  std::vector<OomKill> out;
  char buf[8192];                   // a record is at most about 1 KiB
  for (int i = 0; i < 4096; ++i) {  // a burst of records: the rest next time
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n > 0) {
      if (auto k = parser_.message(record_message(std::string_view(buf, size_t(n)))))
        out.push_back(std::move(*k));
      continue;
    }
    if (n < 0 && errno == EPIPE) {  // overwritten before we read them; go on
      ++*lost;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EAGAIN: all read
  }
  return out;
}

}  // namespace gym::exporter::kmsg
