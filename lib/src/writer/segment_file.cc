// A writer's segment file: created (unnamed, then linked under its name),
// locked, its pages reserved before they are touched, mapped, moved to a
// file of its own after a fork; the unmetered marker when it cannot be.
#include "gym/segment_writer.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <utility>

#include "common/fault_guard.h"
#include "common/label_rules.h"
#include "common/owner_lock.h"
#include "common/process_identity.h"
#include "writer/folding.h"
#include "writer/layout.h"

namespace gym {

using namespace writer_internal;

namespace {

std::atomic<uint64_t> g_sequence{0};

uint64_t now_unix_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

std::string errno_text(const char* what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

// Allocates the file's pages under [begin, end) (rounded out to pages), so
// that touching them can never fault: on a full tmpfs this fails with ENOSPC
// here instead of raising SIGBUS at the first store.
bool reserve_pages(int fd, uint64_t begin, uint64_t end) {
  begin = begin / segment::kPageBytes * segment::kPageBytes;
  end = (end + segment::kPageBytes - 1) / segment::kPageBytes * segment::kPageBytes;
  if (end <= begin) return true;
  const auto off = static_cast<off_t>(begin);
  const auto len = static_cast<off_t>(end - begin);
  if (::fallocate(fd, 0, off, len) == 0) return true;
  if (errno != EOPNOTSUPP && errno != ENOSYS) return false;
  const int rc = ::posix_fallocate(fd, off, len);
  if (rc != 0) errno = rc;
  return rc == 0;
}

void write_header(Header* h, pid_t pid, uint64_t ticks) {
  h->format_version = segment::kFormatVersion;
  h->header_bytes = segment::kHeaderBytes;
  h->record_bytes = segment::kRecordBytes;
  h->max_records = segment::kMaxRecords;
  h->line_bytes = segment::kLineBytes;
  h->value_lines = segment::kValueLines;
  h->records_offset = segment::kRecordsOffset;
  h->strings_offset = segment::kStringsOffset;
  h->string_bytes = segment::kStringBytes;
  h->values_offset = segment::kValuesOffset;
  h->total_bytes = segment::kTotalBytes;
  h->owner_pid = pid;
  h->owner_start_ticks = ticks;
  h->owner_pid_ns = detail::pid_namespace();
  detail::read_boot_id(h->owner_boot_id);
  h->created_unix_ns = now_unix_ns();
}

// After a fork: the parent's first `count` records and the first
// `strings` bytes of its string area into the child's segment at `base`.
// Counters and histograms start at zero in the child (the parent's counts
// stay in the parent's segment). Gauges keep the values of the objects the
// child inherited, for the child's own use, but are not exported from the
// child (inherited): the parent still reports them.
void copy_inherited(unsigned char* base, unsigned char* parent, uint32_t count, uint32_t strings) {
  std::memcpy(base + segment::kRecordsOffset, parent + segment::kRecordsOffset,
              uint64_t{count} * segment::kRecordBytes);
  std::memcpy(string_at(base, 0), string_at(parent, 0), strings);
  for (uint32_t i = 0; i < count; ++i) {
    RecordHead* r = record_of(base, i);
    if (r->kind != static_cast<uint8_t>(SeriesKind::kGauge) &&
        r->kind != static_cast<uint8_t>(SeriesKind::kAges))
      continue;
    const uint32_t lines = segment::value_lines_for(static_cast<SeriesKind>(r->kind), 0, 1, 0);
    if (r->value_line + lines > segment::kValueLines) continue;
    std::memcpy(line_of(base, r->value_line), line_of(parent, r->value_line),
                uint64_t{lines} * segment::kLineBytes);
    if (r->kind == static_cast<uint8_t>(SeriesKind::kAges)) {
      // Counts of beginnings are counters: the child's start from zero.
      auto* w = reinterpret_cast<int64_t*>(line_of(base, r->value_line));
      std::fill(w + segment::kAgeFirstLane, w + segment::kAgeWords, 0);
    }
    if (r->state == segment::kRecordLive) r->state = segment::kRecordInherited;
  }
}

// Links the open segment `fd` (or the named temporary `temp_path`) into
// `dir` under its final name; EEXIST only if another writer raced us for
// the same sequence number, so it tries the next. The path, or empty with
// errno set.
std::string link_segment(const std::string& dir, int fd, const char* temp_path, pid_t pid,
                         uint64_t ticks) {
  char proc_fd[64];
  {
    char* p = proc_fd;
    const char* prefix = "/proc/self/fd/";
    while (*prefix) *p++ = *prefix++;
    p = detail::format_decimal(p, static_cast<uint64_t>(fd));
    *p = '\0';
  }
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string path = dir + "/gym-" + std::to_string(pid) + "-" + std::to_string(ticks) + "-" +
                       std::to_string(g_sequence.fetch_add(1)) + ".seg";
    const int rc = temp_path != nullptr
                       ? ::link(temp_path, path.c_str())
                       : ::linkat(AT_FDCWD, proc_fd, AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW);
    if (rc == 0) return path;
    if (errno != EEXIST) break;
  }
  return {};
}

}  // namespace

bool SegmentWriter::ensure_segment_locked() {
  if (base_ != nullptr) {
    if (!detached_ && detail::writer_mapping_lost(base_)) {
      // A fault replaced the mapping with private pages (the file was
      // truncated under us): from now on this process is unmetered.
      detached_ = true;
      error_ = "segment " + path_ + " lost its pages (truncated by another process?)";
      mark_unmetered_locked();
    }
    return !detached_;
  }
  if (tried_) return false;
  tried_ = true;
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    error_ = errno_text("cannot create registry directory", dir_);
    return false;
  }
  if (create_segment_locked(false)) return true;
  mark_unmetered_locked();
  return false;
}

// A process that has no segment leaves an empty, locked marker file, so that
// the exporter counts it (gym_exporter_registry_unmetered_writers): "no data"
// must never look like "no work". An empty file needs no page, only an inode.
void SegmentWriter::mark_unmetered_locked() noexcept {
  if (marker_fd_ >= 0) return;
  try {
    const pid_t pid = ::getpid();
    const uint64_t ticks = detail::own_start_ticks().value_or(0);
    std::string path = dir_ + "/gym-" + std::to_string(pid) + "-" + std::to_string(ticks) + "-" +
                       std::to_string(g_sequence.fetch_add(1)) + ".unmetered";
    int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return;
    if (!detail::take_owner_lock(fd) && errno != EINVAL) {
      ::unlink(path.c_str());
      ::close(fd);
      return;
    }
    marker_fd_ = fd;
    marker_path_ = std::move(path);
  } catch (...) {
    // Out of memory: nothing more can be said.
  }
}

void SegmentWriter::drop_marker() noexcept {
  if (marker_fd_ < 0) return;
  ::unlink(marker_path_.c_str());
  ::close(marker_fd_);
  marker_fd_ = -1;
}

bool SegmentWriter::unmetered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return marker_fd_ >= 0;
}

namespace {
// Reserves the file's pages from `reserved` (page-aligned) up to `end`;
// `reserved` moves to the page after them.
bool reserve_up_to(int fd, uint64_t& reserved, uint64_t end) {
  if (end <= reserved) return true;
  if (!reserve_pages(fd, reserved, end)) return false;
  reserved = (end + segment::kPageBytes - 1) / segment::kPageBytes * segment::kPageBytes;
  return true;
}
}  // namespace

// Pages up to record `records` (exclusive), byte `strings` of the string
// area and value line `lines` are reserved before they are touched (see
// reserve_pages).
bool SegmentWriter::reserve_locked(int fd, uint32_t records, uint32_t strings, uint32_t lines) {
  return reserve_up_to(fd, reserved_records_end_,
                       segment::kRecordsOffset + uint64_t{records} * segment::kRecordBytes) &&
         reserve_up_to(fd, reserved_strings_end_, segment::kStringsOffset + strings) &&
         reserve_up_to(fd, reserved_values_end_,
                       segment::kValuesOffset + uint64_t{lines} * segment::kLineBytes);
}

namespace {
// A new file for a segment in `dir`: unnamed (O_TMPFILE) or, where the file
// system has no unnamed files, a dot-named temporary that readers skip (and
// remove once it is stale and unlocked), its path in `temp_path`. -1 with
// errno.
int open_new_file(const std::string& dir, pid_t pid, std::string& temp_path) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
  temp_path =
      dir + "/.gym-" + std::to_string(pid) + "-" + std::to_string(g_sequence.fetch_add(1)) + ".tmp";
  return ::open(temp_path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
}
}  // namespace

// A new segment file locked, sized and its first pages reserved (after a
// fork, as far as the parent's records and values go: `inherited` records).
// Null, or what failed.
const char* SegmentWriter::prepare_file_locked(int fd, bool after_fork, uint32_t& inherited) {
  // Without OFD locks (EINVAL on very old kernels) readers fall back to the
  // pid and start time in the header.
  if (!detail::take_owner_lock(fd) && errno != EINVAL) return "cannot lock segment in";
  if (::fchmod(fd, 0600) != 0) return "cannot chmod segment in";
  if (::ftruncate(fd, static_cast<off_t>(segment::kTotalBytes)) != 0)
    return "cannot size segment in";
  // The header now; records and values as they are registered (or, after a
  // fork, as far as the parent's go).
  reserved_records_end_ = segment::kHeaderBytes;  // the first records share its page
  reserved_strings_end_ = segment::kStringsOffset;
  reserved_values_end_ = segment::kValuesOffset;
  if (!reserve_pages(fd, 0, segment::kHeaderBytes)) return "cannot reserve segment pages in";
  inherited = 0;
  if (after_fork && base_ != nullptr) {
    // What the parent had published at the fork, as its next value line
    // and string byte are: records it publishes since are its own.
    inherited = std::min(records_at_fork_, segment::kMaxRecords);
    if (!reserve_locked(fd, inherited, next_string_, next_line_))
      return "cannot reserve segment pages in";
  }
  return nullptr;
}

// After a fork, the child's segment mapped where the parent's was, so that
// existing handles write into it; else the new mapping is the writer's.
bool SegmentWriter::take_mapping_locked(int fd, unsigned char* base, bool after_fork,
                                        const std::string& final_path) {
  if (!(after_fork && base_ != nullptr)) {
    base_ = base;
    detail::protect_writer_mapping(base_, segment::kTotalBytes);
    return true;
  }
  void* fixed =
      ::mmap(base_, segment::kTotalBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  ::munmap(base, segment::kTotalBytes);
  if (fixed == MAP_FAILED) {
    ::unlink(final_path.c_str());
    ::close(fd);
    error_ = errno_text("cannot remap segment after fork in", dir_);
    return false;
  }
  detail::reset_writer_mapping_lost(base_);
  return true;
}

// Creates a complete segment and links it into the directory (see the
// publication rule in segment_format.h). After a fork, copies the parent's
// records and gauge values into it and maps it over the parent's mapping, so
// that every handle now points into the child's own segment.
bool SegmentWriter::create_segment_locked(bool after_fork) {
  const pid_t pid = ::getpid();
  const uint64_t ticks = detail::own_start_ticks().value_or(0);
  std::string temp_path;
  const int fd = open_new_file(dir_, pid, temp_path);
  if (fd < 0) {
    error_ = errno_text("cannot create segment in", dir_);
    return false;
  }
  const bool named_temp = !temp_path.empty();
  auto fail = [&](const char* what) {
    error_ = errno_text(what, dir_);
    if (named_temp) ::unlink(temp_path.c_str());
    ::close(fd);
    return false;
  };
  uint32_t inherited = 0;
  if (const char* what = prepare_file_locked(fd, after_fork, inherited)) return fail(what);
  void* map = ::mmap(nullptr, segment::kTotalBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return fail("cannot map segment in");
  auto* base = static_cast<unsigned char*>(map);
  Header* h = header_of(base);
  write_header(h, pid, ticks);
  if (after_fork && base_ != nullptr) {
    // Same records (copy_inherited says what the child keeps).
    copy_inherited(base, base_, inherited, next_string_);
    if (detail::writer_mapping_lost(base_)) {
      // The parent's file lost its pages under the copy: what was copied
      // is zeros, not the parent's records. This child goes unmetered.
      errno = EIO;
      ::munmap(base, segment::kTotalBytes);
      return fail("cannot copy the parent's truncated segment in");
    }
    segment::store_release(&h->record_count, inherited);
  }
  segment::store_release(&h->magic, segment::magic_word());
  const std::string final_path =
      link_segment(dir_, fd, named_temp ? temp_path.c_str() : nullptr, pid, ticks);
  if (named_temp) ::unlink(temp_path.c_str());
  if (final_path.empty()) {
    error_ = errno_text("cannot link segment into", dir_);
    ::munmap(base, segment::kTotalBytes);
    ::close(fd);
    return false;
  }
  if (!take_mapping_locked(fd, base, after_fork, final_path)) return false;
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  path_ = final_path;
  error_.clear();
  fold_at_exit();
  fold_exited_soon(dir_);
  return true;
}

void SegmentWriter::count_drop_locked() {
  ++local_dropped_;
  if (base_ != nullptr && !detached_)
    segment::add_relaxed(&header_of(base_)->dropped_series, uint64_t{1});
}

}  // namespace gym
