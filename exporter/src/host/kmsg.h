// The kernel's log (/dev/kmsg) as far as OOM kills go: every kill the OOM
// killer makes is logged, with the victim's pid, name and memory and, for a
// memory cgroup's OOM, the cgroup that was out of memory and its usage and
// limit, before the victim gets its SIGKILL. The formats of kernels 4.19 to
// 6.x: "memory: usage 32768kB, limit 32768kB, failcnt 9" (a memory cgroup's
// OOM), "oom-kill:constraint=...,oom_memcg=/a,task_memcg=/a/b,task=python3,
// pid=123,uid=0" (4.19 on), then "Memory cgroup out of memory: Killed
// process 123 (python3) total-vm:..kB, anon-rss:..kB, file-rss:..kB,
// shmem-rss:..kB, ..." (or "Out of memory: Killed process ..." for the
// host's; older kernels: "Killed process ..." alone).
//
// Thread-safety: an OomParser and a KmsgReader each belong to one thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gym::exporter::kmsg {

struct OomKill {
  pid_t pid = 0;
  std::string task;        // the victim's comm
  std::string oom_memcg;   // the memory cgroup that was out of memory ("": the host)
  std::string task_memcg;  // the victim's own memory cgroup
  std::optional<uint64_t> anon_rss_bytes, file_rss_bytes, shmem_rss_bytes;
  std::optional<uint64_t> memcg_usage_bytes, memcg_limit_bytes;  // the out-of-memory cgroup's
};

// The message of a /dev/kmsg record ("prio,seq,usec,flags;message", then
// continuation lines): its first line's text; empty when it is not one.
std::string_view record_message(std::string_view record);

// Reads the messages of one OOM kill after another: each returns the kill
// the message completes ("Killed process"), with what the messages before it
// said of the same kill.
class OomParser {
 public:
  std::optional<OomKill> message(std::string_view text);

 private:
  std::optional<uint64_t> usage_, limit_;  // the last "memory: usage" line's
  std::optional<OomKill> pending_;         // the last "oom-kill:" line's
};

class KmsgReader {
 public:
  // At the log's end (what was logged before is not read), or nullptr with
  // `why` (no /dev/kmsg, no permission).
  static std::unique_ptr<KmsgReader> open(const std::string& path, std::string* why);
  ~KmsgReader();
  KmsgReader(const KmsgReader&) = delete;
  KmsgReader& operator=(const KmsgReader&) = delete;
  // The OOM kills logged since the last call (records overwritten before
  // they were read are counted in `lost`).
  std::vector<OomKill> read(uint64_t* lost);
  int fd() const { return fd_; }

 private:
  explicit KmsgReader(int fd) : fd_(fd) {}
  int fd_;
  OomParser parser_;
};

}  // namespace gym::exporter::kmsg
