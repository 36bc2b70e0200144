// The procfs parsers: pure functions of a file's text (their fixtures are
// in tests/exporter/procfs_test.cc and fuzz/corpus/procfs). Reading the
// files: procfs_files.cc; the process table: process_table.cc.
#include "host/procfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>

#include "gym/proc_stat.h"
#include "host/lines.h"

namespace gym::exporter::procfs {

namespace {

bool to_u64(std::string_view s, uint64_t& out) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool to_i64(std::string_view s, int64_t& out) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// "Key:   123 kB" -> 123 * 1024 (or 123 without a unit).
std::optional<uint64_t> kb_value(std::string_view rest) {
  size_t i = 0;
  while (i < rest.size() && (rest[i] == ' ' || rest[i] == '\t')) ++i;
  size_t j = i;
  while (j < rest.size() && rest[j] >= '0' && rest[j] <= '9') ++j;
  uint64_t v = 0;
  if (j == i || !to_u64(rest.substr(i, j - i), v)) return std::nullopt;
  std::string_view unit = rest.substr(j);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  if (unit.starts_with("kB")) v *= 1024;
  return v;
}

// Calls f(key, bytes) for each "Key: N kB" line (meminfo, smaps_rollup).
template <class F>
void for_each_kb_field(std::string_view text, F&& f) {
  for_each_line(text, [&](std::string_view line) {
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return true;
    if (const std::optional<uint64_t> v = kb_value(line.substr(colon + 1)))
      f(line.substr(0, colon), *v);
    return true;
  });
}

}  // namespace

std::optional<ProcStat> parse_stat(std::string_view text) {
  const std::optional<proc_stat::Split> split = proc_stat::split(text);
  if (!split) return std::nullopt;
  ProcStat st;
  int64_t pid = 0;
  // pid_t is 32 bits: a larger number is not a pid (found by fuzzing).
  constexpr int64_t kMaxPid = std::numeric_limits<pid_t>::max();
  if (!to_i64(split->pid, pid) || pid <= 0 || pid > kMaxPid) return std::nullopt;
  st.pid = pid_t(pid);
  st.comm = std::string(split->comm);
  // Fields 3 .. 24, by number.
  std::string_view f[25];
  int seen = 0;
  proc_stat::for_each_field(split->rest, [&](int n, std::string_view v) {
    f[n] = v;
    seen = n;
    return n < 24;
  });
  if (seen < 24 || f[3].size() != 1) return std::nullopt;
  st.state = f[3][0];
  int64_t ppid = 0;
  if (!to_i64(f[4], ppid) || ppid < 0 || ppid > kMaxPid || !to_u64(f[9], st.flags) ||
      !to_u64(f[14], st.utime_ticks) || !to_u64(f[15], st.stime_ticks) ||
      !to_u64(f[22], st.start_ticks) || !to_u64(f[23], st.vsize_bytes))
    return std::nullopt;
  // rss may be negative in odd kernels' accounting: treat as 0.
  int64_t rss_signed = 0;
  if (!to_u64(f[24], st.rss_pages)) {
    if (!to_i64(f[24], rss_signed)) return std::nullopt;
    st.rss_pages = 0;
  }
  // Reaped children's times (signed in the kernel's format) and threads:
  // absent or negative in odd input reads as 0.
  int64_t v = 0;
  st.cutime_ticks = to_i64(f[16], v) && v > 0 ? uint64_t(v) : 0;
  st.cstime_ticks = to_i64(f[17], v) && v > 0 ? uint64_t(v) : 0;
  st.num_threads = to_i64(f[20], v) && v > 0 ? uint64_t(v) : 0;
  st.ppid = pid_t(ppid);
  return st;
}

std::optional<uint64_t> parse_btime(std::string_view text) {
  std::optional<uint64_t> out;
  for_each_line(text, [&](std::string_view line) {
    if (!line.starts_with("btime ")) return true;
    uint64_t v = 0;
    std::string_view n = line.substr(6);
    while (!n.empty() && n.front() == ' ') n.remove_prefix(1);
    if (to_u64(n, v)) out = v;
    return false;
  });
  return out;
}

MemInfo parse_meminfo(std::string_view text) {
  MemInfo m;
  std::optional<uint64_t> free, buffers, cached;
  for_each_kb_field(text, [&](std::string_view key, uint64_t v) {
    if (key == "MemTotal")
      m.total = v;
    else if (key == "MemAvailable")
      m.available = v;
    else if (key == "MemFree")
      free = v;
    else if (key == "Buffers")
      buffers = v;
    else if (key == "Cached")
      cached = v;
  });
  if (!m.available && free) m.available = *free + buffers.value_or(0) + cached.value_or(0);
  return m;
}

SmapsRollup parse_smaps_rollup(std::string_view text) {
  SmapsRollup r;
  for_each_kb_field(text, [&](std::string_view key, uint64_t v) {
    if (key == "Rss")
      r.rss = v;
    else if (key == "Pss")
      r.pss = v;
    else if (key == "Private_Clean" || key == "Private_Dirty")
      r.uss += v;
    else if (key == "Swap")
      r.swap = v;
  });
  return r;
}

StatusMemory parse_status_memory(std::string_view text) {
  StatusMemory m;
  for_each_kb_field(text, [&](std::string_view key, uint64_t v) {
    if (key == "VmRSS")
      m.rss = v;
    else if (key == "RssAnon")
      m.anon = v;
    else if (key == "RssFile")
      m.file = v;
    else if (key == "RssShmem")
      m.shmem = v;
  });
  return m;
}

std::optional<Statm> parse_statm(std::string_view text) {
  Statm m;
  uint64_t* fields[] = {&m.size_pages, &m.resident_pages};
  size_t pos = 0;
  for (uint64_t* f : fields) {
    while (pos < text.size() && text[pos] == ' ') ++pos;
    size_t end = pos;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    if (!to_u64(text.substr(pos, end - pos), *f)) return std::nullopt;
    pos = end;
  }
  return m;
}

std::optional<std::vector<pid_t>> parse_children(std::string_view text) {
  std::vector<pid_t> out;
  size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == ' ' || text[pos] == '\n') {
      ++pos;
      continue;
    }
    size_t end = pos;
    while (end < text.size() && text[end] != ' ' && text[end] != '\n') ++end;
    int64_t pid = 0;
    if (!to_i64(text.substr(pos, end - pos), pid) || pid <= 0 ||
        pid > std::numeric_limits<pid_t>::max())
      return std::nullopt;
    out.push_back(pid_t(pid));
    pos = end;
  }
  return out;
}

}  // namespace gym::exporter::procfs
