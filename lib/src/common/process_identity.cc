#include "common/process_identity.h"

#include "gym/proc_stat.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gym::detail {

namespace {

// Reads up to cap - 1 bytes of a small procfs file into buf; -1 on error.
ssize_t read_small_file(const char* path, char* buf, size_t cap) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t got = 0;
  while (got + 1 < cap) {
    ssize_t n = ::read(fd, buf + got, cap - 1 - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  buf[got] = '\0';
  return static_cast<ssize_t>(got);
}

char* append(char* p, const char* s) {
  while (*s) *p++ = *s++;
  return p;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

char* format_decimal(char* p, uint64_t v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) *p++ = tmp[--n];
  return p;
}

std::optional<uint64_t> parse_stat_start_ticks(std::string_view stat) {
  return proc_stat::start_ticks(stat);
}

std::optional<uint64_t> process_start_ticks(pid_t pid, const char* proc_root) {
  char path[256];
  char* p = append(path, proc_root);
  p = append(p, "/");
  p = format_decimal(p, static_cast<uint64_t>(pid));
  p = append(p, "/stat");
  *p = '\0';
  char buf[1024];
  ssize_t n = read_small_file(path, buf, sizeof buf);
  if (n <= 0) return std::nullopt;
  return parse_stat_start_ticks(std::string_view(buf, static_cast<size_t>(n)));
}

std::optional<uint64_t> own_start_ticks() {
  char buf[1024];
  ssize_t n = read_small_file("/proc/self/stat", buf, sizeof buf);
  if (n <= 0) return process_start_ticks(::getpid());
  return parse_stat_start_ticks(std::string_view(buf, static_cast<size_t>(n)));
}

bool read_boot_id(uint8_t out[16], const char* proc_root) {
  char path[256];
  char* p = append(path, proc_root);
  p = append(p, "/sys/kernel/random/boot_id");
  *p = '\0';
  char buf[64];
  ssize_t n = read_small_file(path, buf, sizeof buf);
  if (n <= 0) return false;
  int nibbles = 0;
  std::memset(out, 0, 16);
  for (ssize_t i = 0; i < n && nibbles < 32; ++i) {
    int h = hex_value(buf[i]);
    if (h < 0) continue;
    out[nibbles / 2] = static_cast<uint8_t>(out[nibbles / 2] | (h << ((nibbles % 2) ? 0 : 4)));
    ++nibbles;
  }
  return nibbles == 32;
}

uint64_t pid_namespace(pid_t pid, const char* proc_root) {
  char path[256];
  char* p = append(path, proc_root);
  p = append(p, "/");
  if (pid > 0)
    p = format_decimal(p, static_cast<uint64_t>(pid));
  else
    p = append(p, "self");
  p = append(p, "/ns/pid");
  *p = '\0';
  struct stat st {};
  if (::stat(path, &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

bool process_matches(pid_t pid, uint64_t start_ticks, const char* proc_root) {
  if (pid <= 0) return false;
  auto ticks = process_start_ticks(pid, proc_root);
  return ticks && *ticks == start_ticks;
}

}  // namespace gym::detail
