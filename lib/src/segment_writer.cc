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

}  // namespace

namespace {
// Histogram shards held by a live thread of this process (bit = shard).
std::atomic<uint32_t> g_shards{0};

// Hands the thread's shard back when it exits (constructed on first use
// only, so that the fast path reads a plain initial-exec variable).
struct ShardOwner {
  uint32_t held_plus_one = 0;  // 0: it shares one
  ~ShardOwner() {
    if (held_plus_one == 0) return;
    // Observations after this (another thread-local's destructor) go to the
    // shared shard with atomic adds: the one handed back may have a new
    // owner writing it with plain stores.
    detail::t_shard_plus_one = segment::kHistogramShards;
    g_shards.fetch_and(~(uint32_t{1} << (held_plus_one - 1)), std::memory_order_release);
  }
};
thread_local ShardOwner t_shard_owner;
}  // namespace

constinit thread_local uint32_t detail::t_shard_plus_one = 0;

// The lowest shard of its own no live thread holds, so that up to
// kHistogramShards threads never share one (the first kHistogramShards - 1
// each alone in theirs, the next in the shared one); beyond, threads share
// the last.
uint32_t detail::assign_thread_shard() noexcept {
  constexpr uint32_t all = (uint32_t{1} << (segment::kHistogramShards - 1)) - 1;
  uint32_t taken = g_shards.load(std::memory_order_relaxed);
  uint32_t shard = 0;
  for (;;) {
    const uint32_t free = ~taken & all;
    if (free == 0) {
      shard = segment::kHistogramShards - 1;
      break;
    }
    const auto s = static_cast<uint32_t>(__builtin_ctz(free));
    if (g_shards.compare_exchange_weak(taken, taken | (uint32_t{1} << s),
                                       std::memory_order_acquire)) {
      shard = s;
      t_shard_owner.held_plus_one = s + 1;
      break;
    }
  }
  t_shard_plus_one = shard + 1;
  return shard;
}

void detail::shards_after_fork() noexcept {
  const uint32_t held = t_shard_owner.held_plus_one;
  g_shards.store(held != 0 ? uint32_t{1} << (held - 1) : 0, std::memory_order_relaxed);
}

// ---------------------------------------------------------------- Gauge

Gauge::Gauge() = default;

namespace {
// Where moved-from gauges point: they may still be updated (atomically, so
// sharing it is no data race) but nothing reads it.
int64_t g_moved_from_sink[8];
}  // namespace

// Takes other's slot; an unregistered value moves into this gauge's own
// storage (moves are not concurrent with updates of either gauge).
void Gauge::take_value(Gauge& other) noexcept {
  writer_ = other.writer_;
  record_ = other.record_;
  if (other.value_ == &other.local_) {
    local_ = other.local_;
    value_ = &local_;
  } else {
    value_ = other.value_;
  }
  other.writer_ = nullptr;
  other.value_ = g_moved_from_sink;
}

Gauge::Gauge(Gauge&& other) noexcept {
  take_value(other);
}

Gauge& Gauge::operator=(Gauge&& other) noexcept {
  if (this != &other) {
    reset();
    take_value(other);
  }
  return *this;
}

Gauge::~Gauge() {
  reset();
}

void Gauge::reset() noexcept {
  if (writer_ != nullptr) writer_->release_gauge(record_);
  writer_ = nullptr;
}

// ---------------------------------------------------------------- AgeSlots

namespace {
using segment::kAgeSlots;

bool cas_relaxed(int64_t* p, int64_t expected, int64_t desired) noexcept {
  return __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED);
}
int64_t ticket_base(int64_t start) noexcept {
  return std::max(start, int64_t{1} << segment::kAgeIndexBits) & ~segment::kAgeIndexMask;
}
// The slot word a ticket names, or 0 when it names none.
uint32_t slot_of(int64_t ticket) noexcept {
  const auto w = static_cast<uint32_t>(ticket & segment::kAgeIndexMask);
  return w <= kAgeSlots ? w : 0;
}

// Lanes 1..kAgeLanes-1 taken by a thread of this process (bit = lane).
std::atomic<uint64_t> g_age_lanes{1};  // lane 0 is shared, never handed out

// Hands the thread's lane back when it exits (constructed on first use only,
// so that the fast path reads a plain initial-exec variable).
struct AgeLaneOwner {
  uint32_t lane = 0;
  ~AgeLaneOwner() {
    // Anything this thread begins from now on counts in the shared lane.
    detail::t_age_lane_plus_one = 1;
    if (lane != 0) g_age_lanes.fetch_and(~(uint64_t{1} << lane), std::memory_order_release);
  }
};
thread_local AgeLaneOwner t_age_lane_owner;
}  // namespace

constinit thread_local uint32_t detail::t_age_lane_plus_one = 0;

uint32_t detail::assign_age_lane() noexcept {
  uint64_t taken = g_age_lanes.load(std::memory_order_relaxed);
  uint32_t lane = 0;
  for (;;) {
    const uint64_t free = ~taken & ((uint64_t{1} << segment::kAgeLanes) - 1);
    if (free == 0) break;
    const auto l = static_cast<uint32_t>(__builtin_ctzll(free));
    if (g_age_lanes.compare_exchange_weak(taken, taken | (uint64_t{1} << l),
                                          std::memory_order_acquire)) {
      lane = l;
      break;
    }
  }
  t_age_lane_owner.lane = lane;
  t_age_lane_plus_one = lane + 1;
  return lane;
}

void detail::age_lanes_after_fork() noexcept {
  const uint32_t l = t_age_lane_plus_one;
  g_age_lanes.store(1 | (l > 1 ? uint64_t{1} << (l - 1) : 0), std::memory_order_relaxed);
}

namespace {
// Where lane `lane` lives among the lane words: lanes 0..3 on four cache
// lines, lane 4 beside lane 0 and so on, so that the first threads' lanes
// never share a line (each thread writes its own at every begin; lanes side
// by side made two threads on one semaphore pass their line back and forth).
// The reader adds up all lanes, in any order.
constexpr uint32_t lane_word(uint32_t lane) {
  constexpr uint32_t kPerLine = segment::kLineBytes / 8;
  constexpr uint32_t kLines = segment::kAgeLanes / kPerLine;
  return segment::kAgeFirstLane + (lane % kLines) * kPerLine + lane / kLines;
}
static_assert(segment::kAgeLanes % (segment::kLineBytes / 8) == 0);
static_assert(lane_word(1) / 8 != lane_word(2) / 8 && lane_word(2) / 8 != lane_word(3) / 8);
static_assert(lane_word(segment::kAgeLanes - 1) == segment::kAgeWords - 1);
}  // namespace

uint32_t AgeSlots::count_begun() const noexcept {
  const uint32_t lane = detail::age_lane();
  int64_t* c = &words_[lane_word(lane)];
  if (lane == 0)
    segment::add_relaxed(c, int64_t{1});
  else  // this thread's own lane: no read-modify-write needed
    segment::store_relaxed(c, segment::load_relaxed(c) + 1);
  return lane;
}

AgeSlots::AgeSlots(AgeSlots&& other) noexcept
    : writer_(std::exchange(other.writer_, nullptr)),
      record_(other.record_),
      words_(std::exchange(other.words_, nullptr)) {}

AgeSlots& AgeSlots::operator=(AgeSlots&& other) noexcept {
  if (this != &other) {
    if (writer_ != nullptr) writer_->release_gauge(record_);
    writer_ = std::exchange(other.writer_, nullptr);
    record_ = other.record_;
    words_ = std::exchange(other.words_, nullptr);
  }
  return *this;
}

AgeSlots::~AgeSlots() {
  if (writer_ != nullptr) writer_->release_gauge(record_);
}

int64_t AgeSlots::begin(int64_t start) const noexcept {
  if (words_ == nullptr) return 0;
  const uint32_t lane = count_begun();
  const int64_t base = ticket_base(start);
  // Each thread (its lane) starts looking on a cache line of its own.
  uint32_t i = (lane * (segment::kLineBytes / 8)) % kAgeSlots;
  for (uint32_t n = 0; n < kAgeSlots; ++n) {
    int64_t* slot = &words_[1 + i];
    if (segment::load_relaxed(slot) == 0 && cas_relaxed(slot, 0, base | (1 + i)))
      return base | (1 + i);
    i = i + 1 == kAgeSlots ? 0 : i + 1;
  }
  segment::add_relaxed(&words_[0], int64_t{1});
  return base;
}

void AgeSlots::end(int64_t ticket) const noexcept {
  if (words_ == nullptr) return;
  const uint32_t w = slot_of(ticket);
  if (w != 0 && cas_relaxed(&words_[w], ticket, 0)) return;
  end_any();
}

void AgeSlots::end_any() const noexcept {
  for (int64_t n = segment::load_relaxed(&words_[0]); n > 0;)
    if (__atomic_compare_exchange_n(&words_[0], &n, n - 1, true, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
      return;
  for (;;) {
    uint32_t oldest = 0;
    int64_t oldest_ticket = 0;
    for (uint32_t w = 1; w <= kAgeSlots; ++w) {
      const int64_t t = segment::load_relaxed(&words_[w]);
      if (t != 0 && (oldest == 0 || t < oldest_ticket)) {
        oldest = w;
        oldest_ticket = t;
      }
    }
    if (oldest == 0) return;  // nothing in progress: nothing to end
    if (cas_relaxed(&words_[oldest], oldest_ticket, 0)) return;
  }
}

int64_t AgeSlots::restart(int64_t ticket, int64_t start) const noexcept {
  if (words_ == nullptr) return 0;
  const int64_t base = ticket_base(start);
  const uint32_t w = slot_of(ticket);
  if (w == 0 && ticket != 0) {  // counted without a slot: stays so
    count_begun();
    return base;
  }
  if (w != 0 && cas_relaxed(&words_[w], ticket, base | w)) {
    count_begun();
    return base | w;
  }
  end_any();
  return begin(start);
}

int64_t AgeSlots::count() const noexcept {
  if (words_ == nullptr) return 0;
  int64_t n = segment::load_relaxed(&words_[0]);
  for (uint32_t w = 1; w <= kAgeSlots; ++w) n += segment::load_relaxed(&words_[w]) != 0;
  return n;
}

int64_t AgeSlots::begun() const noexcept {
  if (words_ == nullptr) return 0;
  int64_t n = 0;
  for (uint32_t l = 0; l < segment::kAgeLanes; ++l)
    n += segment::load_relaxed(&words_[segment::kAgeFirstLane + l]);
  return n;
}

int64_t AgeSlots::oldest_start() const noexcept {
  if (words_ == nullptr) return 0;
  int64_t oldest = 0;
  for (uint32_t w = 1; w <= kAgeSlots; ++w) {
    const int64_t t = segment::load_relaxed(&words_[w]);
    if (t != 0 && (oldest == 0 || t < oldest)) oldest = t;
  }
  return segment::ticket_start(oldest);
}

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

  if (after_fork && base_ != nullptr) {
    // Same records; counters and histograms start at zero in the child (the
    // parent's counts stay in the parent's segment). Gauges keep the values
    // of the objects the child inherited, for the child's own use, but are
    // not exported from the child: the parent still reports them.
    const uint32_t count = inherited_count;
    std::memcpy(base + segment::kRecordsOffset, base_ + segment::kRecordsOffset,
                uint64_t{count} * segment::kRecordBytes);
    for (uint32_t i = 0; i < count; ++i) {
      Record* r = record_of(base, i);
      if (r->kind != static_cast<uint8_t>(SeriesKind::kGauge) &&
          r->kind != static_cast<uint8_t>(SeriesKind::kAges))
        continue;
      const uint32_t lines = segment::value_lines_for(static_cast<SeriesKind>(r->kind), 0, 1, 0);
      if (r->value_line + lines > segment::kValueLines) continue;
      std::memcpy(line_of(base, r->value_line), line_of(base_, r->value_line),
                  uint64_t{lines} * segment::kLineBytes);
      if (r->kind == static_cast<uint8_t>(SeriesKind::kAges)) {
        // Counts of beginnings are counters: the child's start from zero.
        auto* w = reinterpret_cast<int64_t*>(line_of(base, r->value_line));
        std::fill(w + segment::kAgeFirstLane, w + segment::kAgeWords, 0);
      }
      if (r->state == segment::kRecordLive) r->state = segment::kRecordInherited;
    }
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

  // Link it under its final name; EEXIST only if another writer raced us for
  // the same sequence number, so try the next.
  std::string final_path;
  char proc_fd[64];
  {
    char* p = proc_fd;
    const char* prefix = "/proc/self/fd/";
    while (*prefix) *p++ = *prefix++;
    p = detail::format_decimal(p, static_cast<uint64_t>(fd));
    *p = '\0';
  }
  bool linked = false;
  for (int attempt = 0; attempt < 16 && !linked; ++attempt) {
    final_path = dir_ + "/gym-" + std::to_string(pid) + "-" + std::to_string(ticks) + "-" +
                 std::to_string(g_sequence.fetch_add(1)) + ".seg";
    int rc = named_temp
                 ? ::link(temp_path.c_str(), final_path.c_str())
                 : ::linkat(AT_FDCWD, proc_fd, AT_FDCWD, final_path.c_str(), AT_SYMLINK_FOLLOW);
    if (rc == 0) {
      linked = true;
    } else if (errno != EEXIST) {
      break;
    }
  }
  if (named_temp) ::unlink(temp_path.c_str());
  if (!linked) {
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
  hist.native_base_ = r->native_words != 0 ? r->bound_count + 1u : 0;
  hist.sum_index_ = r->bound_count + 1u + r->native_words;
  hist.unit_scale_ = 1.0 / unit_divisor;
  std::fill(std::begin(hist.bounds_), std::end(hist.bounds_), INT64_MAX);
  std::copy(bounds.begin(), bounds.end(), hist.bounds_);
  return hist;
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
