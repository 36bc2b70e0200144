#include "gym/registry_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>

#include "fault_guard.h"
#include "gym/contract.h"
#include "label_rules.h"
#include "owner_lock.h"
#include "process_identity.h"
#include "totals_file.h"

namespace gym {

namespace {
// Reads of a histogram shard whose native and classic totals differ before
// its last values are kept instead (registry_reader.cc, read_values).
constexpr int kConsistentReadAttempts = 16;
}  // namespace

using segment::Header;
using segment::Record;
using segment::SeriesKind;

namespace {

constexpr int32_t kInvalid = -2;
constexpr int32_t kOverLimit = -3;
// Layout sizes a header may declare; anything larger is not ours.
constexpr uint64_t kMaxSegmentBytes = uint64_t{1} << 30;
// A named temporary (only where O_TMPFILE is unsupported) older than this,
// and unlocked, was left by a writer that died while creating it.
constexpr time_t kStaleTempSeconds = 60;
// A totals file larger than this is not ours.
constexpr off_t kMaxTotalsBytes = off_t{64} << 20;
constexpr const char* kTotalsTemp = ".exporter-totals.new";

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Sums of values from shared memory saturate: a planted value near 2^64 must
// not make a total wrap around and fall.
uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

// Runs `body`, which loads from [lo, lo + size); false when a load faulted
// (the file lost pages): what `body` read is then worthless.
template <class Body>
bool guarded(const void* lo, size_t size, Body&& body) {
  detail::ReadGuard guard;
  detail::begin_read_guard(&guard, lo, size);
  body();
  detail::end_read_guard();
  return guard.faulted == 0;
}

}  // namespace

struct RegistryReader::Segment {
  std::string name;
  ino_t ino = 0;
  int fd = -1;
  const unsigned char* base = nullptr;
  uint64_t size = 0;
  uint32_t version = 0;
  uint32_t max_records = 0;
  uint32_t value_lines = 0;
  uint64_t records_offset = 0;
  uint64_t values_offset = 0;
  pid_t pid = 0;
  uint64_t start_ticks = 0;
  uint64_t pid_ns = 0;     // the owner's pid namespace (0: not recorded)
  int64_t created_ns = 0;  // the header's created_unix_ns: when its counting began
  uint8_t boot_id[16] = {};
  uint64_t dropped = 0;  // the header's dropped_series, last read
  uint32_t parsed = 0;   // records [0, parsed) examined
  // The valid records, with their validated metadata: nothing is read from
  // shared memory twice to decide where a value lives.
  struct Entry {
    uint32_t record;
    uint32_t id;
    uint32_t value_line;
    SeriesKind kind;
    uint8_t shards;
    uint8_t bound_count;
    uint16_t native_words;
    uint32_t scratch;  // first word in the copied values
    uint32_t last;     // first word in `last`
  };
  std::vector<Entry> entries;
  uint32_t scratch_words = 0;
  // Counters and histograms as last read (histograms: the shards' buckets,
  // then the sum), to see a reset and to fold what was seen on damage.
  std::vector<uint64_t> last;
  bool listed = false;
  bool damaged = false;
  bool dead = false;  // read only: owner gone, left for the retiring reader

  const Header* header() const { return reinterpret_cast<const Header*>(base); }
  const Record* record(uint32_t i) const {
    return reinterpret_cast<const Record*>(base + records_offset +
                                           uint64_t{i} * segment::kRecordBytes);
  }
  const uint64_t* line(uint32_t l) const {
    return reinterpret_cast<const uint64_t*>(base + values_offset +
                                             uint64_t{l} * segment::kLineBytes);
  }
  ~Segment() {
    if (base != nullptr) ::munmap(const_cast<unsigned char*>(base), size);
    if (fd >= 0) ::close(fd);
  }
};

RegistryReader::RegistryReader(std::string dir, ReaderOptions options)
    : dir_(std::move(dir)),
      options_(std::move(options)),
      default_trust_(options_.trusted_uids.empty()) {
  detail::install_fault_handler();
  snapshot_.reader_started_unix_ns = now_ns();
}

RegistryReader::~RegistryReader() {
  segments_.clear();
  for (auto& [name, m] : markers_) ::close(m.fd);
  if (lock_fd_ >= 0) ::close(lock_fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

bool RegistryReader::trusted(uid_t owner) {
  if (default_trust_) {
    // The directory's owner (looked up each time: it may be made later) and
    // our own effective user.
    struct stat st {};
    if (owner == ::geteuid()) return true;
    return dir_fd_ >= 0 && ::fstat(dir_fd_, &st) == 0 && st.st_uid == owner;
  }
  const auto& t = options_.trusted_uids;
  return std::find(t.begin(), t.end(), owner) != t.end();
}

// ---------------------------------------------------------------- the lock

bool RegistryReader::open_dir() {
  if (dir_fd_ >= 0) return true;
  dir_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  return dir_fd_ >= 0;
}

bool RegistryReader::try_lock(std::string* why) {
  int fd = ::openat(dir_fd_, kLockFile, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    *why = "cannot open " + dir_ + "/" + kLockFile + ": " + std::strerror(errno);
    return false;
  }
  if (!detail::take_owner_lock(fd)) {
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::string pid = n > 0 ? std::string(buf, size_t(n)) : std::string("unknown");
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    *why = "another gym-exporter (pid " + pid + ") retires the segments of " + dir_ +
           " (it holds " + kLockFile + ")";
    ::close(fd);
    return false;
  }
  char buf[24];
  char* end = detail::format_decimal(buf, static_cast<uint64_t>(::getpid()));
  *end++ = '\n';
  if (::ftruncate(fd, 0) == 0 && ::pwrite(fd, buf, size_t(end - buf), 0) < 0) {
    // A full file system: the pid stays unknown to a second exporter.
  }
  lock_fd_ = fd;
  // Take over from read-only state: the totals are the file's now.
  for (auto& acc : retired_) acc = Accumulator{};
  folded_by_owner_.clear();
  load_totals(/*adopt_folded=*/true);
  return true;
}

bool RegistryReader::claim(std::string* why) {
  if (lock_fd_ >= 0) return true;
  if (!open_dir()) {
    if (errno == ENOENT) return true;  // taken by the first snapshot that finds it
    *why = "cannot open " + dir_ + ": " + std::strerror(errno);
    return false;
  }
  return try_lock(why);
}

// ---------------------------------------------------------------- totals

void RegistryReader::load_totals(bool adopt_folded) {
  int fd = ::openat(dir_fd_, kTotalsFile, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    totals_seen_ = {};
    if (errno != ENOENT) read_error(kTotalsFile, 0, "cannot open");
    return;
  }
  struct stat st {};
  std::string text;
  std::string why;
  detail::Totals t;
  bool ok = ::fstat(fd, &st) == 0;
  if (ok) {
    totals_seen_ = {st.st_ino, int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec,
                    st.st_size};
  }
  if (!ok || !S_ISREG(st.st_mode) || st.st_size > kMaxTotalsBytes) {
    why = "not a regular file of a sensible size";
    ok = false;
  } else if (!trusted(st.st_uid)) {
    why = "owned by untrusted user " + std::to_string(st.st_uid);
    ok = false;
  } else {
    text.resize(size_t(st.st_size));
    size_t got = 0;
    while (got < text.size()) {
      ssize_t n = ::pread(fd, text.data() + got, text.size() - got, off_t(got));
      if (n <= 0) break;
      got += size_t(n);
    }
    text.resize(got);
    ok = detail::decode_totals(text, t, &why);
  }
  ::close(fd);
  uint8_t boot[16] = {};
  if (ok && detail::read_boot_id(boot) && std::memcmp(boot, t.boot_id.data(), 16) != 0) {
    why = "written before the host last booted";
    ok = false;
  }
  if (!ok) {
    ++snapshot_.stats.rejected_files_total;
    snapshot_.problems.push_back("ignored folded totals in " + dir_ + "/" + kTotalsFile + ": " +
                                 why + "; counters of exited writers start from zero");
    return;
  }
  retired_dropped_ = t.dropped_series;
  for (const detail::TotalsSeries& s : t.series) {
    Record rec{};
    rec.state = segment::kRecordLive;
    rec.kind = s.kind;
    rec.bound_count = static_cast<uint8_t>(s.bounds.size());
    rec.shards = s.kind == static_cast<uint8_t>(SeriesKind::kHistogram)
                     ? uint8_t{segment::kHistogramShards}
                     : uint8_t{1};
    rec.unit_divisor = s.unit_divisor;
    rec.native_words = s.native_words;
    std::copy(s.bounds.begin(), s.bounds.end(), rec.bounds);
    rec.text_bytes = static_cast<uint16_t>(s.text.size());
    std::memcpy(rec.text, s.text.data(), s.text.size());
    size_t nul = 0;
    for (char c : s.text) nul += c == '\0';
    rec.label_count = static_cast<uint8_t>(nul > 0 ? (nul - 1) / 2 : 0);
    std::string bad;
    const int32_t id = intern(rec, &bad);
    if (id < 0) continue;
    Accumulator& acc = retired_[size_t(id)];
    acc.present = true;
    acc.counter = sat_add(acc.counter, s.counter);
    acc.sum = segment::wrapping_add(acc.sum, s.sum);
    if (rec.kind == static_cast<uint8_t>(SeriesKind::kHistogram) &&
        s.buckets.size() == s.bounds.size() + 1 + s.native_words) {
      acc.buckets.resize(s.buckets.size());
      for (size_t b = 0; b < s.buckets.size(); ++b)
        acc.buckets[b] = sat_add(acc.buckets[b], s.buckets[b]);
    }
    acc.note_created(s.created_ns);
    last_change_[size_t(id)] = s.last_change_ns;
  }
  if (adopt_folded) {
    // Folded before the last writer of the file stopped, not yet removed.
    for (const std::string& name : t.folded) {
      struct stat seg {};
      if (::fstatat(dir_fd_, name.c_str(), &seg, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(seg.st_mode))
        folded_pending_[name] = seg.st_ino;
    }
    totals_dirty_ = !folded_pending_.empty();
  } else {
    folded_by_owner_.clear();
    folded_by_owner_.insert(t.folded.begin(), t.folded.end());
  }
}

void RegistryReader::persist_totals() {
  detail::Totals t;
  detail::read_boot_id(t.boot_id.data());
  t.dropped_series = retired_dropped_;
  for (const auto& [name, ino] : folded_pending_) t.folded.push_back(name);
  for (size_t id = 0; id < infos_.size(); ++id) {
    const Accumulator& acc = retired_[id];
    if (!infos_[id] || !acc.present) continue;
    const SeriesInfo& info = *infos_[id];
    detail::TotalsSeries s;
    s.kind = static_cast<uint8_t>(info.kind);
    s.unit_divisor = info.unit_divisor;
    s.bounds = info.bounds;
    s.native_words = info.native_words;
    s.text = info.family;
    s.text.push_back('\0');
    for (const auto& [k, v] : info.labels) {
      s.text.append(k).push_back('\0');
      s.text.append(v).push_back('\0');
    }
    s.last_change_ns = last_change_[id];
    s.counter = acc.counter;
    s.sum = acc.sum;
    s.buckets = acc.buckets;
    s.created_ns = acc.created_unknown ? 0 : acc.created_ns;
    t.series.push_back(std::move(s));
  }
  const std::string text = detail::encode_totals(t);
  int fd =
      ::openat(dir_fd_, kTotalsTemp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0;
  size_t put = 0;
  while (ok && put < text.size()) {
    ssize_t n = ::write(fd, text.data() + put, text.size() - put);
    if (n <= 0) ok = false;
    put += n > 0 ? size_t(n) : 0;
  }
  const int saved = errno;
  if (ok) ok = ::fsync(fd) == 0;
  if (fd >= 0 && ::close(fd) != 0) ok = false;
  if (ok) ok = ::renameat(dir_fd_, kTotalsTemp, dir_fd_, kTotalsFile) == 0;
  if (!ok) {
    const int err = errno != 0 ? errno : saved;
    ::unlinkat(dir_fd_, kTotalsTemp, 0);
    ++snapshot_.stats.totals_write_errors_total;
    if (!totals_error_reported_)
      snapshot_.problems.push_back("cannot write folded totals to " + dir_ + "/" + kTotalsFile +
                                   ": " + std::strerror(err) +
                                   "; exited writers' segments are kept until it can");
    totals_error_reported_ = true;
    return;
  }
  totals_error_reported_ = false;
  totals_dirty_ = false;
  // Now that the totals hold them, the folded segments may go.
  for (const auto& [name, ino] : folded_pending_) {
    struct stat st {};
    if (::fstatat(dir_fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino == ino)
      ::unlinkat(dir_fd_, name.c_str(), 0);
  }
  folded_pending_.clear();
}

// ---------------------------------------------------------------- listing

void RegistryReader::reject(const std::string& name, ino_t ino, const std::string& why) {
  auto [it, inserted] = rejected_.try_emplace(name, ino);
  if (!inserted && it->second == ino) return;  // counted already
  it->second = ino;
  ++snapshot_.stats.rejected_files_total;
  snapshot_.problems.push_back("skipped " + dir_ + "/" + name + ": " + why);
}

void RegistryReader::read_error(const std::string& name, ino_t ino, const std::string& what) {
  ++snapshot_.stats.read_errors_total;
  auto [it, inserted] = read_failed_.try_emplace(name, ino);
  if (!inserted && it->second == ino) return;  // reported already
  it->second = ino;
  snapshot_.problems.push_back(what + " " + dir_ + "/" + name + ": " + std::strerror(errno));
}

void RegistryReader::cleanup_stale_temp(const std::string& name) {
  if (!(name.starts_with(".gym-") && ends_with(name, ".tmp")) || !retiring()) return;
  int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && detail::owner_lock_held(fd) == 0 &&
      st.st_mtime + kStaleTempSeconds < ::time(nullptr)) {
    ::unlinkat(dir_fd_, name.c_str(), 0);
  }
  ::close(fd);
}

void RegistryReader::open_segment(const std::string& name, ino_t ino) {
  int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
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
  if (!trusted(st.st_uid))
    return reject(name, st.st_ino,
                  "owned by untrusted user " + std::to_string(st.st_uid) + ", ignored");
  // A live owner's segment cut short by another process: the owner runs
  // unmetered; it is watched like a marker until the owner is gone.
  auto truncated = [&](const char* why) {
    if (detail::owner_lock_held(fd) != 1) return reject(name, st.st_ino, why);
    ++snapshot_.stats.damaged_segments_total;
    snapshot_.problems.push_back("segment " + dir_ + "/" + name + " is damaged (" + why +
                                 "); its owner is alive and runs unmetered");
    markers_[name] = Marker{fd, st.st_ino, true};
    seg->fd = -1;
  };
  if (st.st_size < static_cast<off_t>(segment::kHeaderBytes))
    return truncated("truncated: shorter than a segment header");
  Header h;
  ssize_t got = ::pread(fd, &h, sizeof h, 0);
  if (got != static_cast<ssize_t>(sizeof h)) return reject(name, st.st_ino, "unreadable header");
  if (h.magic != segment::magic_word()) return reject(name, st.st_ino, "wrong magic");
  if (h.format_version < segment::kMinFormatVersion || h.format_version > segment::kFormatVersion)
    return reject(name, st.st_ino,
                  "unsupported format version " + std::to_string(h.format_version) +
                      " (this reader reads " + std::to_string(segment::kMinFormatVersion) + " to " +
                      std::to_string(segment::kFormatVersion) + ")");
  const uint64_t records_end =
      h.records_offset + uint64_t{h.max_records} * uint64_t{segment::kRecordBytes};
  const uint64_t values_end = h.values_offset + uint64_t{h.value_lines} * segment::kLineBytes;
  if (h.header_bytes != segment::kHeaderBytes || h.record_bytes != segment::kRecordBytes ||
      h.line_bytes != segment::kLineBytes || h.records_offset != segment::kHeaderBytes ||
      h.max_records == 0 || h.value_lines == 0 || h.values_offset != records_end ||
      h.total_bytes != values_end || h.total_bytes > kMaxSegmentBytes)
    return reject(name, st.st_ino, "inconsistent layout");
  if (static_cast<uint64_t>(st.st_size) < h.total_bytes)
    return truncated("truncated: shorter than its layout");
  void* map = ::mmap(nullptr, h.total_bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return read_error(name, st.st_ino, "cannot map");
  seg->base = static_cast<const unsigned char*>(map);
  seg->size = h.total_bytes;
  seg->version = h.format_version;
  seg->max_records = h.max_records;
  seg->value_lines = h.value_lines;
  seg->records_offset = h.records_offset;
  seg->values_offset = h.values_offset;
  seg->pid = h.owner_pid;
  seg->start_ticks = h.owner_start_ticks;
  seg->pid_ns = h.owner_pid_ns;
  seg->created_ns = h.created_unix_ns > uint64_t(INT64_MAX) ? 0 : int64_t(h.created_unix_ns);
  std::memcpy(seg->boot_id, h.owner_boot_id, sizeof seg->boot_id);
  seg->listed = true;
  rejected_.erase(name);
  read_failed_.erase(name);
  segments_[name] = std::move(seg);
}

void RegistryReader::open_marker(const std::string& name, ino_t ino) {
  int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return;
    if (errno == ELOOP) return reject(name, ino, "a symbolic link");
    return read_error(name, ino, "cannot open");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !trusted(st.st_uid)) {
    ::close(fd);
    return reject(name, ino, "not a regular file of a trusted user");
  }
  markers_[name] = Marker{fd, st.st_ino, true};
}

// Live markers are processes running unmetered; a dead one is removed.
void RegistryReader::check_markers() {
  for (auto it = markers_.begin(); it != markers_.end();) {
    Marker& m = it->second;
    const bool removed = !m.listed && snapshot_.directory_error.empty();
    const bool alive = !removed && detail::owner_lock_held(m.fd) == 1;
    if (alive) {
      ++snapshot_.stats.unmetered_writers;
    } else if (removed || retiring()) {
      struct stat st {};
      if (!removed && ::fstatat(dir_fd_, it->first.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          st.st_ino == m.ino)
        ::unlinkat(dir_fd_, it->first.c_str(), 0);
      ::close(m.fd);
      it = markers_.erase(it);
      continue;
    }
    ++it;
  }
}

void RegistryReader::list_directory() {
  for (auto& [name, seg] : segments_) seg->listed = false;
  for (auto& [name, m] : markers_) m.listed = false;
  if (!open_dir()) {
    snapshot_.directory_error = "cannot open " + dir_ + ": " + std::strerror(errno);
    return;
  }
  int fd = ::dup(dir_fd_);
  DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (d == nullptr) {
    if (fd >= 0) ::close(fd);
    snapshot_.directory_error = "cannot list " + dir_ + ": " + std::strerror(errno);
    return;
  }
  ::rewinddir(d);
  std::vector<std::pair<std::string, ino_t>> fresh;
  listed_.clear();
  while (dirent* e = ::readdir(d)) {
    std::string name(e->d_name);
    if (name == "." || name == "..") continue;
    if (name[0] == '.') {
      cleanup_stale_temp(name);
      continue;
    }
    listed_.push_back(name);
    if (auto it = segments_.find(name); it != segments_.end() && it->second->ino == e->d_ino) {
      it->second->listed = true;
      continue;
    }
    if (auto it = markers_.find(name); it != markers_.end() && it->second.ino == e->d_ino) {
      it->second.listed = true;
      continue;
    }
    if (auto it = folded_pending_.find(name); it != folded_pending_.end() && it->second == e->d_ino)
      continue;  // folded in already; removed once the totals are written
    if (folded_by_owner_.count(name) != 0) continue;
    auto rej = rejected_.find(name);
    if (rej != rejected_.end() && rej->second == e->d_ino) continue;
    auto failed = read_failed_.find(name);
    if (failed != read_failed_.end() && failed->second == e->d_ino) {
      ++snapshot_.stats.read_errors_total;
      continue;
    }
    fresh.emplace_back(std::move(name), e->d_ino);
  }
  ::closedir(d);
  // Forget what we noted of files that are gone, so a new file of that name
  // is examined (and, if bad, counted) again.
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
  forget_gone(folded_pending_);
  for (auto& [name, ino] : fresh) {
    if (auto it = segments_.find(name); it != segments_.end()) {
      // Same name, new file: the old one is gone.
      if (retiring()) retire(*it->second);
      drop_segment(it);
    }
    if (name.starts_with("gym-") && ends_with(name, ".seg")) {
      open_segment(name, ino);
    } else if (name.starts_with("gym-") && ends_with(name, ".unmetered")) {
      open_marker(name, ino);
    } else {
      reject(name, ino, "not a segment name");
    }
  }
}

bool RegistryReader::owner_alive(const Segment& s) const {
  int locked = detail::owner_lock_held(s.fd);
  if (locked >= 0) return locked == 1;
  uint8_t boot[16];
  if (detail::read_boot_id(boot) && std::memcmp(boot, s.boot_id, sizeof boot) != 0) return false;
  return detail::process_matches(s.pid, s.start_ticks);
}

// ---------------------------------------------------------------- series

// The series id of a record's metadata (a copy, never shared memory),
// interning it the first time; kInvalid with why, or kOverLimit.
int32_t RegistryReader::intern(const Record& rec, std::string* why) {
  auto invalid = [&](const char* what) {
    *why = what;
    return kInvalid;
  };
  if (rec.kind < 1 || rec.kind > 4) return invalid("unknown kind");
  const auto kind = static_cast<SeriesKind>(rec.kind);
  if (rec.label_count > segment::kMaxLabels) return invalid("too many labels");
  if (rec.bound_count > segment::kMaxBounds ||
      (kind != SeriesKind::kHistogram && rec.bound_count != 0))
    return invalid("bad bound count");
  if (rec.text_bytes > segment::kTextBytes) return invalid("text too long");
  const uint32_t shards = kind == SeriesKind::kHistogram ? rec.shards : 1;
  if (kind == SeriesKind::kHistogram &&
      (shards == 0 || shards > segment::kMaxShards || (shards & (shards - 1)) != 0))
    return invalid("bad shard count");
  if (!(rec.unit_divisor > 0) || !std::isfinite(rec.unit_divisor)) return invalid("bad divisor");
  if (rec.native_words != 0 &&
      (kind != SeriesKind::kHistogram || rec.native_words != native::kWords))
    return invalid("bad native bucket count");
  for (uint32_t i = 1; i < rec.bound_count; ++i)
    if (rec.bounds[i] <= rec.bounds[i - 1]) return invalid("bounds not increasing");

  std::string_view parts[1 + 2 * segment::kMaxLabels];
  size_t nparts = 0;
  size_t start = 0;
  for (size_t i = 0; i < rec.text_bytes; ++i) {
    if (rec.text[i] != '\0') continue;
    if (nparts == std::size(parts)) return invalid("malformed text");
    parts[nparts++] = std::string_view(rec.text + start, i - start);
    start = i + 1;
  }
  if (start != rec.text_bytes || nparts != 1 + 2 * size_t{rec.label_count})
    return invalid("malformed text");
  if (!detail::valid_metric_name(parts[0])) return invalid("bad family name");
  for (size_t i = 0; i < rec.label_count; ++i) {
    std::string_view name = parts[1 + 2 * i];
    std::string_view value = parts[2 + 2 * i];
    if (!detail::valid_label_name(name)) return invalid("bad label name");
    if (i > 0 && !(parts[2 * i - 1] < name)) return invalid("labels not sorted");
    if (value.size() > segment::kMaxValueBytes) return invalid("label value too long");
    if (!detail::valid_utf8(value)) return invalid("label value is not valid UTF-8");
  }

  std::string key;
  key.push_back(static_cast<char>(kind));
  key.append(rec.text, rec.text_bytes);
  key.append(reinterpret_cast<const char*>(rec.bounds), sizeof(int64_t) * rec.bound_count);
  key.append(reinterpret_cast<const char*>(&rec.unit_divisor), sizeof rec.unit_divisor);
  key.append(reinterpret_cast<const char*>(&rec.native_words), sizeof rec.native_words);
  auto it = series_ids_.find(key);
  if (it != series_ids_.end()) return static_cast<int32_t>(it->second);

  std::vector<int64_t> bounds(rec.bounds, rec.bounds + rec.bound_count);
  std::string family(parts[0]);
  auto fam = families_.find(family);
  if (fam != families_.end() && (fam->second.kind != kind || fam->second.bounds != bounds ||
                                 fam->second.unit_divisor != rec.unit_divisor ||
                                 fam->second.native_words != rec.native_words))
    return invalid("conflicts with the kind or buckets of its family");
  if (live_series_ >= options_.max_series) return kOverLimit;
  if (fam == families_.end())
    families_.emplace(family, FamilyShape{kind, bounds, rec.unit_divisor, rec.native_words});
  auto info = std::make_unique<SeriesInfo>();
  info->kind = kind;
  info->family = std::move(family);
  for (size_t i = 0; i < rec.label_count; ++i)
    info->labels.emplace_back(std::string(parts[1 + 2 * i]), std::string(parts[2 + 2 * i]));
  info->bounds = std::move(bounds);
  info->unit_divisor = rec.unit_divisor;
  info->native_words = rec.native_words;
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
    infos_[id] = std::move(info);
    keys_[id] = key;
  } else {
    id = static_cast<uint32_t>(infos_.size());
    infos_.push_back(std::move(info));
    keys_.push_back(key);
    refs_.push_back(0);
    last_change_.push_back(0);
    retired_.emplace_back();
    current_.emplace_back();
  }
  refs_[id] = 0;
  last_change_[id] = now_ns();
  retired_[id] = Accumulator{};
  ++live_series_;
  series_ids_.emplace(std::move(key), id);
  order_dirty_ = true;
  return static_cast<int32_t>(id);
}

// Examines records [s.parsed, count): copies each out with pread (a hole or
// a truncated file reads as zeros or short, never faults), validates it once,
// and notes where its values are.
void RegistryReader::parse_new_records(Segment& s, uint32_t count) {
  uint32_t invalid = 0;
  std::string first_problem;
  for (uint32_t i = s.parsed; i < count; ++i) {
    Record rec;
    const off_t at = static_cast<off_t>(s.records_offset + uint64_t{i} * segment::kRecordBytes);
    std::string why;
    int32_t id = kInvalid;
    if (::pread(s.fd, &rec, sizeof rec, at) != static_cast<ssize_t>(sizeof rec)) {
      why = "unreadable";
    } else if (rec.state == segment::kRecordEmpty) {
      why = "counted but never published";
    } else {
      const uint32_t shards = rec.kind == uint8_t(SeriesKind::kHistogram) ? rec.shards : 1;
      const uint32_t lines =
          rec.bound_count <= segment::kMaxBounds
              ? segment::value_lines_for(static_cast<SeriesKind>(rec.kind), rec.bound_count, shards,
                                         rec.native_words)
              : 0;
      if (uint64_t{rec.value_line} + lines > s.value_lines) {
        why = "value out of range";
      } else {
        id = intern(rec, &why);
      }
    }
    if (id == kOverLimit) {
      ++snapshot_.stats.series_over_limit_total;
      if (!over_limit_reported_)
        snapshot_.problems.push_back("registry.max_series (" + std::to_string(options_.max_series) +
                                     ") reached: further series are not tracked");
      over_limit_reported_ = true;
      continue;
    }
    if (id < 0) {
      ++snapshot_.stats.invalid_records_total;
      if (invalid++ == 0)
        first_problem =
            "skipped record " + std::to_string(i) + " of " + dir_ + "/" + s.name + ": " + why;
      continue;
    }
    Segment::Entry e{};
    e.record = i;
    e.id = static_cast<uint32_t>(id);
    e.value_line = rec.value_line;
    e.kind = static_cast<SeriesKind>(rec.kind);
    e.shards = e.kind == SeriesKind::kHistogram ? rec.shards : 1;
    e.bound_count = rec.bound_count;
    e.native_words = rec.native_words;
    e.scratch = s.scratch_words;
    e.last = static_cast<uint32_t>(s.last.size());
    const uint32_t hist_words = segment::shard_words(e.bound_count, e.native_words);
    s.scratch_words += e.kind == SeriesKind::kHistogram ? e.shards * hist_words
                       : e.kind == SeriesKind::kAges    ? segment::kAgeWords
                                                        : 1u;
    if (e.kind == SeriesKind::kCounter || e.kind == SeriesKind::kAges) s.last.push_back(0);
    if (e.kind == SeriesKind::kHistogram) s.last.resize(s.last.size() + hist_words, 0);
    ++refs_[e.id];
    s.entries.push_back(e);
  }
  s.parsed = std::max(s.parsed, count);
  if (invalid > 0) snapshot_.problems.push_back(first_problem);
  if (invalid > 1)
    snapshot_.problems.push_back("skipped " + std::to_string(invalid - 1) +
                                 " more invalid records of " + dir_ + "/" + s.name);
}

// Copies the segment's header counts, states and values out of shared memory
// into scratch_ with aligned atomic loads (untorn), under the SIGBUS guard.
// False when the mapping faulted (the file lost pages under us).
bool RegistryReader::read_values(Segment& s, uint32_t* count) {
  uint32_t n = 0;
  uint64_t dropped = 0;
  if (!guarded(s.base, s.size, [&] {
        n = std::min(segment::load_acquire(&s.header()->record_count), s.max_records);
        dropped = segment::load_relaxed(&s.header()->dropped_series);
      }))
    return false;
  s.dropped = dropped;
  *count = n;
  if (n > s.parsed) parse_new_records(s, n);
  scratch_.resize(s.scratch_words);
  scratch_states_.resize(s.entries.size());
  scratch_inconsistent_.assign(s.entries.size(), 0);
  uint64_t* out = scratch_.data();
  uint32_t* states = scratch_states_.data();
  char* inconsistent = scratch_inconsistent_.data();
  const Segment& seg = s;
  return guarded(s.base, s.size, [&] {
    for (size_t j = 0; j < seg.entries.size(); ++j) {
      const Segment::Entry& e = seg.entries[j];
      states[j] = segment::load_acquire(&seg.record(e.record)->state);
      const uint64_t* line = seg.line(e.value_line);
      uint64_t* to = out + e.scratch;
      if (e.kind == SeriesKind::kAges) {
        for (uint32_t w = 0; w < segment::kAgeWords; ++w) to[w] = segment::load_relaxed(&line[w]);
        continue;
      }
      if (e.kind != SeriesKind::kHistogram) {
        *to = segment::load_relaxed(line);
        continue;
      }
      const uint32_t words = segment::shard_words(e.bound_count, e.native_words);
      const uint32_t stride =
          segment::shard_lines(e.bound_count, e.native_words) * segment::kLineBytes / 8;
      const uint32_t classic = e.bound_count + 1u;
      for (uint32_t k = 0; k < e.shards; ++k, line += stride) {
        uint64_t observed = 0;
        for (uint32_t w = 0; w < classic; ++w)
          observed |= (to[w] = segment::load_relaxed(&line[w]));
        // A shard with no observation in its classic buckets (most: threads
        // use one or two shards, and many outcomes never happen) has its
        // native counts taken as zero, not copied. One that shows later is
        // read from then on, and a classic count never falls back to zero,
        // so native counts never fall either.
        if (e.native_words != 0 && observed == 0) {
          std::fill(to + classic, to + words - 1, uint64_t{0});
        } else if (e.native_words != 0) {
          // Both kinds of bucket of one moment: the native words first
          // (acquire), then the classic ones. A writer adds the classic
          // bucket before the native one (released), so the classic total
          // is never below the native one; they agree unless an
          // observation was in flight, and then the shard is read again.
          bool agree = false;
          for (int attempt = 0; attempt < kConsistentReadAttempts && !agree; ++attempt) {
            uint64_t native_total = 0;
            for (uint32_t w = classic; w + 1 < words; ++w)
              native_total += (to[w] = segment::load_acquire(&line[w]));
            uint64_t classic_total = 0;
            for (uint32_t w = 0; w < classic; ++w)
              classic_total += (to[w] = segment::load_relaxed(&line[w]));
            agree = native_total == classic_total;
          }
          if (!agree) inconsistent[j] = 1;
        }
        to[words - 1] = segment::load_relaxed(&line[words - 1]);  // the sum
        to += words;
      }
    }
  });
}

namespace {
// Adds a counter's or histogram's words (counter: 1; histogram: buckets and
// native buckets, then the sum) into an accumulator.
void add_words(std::vector<uint64_t>& buckets, uint64_t& counter, int64_t& sum, SeriesKind kind,
               const uint64_t* words, uint32_t bound_count, uint32_t native_words) {
  if (kind != SeriesKind::kHistogram) {  // a counter, or an ages record's count of beginnings
    counter = sat_add(counter, words[0]);
    return;
  }
  const size_t n = segment::shard_words(bound_count, native_words) - 1;
  if (buckets.size() != n) buckets.assign(n, 0);
  for (size_t b = 0; b < n; ++b) buckets[b] = sat_add(buckets[b], words[b]);
  sum = segment::wrapping_add(sum, static_cast<int64_t>(words[n]));
}
}  // namespace

// Folds the values last read from a segment into the totals (it was damaged,
// or its owner is gone and it can no longer be read).
void RegistryReader::fold_last(Segment& s) {
  const int64_t now = now_ns();
  for (const Segment::Entry& e : s.entries) {
    if (e.kind == SeriesKind::kGauge) continue;
    Accumulator& acc = retired_[e.id];
    add_words(acc.buckets, acc.counter, acc.sum, e.kind, s.last.data() + e.last, e.bound_count,
              e.native_words);
    acc.note_created(s.created_ns);
    acc.present = true;
    last_change_[e.id] = now;
  }
  std::fill(s.last.begin(), s.last.end(), 0);
  totals_dirty_ = true;
}

void RegistryReader::damage(Segment& s, const std::string& why) {
  if (s.damaged) return;
  fold_last(s);
  s.damaged = true;
  ++snapshot_.stats.damaged_segments_total;
  snapshot_.problems.push_back("segment " + dir_ + "/" + s.name + " of pid " +
                               std::to_string(s.pid) + " is damaged (" + why +
                               "): its last values are kept, it is not read again");
}

// Reads a segment's values: counters and histograms (and gauges when
// `gauges`) into current_ (live) or, for a retiring segment, retired_. A
// counter or histogram below what was read before is a reset: what was read
// before is folded into the totals first.
void RegistryReader::read_segment(Segment& s, bool gauges) {
  if (s.damaged) return;
  struct stat st {};
  if (::fstat(s.fd, &st) == 0) {
    snapshot_.stats.registry_bytes += uint64_t(st.st_blocks) * 512;
    if (static_cast<uint64_t>(st.st_size) < s.size)
      return damage(s, "truncated to " + std::to_string(st.st_size) + " bytes");
  }
  uint32_t count = 0;
  if (!read_values(s, &count)) return damage(s, "a page faulted while reading");
  const int64_t now = now_ns();
  const bool into_retired = !gauges && retiring();
  bool declared = false;
  for (size_t j = 0; j < s.entries.size(); ++j) {
    const Segment::Entry& e = s.entries[j];
    const uint32_t state = scratch_states_[j];
    const uint64_t* cur = scratch_.data() + e.scratch;
    uint64_t ages_begun = 0;
    if (e.kind == SeriesKind::kAges) {
      if (state != segment::kRecordLive && state != segment::kRecordInherited) {
        // Released: its count of beginnings (a counter) goes to the totals.
        uint64_t* last = s.last.data() + e.last;
        if (*last != 0) {
          Accumulator& ret = retired_[e.id];
          ret.counter = sat_add(ret.counter, *last);
          ret.note_created(s.created_ns);
          ret.present = true;
          *last = 0;
          totals_dirty_ = true;
          last_change_[e.id] = now;
        }
        continue;
      }
      Accumulator& acc = into_retired ? retired_[e.id] : current_[e.id];
      if (gauges && state == segment::kRecordLive) {
        // In progress: word 0 and the slots in use; the oldest start is the
        // smallest ticket.
        int64_t n = static_cast<int64_t>(cur[0]);
        int64_t oldest = 0;
        for (uint32_t w = 1; w <= segment::kAgeSlots; ++w) {
          const auto t = static_cast<int64_t>(cur[w]);
          if (t == 0) continue;
          n = segment::wrapping_add(n, 1);
          if (t > 0 && (oldest == 0 || t < oldest)) oldest = t;
        }
        acc.gauge = segment::wrapping_add(acc.gauge, n);
        oldest = segment::ticket_start(oldest);
        if (oldest > 0 && (acc.oldest == 0 || oldest < acc.oldest)) acc.oldest = oldest;
        acc.present = true;
        acc.in_progress = true;
        last_change_[e.id] = now;
      }
      // Begun: the sum of the lanes, read on as a counter.
      for (uint32_t l = 0; l < segment::kAgeLanes; ++l)
        ages_begun = sat_add(ages_begun, cur[segment::kAgeFirstLane + l]);
    } else if (state != segment::kRecordLive) {
      continue;
    }
    Accumulator& acc = into_retired ? retired_[e.id] : current_[e.id];
    if (e.kind == SeriesKind::kGauge) {
      if (!gauges) continue;
      acc.gauge = segment::wrapping_add(acc.gauge, static_cast<int64_t>(*cur));
      acc.present = true;
      last_change_[e.id] = now;
      const SeriesInfo& info = *infos_[e.id];
      if (!declared && info.family == family::kServerIdentity) {
        DeclaredServer server;
        for (const auto& [k, v] : info.labels) {
          if (k == label::kServerName) server.name = v;
          if (k == label::kServerType) server.server_type = v;
        }
        if (!server.name.empty()) {
          server.pid = s.pid;
          server.start_ticks = s.start_ticks;
          server.pid_ns = s.pid_ns;
          snapshot_.servers.push_back(std::move(server));
          declared = true;
        }
      }
      continue;
    }
    uint64_t* last = s.last.data() + e.last;
    uint64_t folded[segment::kMaxBounds + 2 + native::kWords];
    uint32_t words = 1;
    if (e.kind == SeriesKind::kCounter) {
      folded[0] = cur[0];
    } else if (e.kind == SeriesKind::kAges) {
      folded[0] = ages_begun;
    } else {
      // The shards' buckets and sums added up.
      words = segment::shard_words(e.bound_count, e.native_words);
      std::fill(folded, folded + words, 0);
      for (uint32_t k = 0; k < e.shards; ++k) {
        const uint64_t* shard = cur + k * words;
        for (uint32_t w = 0; w + 1 < words; ++w) folded[w] = sat_add(folded[w], shard[w]);
        folded[words - 1] += shard[words - 1];  // the sum wraps, as writers' adds do
      }
    }
    // A histogram whose buckets could not be read at one moment (a writer
    // observing flat out) keeps its last values, which add up, this time.
    if (scratch_inconsistent_[j]) {
      std::copy(last, last + words, folded);
      ++snapshot_.stats.inconsistent_reads_total;
    }
    bool went_down = false;
    for (uint32_t w = 0; w + (e.kind == SeriesKind::kHistogram ? 1 : 0) < words; ++w)
      went_down |= folded[w] < last[w];
    if (went_down) {
      Accumulator& ret = retired_[e.id];
      add_words(ret.buckets, ret.counter, ret.sum, e.kind, last, e.bound_count, e.native_words);
      ret.note_created(s.created_ns);
      ret.present = true;
      ++snapshot_.stats.counter_resets_total;
      totals_dirty_ = true;
      last_change_[e.id] = now;
    }
    std::copy(folded, folded + words, last);
    add_words(acc.buckets, acc.counter, acc.sum, e.kind, folded, e.bound_count, e.native_words);
    acc.note_created(s.created_ns);
    acc.present = true;
    if (!into_retired) last_change_[e.id] = now;
  }
}

// The owner is gone (or its file was replaced): keep its counters and
// histograms in the totals, drop the rest. Its file is removed once the
// totals that hold it are written.
void RegistryReader::retire(Segment& s) {
  if (!s.damaged) {
    read_segment(s, /*gauges=*/false);
    if (!s.damaged) {
      const int64_t now = now_ns();
      for (const Segment::Entry& e : s.entries)
        if (e.kind != SeriesKind::kGauge) last_change_[e.id] = now;
    }
  }
  retired_dropped_ = sat_add(retired_dropped_, s.dropped);
  ++snapshot_.stats.retired_segments_total;
  totals_dirty_ = true;
  struct stat st {};
  if (::fstatat(dir_fd_, s.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino == s.ino)
    folded_pending_[s.name] = s.ino;
}

// Forgets an open segment (and its records' references to series); returns
// the next one.
RegistryReader::SegmentMap::iterator RegistryReader::drop_segment(SegmentMap::iterator it) {
  for (const Segment::Entry& e : it->second->entries) --refs_[e.id];
  return segments_.erase(it);
}

// Forgets series that no open segment names and that have not changed for
// the TTL.
void RegistryReader::expire_series(int64_t now) {
  const int64_t ttl_ns = int64_t{options_.retired_series_ttl.count()} * 1000000;
  for (uint32_t id = 0; id < infos_.size(); ++id) {
    if (!infos_[id] || refs_[id] != 0 || current_[id].present) continue;
    if (now - last_change_[id] <= ttl_ns) continue;
    series_ids_.erase(keys_[id]);
    keys_[id].clear();
    infos_[id].reset();
    retired_[id] = Accumulator{};
    free_ids_.push_back(id);
    --live_series_;
    ++snapshot_.stats.expired_series_total;
    order_dirty_ = true;
    totals_dirty_ = true;
  }
  if (live_series_ < options_.max_series) over_limit_reported_ = false;
}

// ---------------------------------------------------------------- snapshot

const Snapshot& RegistryReader::snapshot() {
  snapshot_.problems.clear();
  snapshot_.directory_error.clear();
  snapshot_.servers.clear();
  snapshot_.writers.clear();
  snapshot_.stats.unmetered_writers = 0;
  snapshot_.stats.registry_bytes = 0;
  snapshot_.stats.live_segments_by_version = {};
  snapshot_.monotonic_ns = segment::precise_now_ns();
  const int64_t now = now_ns();
  if (options_.mode == ReaderOptions::Mode::kRetire && !retiring() && open_dir()) {
    std::string why;
    if (!try_lock(&why)) {
      if (!lock_refused_) snapshot_.problems.push_back(why + "; reading without retiring");
      lock_refused_ = true;
    }
  }
  if (!retiring() && open_dir()) {
    // Follow the retiring reader's totals when they change.
    struct stat st {};
    stat_key seen{};
    if (::fstatat(dir_fd_, kTotalsFile, &st, AT_SYMLINK_NOFOLLOW) == 0)
      seen = {st.st_ino, int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec, st.st_size};
    if (!(seen == totals_seen_)) {
      for (auto& acc : retired_) acc = Accumulator{};
      retired_dropped_ = 0;
      folded_by_owner_.clear();
      if (seen.ino != 0) load_totals(/*adopt_folded=*/false);
      totals_seen_ = seen;
    }
  }
  list_directory();

  // Owners that are gone: the retiring reader folds them into the totals
  // first; a read-only reader still counts their counters and histograms.
  for (auto it = segments_.begin(); it != segments_.end();) {
    Segment& s = *it->second;
    const bool removed = !s.listed && snapshot_.directory_error.empty();
    const bool alive = !removed && owner_alive(s);
    s.dead = !alive;
    if (!alive && retiring()) retire(s);
    if ((!alive && retiring()) || removed)
      it = drop_segment(it);
    else
      ++it;
  }
  for (auto& acc : current_) {
    acc.present = false;
    acc.counter = 0;
    acc.gauge = 0;
    acc.oldest = 0;
    acc.in_progress = false;
    acc.sum = 0;
    acc.created_ns = 0;
    acc.created_unknown = false;
    std::fill(acc.buckets.begin(), acc.buckets.end(), 0);
  }
  uint64_t live = 0;
  uint64_t dropped = 0;
  for (auto& [name, seg] : segments_) {
    read_segment(*seg, /*gauges=*/!seg->dead);
    dropped = sat_add(dropped, seg->dropped);
    if (seg->dead) continue;
    snapshot_.writers.push_back(
        {seg->pid, seg->start_ticks, seg->version, seg->damaged, seg->pid_ns});
    if (seg->damaged) {
      ++snapshot_.stats.unmetered_writers;
      continue;
    }
    ++live;
    ++snapshot_.stats.live_segments_by_version[seg->version];
  }
  check_markers();
  expire_series(now);
  if (retiring() && totals_dirty_) persist_totals();
  if (struct stat st{};
      open_dir() && ::fstatat(dir_fd_, kTotalsFile, &st, AT_SYMLINK_NOFOLLOW) == 0)
    snapshot_.stats.registry_bytes += uint64_t(st.st_blocks) * 512;
  snapshot_.stats.live_segments = live;
  snapshot_.stats.dropped_series_total = sat_add(retired_dropped_, dropped);
  snapshot_.stats.series = live_series_;
  snapshot_.stats.retiring = retiring();
  build_output();
  return snapshot_;
}

void RegistryReader::build_output() {
  if (order_dirty_) {
    ++snapshot_.series_epoch;
    order_.clear();
    for (uint32_t i = 0; i < infos_.size(); ++i)
      if (infos_[i]) order_.push_back(i);
    std::sort(order_.begin(), order_.end(), [this](uint32_t a, uint32_t b) {
      const SeriesInfo& x = *infos_[a];
      const SeriesInfo& y = *infos_[b];
      if (x.family != y.family) return x.family < y.family;
      return x.labels < y.labels;
    });
    order_dirty_ = false;
  }
  size_t n = 0;
  for (uint32_t id : order_) {
    const Accumulator& live = current_[id];
    const Accumulator& ret = retired_[id];
    if (!live.present && !ret.present) continue;
    if (snapshot_.series.size() <= n) snapshot_.series.emplace_back();
    SeriesSample& out = snapshot_.series[n++];
    const SeriesInfo& info = *infos_[id];
    out.info = &info;
    out.counter = sat_add(live.counter, ret.counter);
    out.gauge = live.gauge;
    out.oldest_start = live.oldest;
    out.in_progress = live.in_progress;
    out.sum = segment::wrapping_add(live.sum, ret.sum);
    out.created_unix_ns = 0;
    if (info.kind != SeriesKind::kGauge && !(live.present && live.created_unknown) &&
        !(ret.present && ret.created_unknown)) {
      const int64_t a = live.present ? live.created_ns : 0;
      const int64_t b = ret.present ? ret.created_ns : 0;
      out.created_unix_ns = a == 0 ? b : b == 0 ? a : std::min(a, b);
    }
    if (info.kind == SeriesKind::kHistogram) {
      const size_t buckets = info.bounds.size() + 1;
      out.cumulative_buckets.resize(buckets);
      uint64_t running = 0;
      for (size_t b = 0; b < buckets; ++b) {
        running = sat_add(running, b < live.buckets.size() ? live.buckets[b] : 0);
        running = sat_add(running, b < ret.buckets.size() ? ret.buckets[b] : 0);
        out.cumulative_buckets[b] = running;
      }
      out.native.resize(info.native_words);
      for (size_t w = 0; w < info.native_words; ++w) {
        const size_t b = buckets + w;
        out.native[w] = sat_add(b < live.buckets.size() ? live.buckets[b] : 0,
                                b < ret.buckets.size() ? ret.buckets[b] : 0);
      }
    } else {
      out.cumulative_buckets.clear();
      out.native.clear();
    }
  }
  snapshot_.series.resize(n);
}

}  // namespace gym
