// The registry reader's directory: segments, markers, temporaries.
#include "reader/segment_set.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/owner_lock.h"
#include "common/process_identity.h"

namespace gym::reader_internal {

namespace {
// A named temporary (only where O_TMPFILE is unsupported) older than this,
// and unlocked, was left by a writer that died while creating it.
constexpr time_t kStaleTempSeconds = 60;
// Layout sizes a header may declare; anything larger is not ours.
constexpr uint64_t kMaxSegmentBytes = uint64_t{1} << 30;

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}
}  // namespace

bool Trust::operator()(uid_t owner, int dir_fd) const {
  if (!uids_.empty()) return std::find(uids_.begin(), uids_.end(), owner) != uids_.end();
  // The directory's owner (looked up each time: it may be made later) and
  // our own effective user.
  struct stat st {};
  if (owner == ::geteuid()) return true;
  return dir_fd >= 0 && ::fstat(dir_fd, &st) == 0 && st.st_uid == owner;
}

SegmentSet::~SegmentSet() {
  segments_.clear();
  for (auto& [name, m] : markers_) ::close(m.fd);
}

void SegmentSet::reject(const std::string& name, ino_t ino, const std::string& why) {
  auto [it, inserted] = rejected_.try_emplace(name, ino);
  if (!inserted && it->second == ino) return;  // counted already
  it->second = ino;
  ++out_.stats.rejected_files_total;
  out_.problems.push_back("skipped " + dir_ + "/" + name + ": " + why);
}

void SegmentSet::read_error(const std::string& name, ino_t ino, const std::string& what) {
  ++out_.stats.read_errors_total;
  auto [it, inserted] = read_failed_.try_emplace(name, ino);
  if (!inserted && it->second == ino) return;  // reported already
  it->second = ino;
  out_.problems.push_back(what + " " + dir_ + "/" + name + ": " + std::strerror(errno));
}

void SegmentSet::cleanup_stale_temp(int dir_fd, const std::string& name) {
  if (!(name.starts_with(".gym-") && ends_with(name, ".tmp"))) return;
  int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && detail::owner_lock_held(fd) == 0 &&
      st.st_mtime + kStaleTempSeconds < ::time(nullptr)) {
    ::unlinkat(dir_fd, name.c_str(), 0);
  }
  ::close(fd);
}

namespace {
// Whether a header's sizes and offsets are the layout of formats 7 and 8:
// records of 32 bytes in the header's page and on, a string area from the
// page after them, then values, all within kMaxSegmentBytes.
bool consistent_layout(const segment::Header& h) {
  const uint64_t records_end = h.records_offset + uint64_t{h.max_records} * segment::kRecordBytes;
  const uint64_t records_pages =
      (records_end + segment::kPageBytes - 1) / segment::kPageBytes * segment::kPageBytes;
  const uint64_t strings_end = h.strings_offset + uint64_t{h.string_bytes};
  const uint64_t values_end = h.values_offset + uint64_t{h.value_lines} * segment::kLineBytes;
  return h.header_bytes == segment::kHeaderBytes && h.record_bytes == segment::kRecordBytes &&
         h.line_bytes == segment::kLineBytes && h.records_offset == segment::kRecordsOffset &&
         h.max_records != 0 && h.value_lines != 0 && h.strings_offset == records_pages &&
         h.string_bytes != 0 && h.string_bytes <= kMaxSegmentBytes &&
         h.values_offset == strings_end && h.total_bytes == values_end &&
         h.total_bytes <= kMaxSegmentBytes;
}
}  // namespace

void SegmentSet::open_segment(int dir_fd, const std::string& name, ino_t ino) {
  int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return;  // removed since the listing
    if (errno == ELOOP) return reject(name, ino, "a symbolic link");
    return read_error(name, ino, "cannot open");
  }
  auto seg = std::make_unique<Segment>();
  seg->name = name;
  seg->fd = fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return read_error(name, ino, "cannot stat");
  seg->ino = st.st_ino;
  if (!S_ISREG(st.st_mode)) return reject(name, st.st_ino, "not a regular file");
  if (!trust_(st.st_uid, dir_fd))
    return reject(name, st.st_ino,
                  "owned by untrusted user " + std::to_string(st.st_uid) + ", ignored");
  // A live owner's segment cut short by another process: the owner runs
  // unmetered; it is watched like a marker until the owner is gone.
  auto truncated = [&](const char* why) {
    if (detail::owner_lock_held(fd) != 1) return reject(name, st.st_ino, why);
    ++out_.stats.damaged_segments_total;
    out_.problems.push_back("segment " + dir_ + "/" + name + " is damaged (" + why +
                            "); its owner is alive and runs unmetered");
    markers_[name] = Marker{fd, st.st_ino, true};
    seg->fd = -1;
  };
  if (st.st_size < static_cast<off_t>(segment::kHeaderBytes))
    return truncated("truncated: shorter than a segment header");
  segment::Header h;
  ssize_t got = ::pread(fd, &h, sizeof h, 0);
  if (got != static_cast<ssize_t>(sizeof h)) return reject(name, st.st_ino, "unreadable header");
  if (h.magic != segment::magic_word()) return reject(name, st.st_ino, "wrong magic");
  if (h.format_version < segment::kMinFormatVersion || h.format_version > segment::kFormatVersion)
    return reject(name, st.st_ino,
                  "unsupported format version " + std::to_string(h.format_version) +
                      " (this reader reads " + std::to_string(segment::kMinFormatVersion) + " to " +
                      std::to_string(segment::kFormatVersion) + ")");
  if (!consistent_layout(h)) return reject(name, st.st_ino, "inconsistent layout");
  if (static_cast<uint64_t>(st.st_size) < h.total_bytes)
    return truncated("truncated: shorter than its layout");
  void* map = ::mmap(nullptr, h.total_bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return read_error(name, st.st_ino, "cannot map");
  seg->base = static_cast<const unsigned char*>(map);
  seg->size = h.total_bytes;
  seg->take_layout(h);
  seg->take_owner(h);
  seg->listed = true;
  rejected_.erase(name);
  read_failed_.erase(name);
  segments_[name] = std::move(seg);
}

void SegmentSet::open_marker(int dir_fd, const std::string& name, ino_t ino) {
  int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return;
    if (errno == ELOOP) return reject(name, ino, "a symbolic link");
    return read_error(name, ino, "cannot open");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !trust_(st.st_uid, dir_fd)) {
    ::close(fd);
    return reject(name, ino, "not a regular file of a trusted user");
  }
  markers_[name] = Marker{fd, st.st_ino, true};
}

// Live markers are processes running unmetered; a dead one is removed.
void SegmentSet::check_markers(int dir_fd, bool retiring) {
  for (auto it = markers_.begin(); it != markers_.end();) {
    Marker& m = it->second;
    const bool removed = !m.listed && out_.directory_error.empty();
    const bool alive = !removed && detail::owner_lock_held(m.fd) == 1;
    if (alive) {
      ++out_.stats.unmetered_writers;
    } else if (removed || retiring) {
      struct stat st {};
      if (!removed && ::fstatat(dir_fd, it->first.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          st.st_ino == m.ino)
        ::unlinkat(dir_fd, it->first.c_str(), 0);
      ::close(m.fd);
      it = markers_.erase(it);
      continue;
    }
    ++it;
  }
}

void SegmentSet::unlist() {
  for (auto& [name, seg] : segments_) seg->listed = false;
  for (auto& [name, m] : markers_) m.listed = false;
}

void SegmentSet::list(int dir_fd, bool retiring, std::vector<std::unique_ptr<Segment>>& replaced) {
  int fd = ::dup(dir_fd);
  DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (d == nullptr) {
    if (fd >= 0) ::close(fd);
    out_.directory_error = "cannot list " + dir_ + ": " + std::strerror(errno);
    return;
  }
  ::rewinddir(d);
  std::vector<std::pair<std::string, ino_t>> fresh;
  listed_.clear();
  while (dirent* e = ::readdir(d)) {
    std::string name(e->d_name);
    if (name == "." || name == "..") continue;
    if (name[0] == '.') {
      if (retiring) cleanup_stale_temp(dir_fd, name);
      continue;
    }
    listed_.push_back(name);
    if (known(dir_fd, name, e->d_ino)) continue;
    fresh.emplace_back(std::move(name), e->d_ino);
  }
  ::closedir(d);
  forget_unlisted();
  // The new files: segments, markers; anything else is rejected.
  for (auto& [name, ino] : fresh) {
    if (auto it = segments_.find(name); it != segments_.end()) {
      replaced.push_back(std::move(it->second));  // same name, new file: the old one is gone
      segments_.erase(it);
    }
    if (name.starts_with("gym-") && ends_with(name, ".seg")) {
      open_segment(dir_fd, name, ino);
    } else if (name.starts_with("gym-") && ends_with(name, ".unmetered")) {
      open_marker(dir_fd, name, ino);
    } else {
      reject(name, ino, "not a segment name");
    }
  }
}

// Whether a listed file is one already known: open (now listed), folded,
// rejected or failing to read (counted again); a new file is examined.
bool SegmentSet::known(int dir_fd, const std::string& name, ino_t ino) {
  if (auto it = segments_.find(name); it != segments_.end() && it->second->ino == ino) {
    it->second->listed = true;
    return true;
  }
  if (auto it = markers_.find(name); it != markers_.end() && it->second.ino == ino) {
    it->second.listed = true;
    return true;
  }
  if (auto it = folded_.find(name); it != folded_.end() && it->second == ino) {
    // Folded in already (removed once the totals are written; a read-only
    // reader's stays): not read again, but its memory is the directory's.
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
      out_.stats.registry_bytes += uint64_t(st.st_blocks) * 512;
    return true;
  }
  if (folded_by_holder_.count(name) != 0) return true;
  auto rej = rejected_.find(name);
  if (rej != rejected_.end() && rej->second == ino) return true;
  auto failed = read_failed_.find(name);
  if (failed != read_failed_.end() && failed->second == ino) {
    ++out_.stats.read_errors_total;
    return true;
  }
  return false;
}

// Forgets what was noted of files that are gone, so a new file of that name
// is examined (and, if bad, counted) again.
void SegmentSet::forget_unlisted() {
  std::sort(listed_.begin(), listed_.end());
  auto forget_gone = [this](auto& map) {
    for (auto it = map.begin(); it != map.end();) {
      if (!std::binary_search(listed_.begin(), listed_.end(), it->first))
        it = map.erase(it);
      else
        ++it;
    }
  };
  forget_gone(rejected_);
  forget_gone(read_failed_);
  forget_gone(folded_);
}

// ---------------------------------------------------------------- folded

void SegmentSet::adopt_existing(const std::vector<std::string>& names, int dir_fd) {
  for (const std::string& name : names) {
    struct stat seg {};
    if (::fstatat(dir_fd, name.c_str(), &seg, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(seg.st_mode))
      folded_[name] = seg.st_ino;
  }
}

void SegmentSet::adopt_holders(const std::vector<std::string>& names) {
  folded_by_holder_.clear();
  folded_by_holder_.insert(names.begin(), names.end());
}

void SegmentSet::forget_folded() {
  folded_.clear();
  folded_by_holder_.clear();
}

std::vector<std::string> SegmentSet::folded_names() const {
  std::vector<std::string> names;
  names.reserve(folded_.size());
  for (const auto& [name, ino] : folded_) names.push_back(name);
  return names;
}

// Once the totals hold them, the folded segments' files go (those that are
// still the files folded).
void SegmentSet::remove_folded(int dir_fd) {
  for (const auto& [name, ino] : folded_) {
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino == ino)
      ::unlinkat(dir_fd, name.c_str(), 0);
  }
  folded_.clear();
}

// Whether a segment's owner still runs: it holds the owner lock (or,
// without OFD locks, its pid has its start time, this boot).
bool owner_alive(const Segment& s) {
  int locked = detail::owner_lock_held(s.fd);
  if (locked >= 0) return locked == 1;
  uint8_t boot[16];
  if (detail::read_boot_id(boot) && std::memcmp(boot, s.boot_id, sizeof boot) != 0) return false;
  return detail::process_matches(s.pid, s.start_ticks);
}

}  // namespace gym::reader_internal
