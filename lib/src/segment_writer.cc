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

#include "fault_guard.h"
#include "label_rules.h"
#include "owner_lock.h"
#include "process_identity.h"

namespace gym {

using segment::Header;
using segment::Record;
using segment::SeriesKind;

namespace {

// Every live writer, so that fork can move each to a segment of the child's.
std::mutex& writers_mutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::vector<SegmentWriter*>& writers() {
  static auto* list = new std::vector<SegmentWriter*>;
  return *list;
}
std::atomic<uint64_t> g_sequence{0};
std::once_flag g_atfork_once;

Header* header_of(unsigned char* base) {
  return reinterpret_cast<Header*>(base);
}
Record* record_of(unsigned char* base, uint32_t i) {
  return reinterpret_cast<Record*>(base + segment::kRecordsOffset +
                                   uint64_t{i} * segment::kRecordBytes);
}
unsigned char* line_of(unsigned char* base, uint32_t line) {
  return base + segment::kValuesOffset + uint64_t{line} * segment::kLineBytes;
}

// Zeroes a gauge's or an ages record's values (word by word, atomically: a
// handle being moved may still write them).
void zero_values(Record* r, unsigned char* base) {
  const uint32_t words =
      segment::value_lines_for(static_cast<SeriesKind>(r->kind), 0, 1, 0) * segment::kLineBytes / 8;
  auto* w = reinterpret_cast<int64_t*>(line_of(base, r->value_line));
  for (uint32_t i = 0; i < words; ++i) segment::store_relaxed(&w[i], int64_t{0});
}

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
  h->values_offset = segment::kValuesOffset;
  h->total_bytes = segment::kTotalBytes;
  h->owner_pid = pid;
  h->owner_start_ticks = ticks;
  h->owner_pid_ns = detail::pid_namespace();
  detail::read_boot_id(h->owner_boot_id);
  h->created_unix_ns = now_unix_ns();
}

// After a fork: the parent's first `count` records into the child's segment
// at `base`. Counters and histograms start at zero in the child (the
// parent's counts stay in the parent's segment). Gauges keep the values of
// the objects the child inherited, for the child's own use, but are not
// exported from the child (inherited): the parent still reports them.
void copy_inherited(unsigned char* base, unsigned char* parent, uint32_t count) {
  std::memcpy(base + segment::kRecordsOffset, parent + segment::kRecordsOffset,
              uint64_t{count} * segment::kRecordBytes);
  for (uint32_t i = 0; i < count; ++i) {
    Record* r = record_of(base, i);
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

// ---------------------------------------------------------------- SegmentWriter

SegmentWriter::SegmentWriter(std::string dir) : dir_(std::move(dir)) {
  std::call_once(g_atfork_once, [] {
    pthread_atfork(&SegmentWriter::prepare_fork, &SegmentWriter::after_fork_parent,
                   &SegmentWriter::after_fork_child);
  });
  std::lock_guard<std::mutex> lock(writers_mutex());
  writers().push_back(this);
}

SegmentWriter::~SegmentWriter() {
  {
    std::lock_guard<std::mutex> lock(writers_mutex());
    auto& list = writers();
    list.erase(std::remove(list.begin(), list.end(), this), list.end());
  }
  if (base_ != nullptr) {
    detail::unprotect_writer_mapping(base_);
    ::munmap(base_, segment::kTotalBytes);
  }
  if (fd_ >= 0) ::close(fd_);
  drop_marker();
}

SegmentWriter& SegmentWriter::process() {
  static SegmentWriter* writer = [] {
    const char* env = std::getenv(kDirEnv);
    return new SegmentWriter(env != nullptr && *env != '\0' ? env : kDefaultDir);
  }();
  return *writer;
}

std::string SegmentWriter::path() const {
  std::lock_guard<std::mutex> lock(mu_);
  return base_ != nullptr && !detached_ ? path_ : std::string();
}

bool SegmentWriter::has_segment() const {
  std::lock_guard<std::mutex> lock(mu_);
  return base_ != nullptr && !detached_;
}

uint64_t SegmentWriter::dropped_series() const {
  std::lock_guard<std::mutex> lock(mu_);
  return local_dropped_;
}

std::string SegmentWriter::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

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

// Pages up to record `records` (exclusive) and value line `lines` are
// reserved before they are touched (see reserve_pages).
bool SegmentWriter::reserve_locked(int fd, uint32_t records, uint32_t lines) {
  const uint64_t rec_end = segment::kRecordsOffset + uint64_t{records} * segment::kRecordBytes;
  const uint64_t val_end = segment::kValuesOffset + uint64_t{lines} * segment::kLineBytes;
  if (rec_end > reserved_records_end_) {
    if (!reserve_pages(fd, reserved_records_end_, rec_end)) return false;
    reserved_records_end_ =
        (rec_end + segment::kPageBytes - 1) / segment::kPageBytes * segment::kPageBytes;
  }
  if (val_end > reserved_values_end_) {
    if (!reserve_pages(fd, reserved_values_end_, val_end)) return false;
    reserved_values_end_ =
        (val_end + segment::kPageBytes - 1) / segment::kPageBytes * segment::kPageBytes;
  }
  return true;
}

// Creates a complete segment and links it into the directory (see the
// publication rule in segment_format.h). After a fork, copies the parent's
// records and gauge values into it and maps it over the parent's mapping, so
// that every handle now points into the child's own segment.
bool SegmentWriter::create_segment_locked(bool after_fork) {
  const pid_t pid = ::getpid();
  const uint64_t ticks = detail::own_start_ticks().value_or(0);

  bool named_temp = false;
  std::string temp_path;
  int fd = ::open(dir_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    // No unnamed files here: a dot-named temporary that readers skip (and
    // remove once it is stale and unlocked).
    named_temp = true;
    temp_path = dir_ + "/.gym-" + std::to_string(pid) + "-" +
                std::to_string(g_sequence.fetch_add(1)) + ".tmp";
    fd = ::open(temp_path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  }
  if (fd < 0) {
    error_ = errno_text("cannot create segment in", dir_);
    return false;
  }
  auto fail = [&](const char* what) {
    error_ = errno_text(what, dir_);
    if (named_temp) ::unlink(temp_path.c_str());
    ::close(fd);
    return false;
  };
  // Without OFD locks (EINVAL on very old kernels) readers fall back to the
  // pid and start time in the header.
  if (!detail::take_owner_lock(fd) && errno != EINVAL) return fail("cannot lock segment in");
  if (::fchmod(fd, 0600) != 0) return fail("cannot chmod segment in");
  if (::ftruncate(fd, static_cast<off_t>(segment::kTotalBytes)) != 0)
    return fail("cannot size segment in");
  // The header now; records and values as they are registered (or, after a
  // fork, as far as the parent's go).
  reserved_records_end_ = segment::kRecordsOffset;
  reserved_values_end_ = segment::kValuesOffset;
  if (!reserve_pages(fd, 0, segment::kHeaderBytes)) return fail("cannot reserve segment pages in");
  uint32_t inherited_count = 0;
  if (after_fork && base_ != nullptr) {
    inherited_count =
        std::min(segment::load_acquire(&header_of(base_)->record_count), segment::kMaxRecords);
    if (!reserve_locked(fd, inherited_count, next_line_))
      return fail("cannot reserve segment pages in");
  }
  void* map = ::mmap(nullptr, segment::kTotalBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return fail("cannot map segment in");
  auto* base = static_cast<unsigned char*>(map);

  Header* h = header_of(base);
  write_header(h, pid, ticks);

  if (after_fork && base_ != nullptr) {
    // Same records (copy_inherited says what the child keeps).
    const uint32_t count = inherited_count;
    copy_inherited(base, base_, count);
    if (detail::writer_mapping_lost(base_)) {
      // The parent's file lost its pages under the copy: what was copied
      // is zeros, not the parent's records. This child goes unmetered.
      errno = EIO;
      ::munmap(base, segment::kTotalBytes);
      return fail("cannot copy the parent's truncated segment in");
    }
    segment::store_release(&h->record_count, count);
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

  if (after_fork && base_ != nullptr) {
    // Put the child's segment where the parent's was, so that existing
    // handles write into it.
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
  } else {
    base_ = base;
    detail::protect_writer_mapping(base_, segment::kTotalBytes);
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  path_ = final_path;
  error_.clear();
  return true;
}

void SegmentWriter::count_drop_locked() {
  ++local_dropped_;
  if (base_ != nullptr && !detached_)
    segment::add_relaxed(&header_of(base_)->dropped_series, uint64_t{1});
}

int32_t SegmentWriter::find_or_add_record_locked(SeriesKind kind, std::string_view family,
                                                 std::span<const Label> labels,
                                                 std::span<const int64_t> bounds,
                                                 double unit_divisor, bool reuse_released,
                                                 uint16_t native_words) {
  // Canonical text: family, then labels sorted by name.
  std::string text;
  if (!detail::valid_metric_name(family) || labels.size() > segment::kMaxLabels ||
      bounds.size() > segment::kMaxBounds || !(unit_divisor > 0)) {
    ensure_segment_locked();
    count_drop_locked();
    return -1;
  }
  std::vector<Label> sorted(labels.begin(), labels.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const Label& a, const Label& b) { return a.name < b.name; });
  text.append(family).push_back('\0');
  for (size_t i = 0; i < sorted.size(); ++i) {
    const Label& l = sorted[i];
    bool duplicate = i > 0 && sorted[i - 1].name == l.name;
    if (duplicate || !detail::valid_label_name(l.name) ||
        l.value.size() > segment::kMaxValueBytes || l.value.find('\0') != std::string_view::npos ||
        !detail::valid_utf8(l.value)) {
      ensure_segment_locked();
      count_drop_locked();
      return -1;
    }
    text.append(l.name).push_back('\0');
    text.append(l.value).push_back('\0');
  }
  for (size_t i = 1; i < bounds.size(); ++i) {
    if (bounds[i] <= bounds[i - 1]) {
      ensure_segment_locked();
      count_drop_locked();
      return -1;
    }
  }
  if (text.size() > segment::kTextBytes) {
    ensure_segment_locked();
    count_drop_locked();
    return -1;
  }

  std::string key;
  key.push_back(static_cast<char>(kind));
  key.append(text);
  key.append(reinterpret_cast<const char*>(bounds.data()), bounds.size_bytes());
  key.append(reinterpret_cast<const char*>(&unit_divisor), sizeof unit_divisor);
  key.append(reinterpret_cast<const char*>(&native_words), sizeof native_words);

  if (!reuse_released) {
    auto it = series_.find(key);
    if (it != series_.end()) return static_cast<int32_t>(it->second);
  } else {
    auto it = released_gauges_.find(key);
    if (it != released_gauges_.end() && !it->second.empty()) {
      uint32_t index = it->second.back();
      it->second.pop_back();
      zero_values(record_of(base_, index), base_);
      segment::store_release(&record_of(base_, index)->state, segment::kRecordLive);
      return static_cast<int32_t>(index);
    }
  }

  if (!ensure_segment_locked()) {
    count_drop_locked();
    return -1;
  }
  Header* h = header_of(base_);
  const uint32_t index = segment::load_relaxed(&h->record_count);
  const uint32_t shards = kind == SeriesKind::kHistogram ? segment::kHistogramShards : 1;
  const uint32_t lines =
      segment::value_lines_for(kind, static_cast<uint32_t>(bounds.size()), shards, native_words);
  if (index >= segment::kMaxRecords || next_line_ + lines > segment::kValueLines ||
      !reserve_locked(fd_, index + 1, next_line_ + lines)) {
    count_drop_locked();
    return -1;
  }
  Record* r = record_of(base_, index);
  r->kind = static_cast<uint8_t>(kind);
  r->label_count = static_cast<uint8_t>(sorted.size());
  r->bound_count = static_cast<uint8_t>(bounds.size());
  r->shards = static_cast<uint8_t>(shards);
  r->value_line = next_line_;
  r->text_bytes = static_cast<uint16_t>(text.size());
  r->native_words = native_words;
  r->unit_divisor = unit_divisor;
  std::copy(bounds.begin(), bounds.end(), r->bounds);
  std::memcpy(r->text, text.data(), text.size());
  segment::store_release(&r->state, segment::kRecordLive);
  segment::store_release(&h->record_count, index + 1);
  next_line_ += lines;
  if (reuse_released) {
    if (gauge_keys_.size() <= index) gauge_keys_.resize(index + 1);
    gauge_keys_[index] = std::move(key);
  } else {
    series_.emplace(std::move(key), index);
  }
  return static_cast<int32_t>(index);
}

Counter SegmentWriter::counter(std::string_view family, std::span<const Label> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  int32_t index = find_or_add_record_locked(SeriesKind::kCounter, family, labels, {}, 1.0, false);
  if (index < 0) return Counter();
  Record* r = record_of(base_, static_cast<uint32_t>(index));
  return Counter(reinterpret_cast<uint64_t*>(line_of(base_, r->value_line)));
}

Histogram SegmentWriter::histogram(std::string_view family, std::span<const Label> labels,
                                   std::span<const int64_t> bounds, double unit_divisor,
                                   bool native) {
  std::lock_guard<std::mutex> lock(mu_);
  Histogram hist;
  int32_t index =
      find_or_add_record_locked(SeriesKind::kHistogram, family, labels, bounds, unit_divisor, false,
                                native ? uint16_t{native::kWords} : uint16_t{0});
  if (index < 0) return hist;
  Record* r = record_of(base_, static_cast<uint32_t>(index));
  hist.buckets_ = reinterpret_cast<uint64_t*>(line_of(base_, r->value_line));
  hist.shard_mask_ = r->shards - 1;
  hist.shard_words_ =
      segment::shard_lines(r->bound_count, r->native_words) * segment::kLineBytes / 8;
  hist.sum_index_ = r->bound_count + 1u;
  if (r->native_words != 0) hist.native_ = hist.buckets_ + r->shards * hist.shard_words_;
  hist.unit_scale_ = 1.0 / unit_divisor;
  hist.writer_ = this;
  hist.record_ = static_cast<uint32_t>(index);
  hist.exemplar_line_ = &r->exemplar_line;
  hist.values_ = line_of(base_, 0);
  std::fill(std::begin(hist.bounds_), std::end(hist.bounds_), INT64_MAX);
  std::copy(bounds.begin(), bounds.end(), hist.bounds_);
  return hist;
}

// ------------------------------------------------------------ exemplars

uint32_t SegmentWriter::reserve_exemplars(uint32_t index) noexcept {
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  try {
    lock.lock();
  } catch (...) {
    return 0;  // no exemplar this time
  }
  Record* r = record_of(base_, index);
  uint32_t line = segment::load_relaxed(&r->exemplar_line);
  if (line != 0) return line;  // another thread's, meanwhile
  const uint32_t lines = r->bound_count + 1u;
  const uint32_t records = segment::load_relaxed(&header_of(base_)->record_count);
  if (detached_ || fd_ < 0 || next_line_ + lines > segment::kValueLines ||
      !reserve_locked(fd_, records, next_line_ + lines)) {
    line = segment::kNoExemplarLine;  // not tried again
  } else {
    line = next_line_;
    next_line_ += lines;
  }
  segment::store_release(&r->exemplar_line, line);
  return line;
}

uint32_t Histogram::reserve_exemplars() const noexcept {
  return writer_ != nullptr ? writer_->reserve_exemplars(record_) : segment::kNoExemplarLine;
}

Gauge SegmentWriter::gauge(std::string_view family, std::span<const Label> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Gauge gauge;
  int32_t index = find_or_add_record_locked(SeriesKind::kGauge, family, labels, {}, 1.0, true);
  if (index < 0) return gauge;
  Record* r = record_of(base_, static_cast<uint32_t>(index));
  gauge.writer_ = this;
  gauge.record_ = static_cast<uint32_t>(index);
  gauge.value_ = reinterpret_cast<int64_t*>(line_of(base_, r->value_line));
  return gauge;
}

AgeSlots SegmentWriter::ages(std::string_view family, std::span<const Label> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  AgeSlots ages;
  int32_t index = find_or_add_record_locked(SeriesKind::kAges, family, labels, {}, 1.0, true);
  if (index < 0) return ages;
  Record* r = record_of(base_, static_cast<uint32_t>(index));
  ages.writer_ = this;
  ages.record_ = static_cast<uint32_t>(index);
  ages.words_ = reinterpret_cast<int64_t*>(line_of(base_, r->value_line));
  return ages;
}

// Releases a gauge's or an ages record's slot (its values zeroed first).
void SegmentWriter::release_gauge(uint32_t index) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (base_ == nullptr || index >= gauge_keys_.size()) return;
  Record* r = record_of(base_, index);
  zero_values(r, base_);
  segment::store_release(&r->state, segment::kRecordReleased);
  try {
    released_gauges_[gauge_keys_[index]].push_back(index);
  } catch (...) {
    // Out of memory: the slot stays released and is simply not reused.
  }
}

// ---------------------------------------------------------------- fork

void SegmentWriter::prepare_fork() noexcept {
  writers_mutex().lock();
  for (SegmentWriter* w : writers()) w->mu_.lock();
}

void SegmentWriter::after_fork_parent() noexcept {
  for (SegmentWriter* w : writers()) w->mu_.unlock();
  writers_mutex().unlock();
}

void SegmentWriter::after_fork_child() noexcept {
  detail::age_lanes_after_fork();
  detail::shards_after_fork();
  for (SegmentWriter* w : writers()) {
    w->renew_after_fork();
    w->mu_.unlock();
  }
  writers_mutex().unlock();
}

void SegmentWriter::renew_after_fork() noexcept {
  // The parent's marker and its lock belong to the parent.
  const bool parent_unmetered = marker_fd_ >= 0;
  if (marker_fd_ >= 0) ::close(marker_fd_);
  marker_fd_ = -1;
  // A parent whose mapping a fault already replaced has nothing to copy.
  if (base_ != nullptr && detail::writer_mapping_lost(base_)) detached_ = true;
  if (base_ == nullptr || detached_) {
    if (parent_unmetered || base_ != nullptr) mark_unmetered_locked();
    return;
  }
  bool ok = false;
  try {
    ok = create_segment_locked(true);
  } catch (...) {
    ok = false;
  }
  if (!ok) {
    // Never write into the parent's segment: give the child private zero
    // pages at the same address, and close the parent's file.
    ::mmap(base_, segment::kTotalBytes, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    // Records stay allocated in process memory; no new ones are made.
    tried_ = true;
    detached_ = true;
    mark_unmetered_locked();
  }
}

}  // namespace gym
