#include "writer/folding.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "gym/registry_reader.h"
#include "gym/segment_writer.h"

namespace gym::writer_internal {

namespace {

constexpr int64_t kFoldEveryNs = 1000000000;

int64_t ns_of(const timespec& ts) {
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// The directory's size that the last folding writer noted in the lock file
// ("fold <pid> <size>"), or -1.
int64_t noted_size(const std::string& lock) {
  const int fd = ::open(lock.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[64] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  ::close(fd);
  if (n <= 0 || std::strncmp(buf, "fold ", 5) != 0) return -1;
  const char* size = std::strchr(buf + 5, ' ');
  return size == nullptr ? -1 : std::strtoll(size + 1, nullptr, 10);
}

// Whether the directory's exited segments may wait: a writer or an exporter
// took the lock less than a second ago and, on tmpfs (whose directories
// are 20 bytes an entry long), the directory grew by less than a quarter, or 4
// entries, since the last fold.
bool fold_can_wait(const std::string& dir) {
  struct stat lk {};
  const std::string lock = dir + "/" + RegistryReader::kLockFile;
  if (::stat(lock.c_str(), &lk) != 0) return false;
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const int64_t age = ns_of(now) - ns_of(lk.st_mtim);
  if (age < 0 || age >= kFoldEveryNs) return false;
  struct statfs fs {};
  struct stat d {};
  if (::statfs(dir.c_str(), &fs) != 0 || fs.f_type != TMPFS_MAGIC || ::stat(dir.c_str(), &d) != 0)
    return true;
  const int64_t then = noted_size(lock);
  constexpr int64_t kEntry = 20;  // tmpfs's BOGO_DIRENT_SIZE
  return then < 0 || d.st_size <= then + std::max(4 * kEntry, then / 4);
}

void at_exit() {
  SegmentWriter::release_at_exit();
}

}  // namespace

void fold_exited_soon(const std::string& dir) noexcept {
  try {
    // Past the threshold it waits for a writer folding now (never for an
    // exporter), so that segments that exit during one fold never pile up.
    if (!fold_can_wait(dir)) RegistryReader::fold_exited(dir, std::chrono::milliseconds(50));
  } catch (...) {
    // Out of memory: the next writer, or the exporter, folds them.
  }
}

void fold_at_exit() noexcept {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(&at_exit); });
}

}  // namespace gym::writer_internal
