#include "reader/totals_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/process_identity.h"
#include "gym/registry_reader.h"
#include "gym/whole_file.h"

namespace gym::reader_internal {

namespace {
// A totals file larger than this is not ours.
constexpr off_t kMaxTotalsBytes = off_t{64} << 20;
constexpr const char* kTotalsTemp = ".exporter-totals.new";
constexpr const char* kTotalsFile = RegistryReader::kTotalsFile;

int64_t mtime_ns(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

// The checks after the file's own (see read()): its text, its boot.
bool decode_checked(int fd, const struct stat& st, detail::Totals& t, std::string& why) {
  std::string text(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::pread(fd, text.data() + got, text.size() - got, off_t(got));
    if (n <= 0) break;
    got += size_t(n);
  }
  text.resize(got);
  if (!detail::decode_totals(text, t, &why)) return false;
  uint8_t boot[16] = {};
  if (detail::read_boot_id(boot) && std::memcmp(boot, t.boot_id.data(), 16) != 0) {
    why = "written before the host last booted";
    return false;
  }
  return true;
}
}  // namespace

TotalsFile::Read TotalsFile::read(int dir_fd, const Trust& trust, detail::Totals& t,
                                  std::string& why) {
  const int fd = ::openat(dir_fd, kTotalsFile, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    seen_ = {};
    return errno == ENOENT ? Read::kAbsent : Read::kCannotOpen;
  }
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0;
  if (ok) seen_ = {st.st_ino, mtime_ns(st), st.st_size};
  if (!ok || !S_ISREG(st.st_mode) || st.st_size > kMaxTotalsBytes) {
    why = "not a regular file of a sensible size";
    ok = false;
  } else if (!trust(st.st_uid, dir_fd)) {
    why = "owned by untrusted user " + std::to_string(st.st_uid);
    ok = false;
  } else {
    ok = decode_checked(fd, st, t, why);
  }
  ::close(fd);
  return ok ? Read::kRead : Read::kRefused;
}

bool TotalsFile::changed(int dir_fd, bool& present) {
  struct stat st {};
  Seen now{};
  present = ::fstatat(dir_fd, kTotalsFile, &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (present) now = {st.st_ino, mtime_ns(st), st.st_size};
  if (now == seen_) return false;
  seen_ = now;
  return true;
}

bool TotalsFile::write(int dir_fd, const detail::Totals& t) {
  return write_whole_file(dir_fd, kTotalsFile, kTotalsTemp, detail::encode_totals(t), 0600,
                          /*sync=*/true);
}

}  // namespace gym::reader_internal
