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
#include "gym/registry_reader.h"
#include "writer/layout.h"

namespace gym {

using namespace writer_internal;
using segment::Header;
using segment::RecordHead;
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
std::once_flag g_atfork_once;

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

namespace {
// A series' canonical text (its family, then its labels sorted by name, each
// NUL-terminated) into `text`; false when its name, labels or bounds are
// not a series'.
bool canonical_text(std::string_view family, std::span<const Label> labels,
                    std::span<const int64_t> bounds, double unit_divisor, std::string& text) {
  if (!detail::valid_metric_name(family) || labels.size() > segment::kMaxLabels ||
      bounds.size() > segment::kMaxBounds || !(unit_divisor > 0))
    return false;
  for (size_t i = 1; i < bounds.size(); ++i)
    if (bounds[i] <= bounds[i - 1]) return false;
  std::vector<Label> sorted(labels.begin(), labels.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const Label& a, const Label& b) { return a.name < b.name; });
  text.append(family).push_back('\0');
  for (size_t i = 0; i < sorted.size(); ++i) {
    const Label& l = sorted[i];
    bool duplicate = i > 0 && sorted[i - 1].name == l.name;
    if (duplicate || !detail::valid_label_name(l.name) ||
        l.value.size() > segment::kMaxValueBytes || l.value.find('\0') != std::string_view::npos ||
        !detail::valid_utf8(l.value))
      return false;
    text.append(l.name).push_back('\0');
    text.append(l.value).push_back('\0');
  }
  return text.size() <= segment::kTextBytes;
}

// What makes two registrations one series: kind, text, buckets, divisor.
std::string series_key(SeriesKind kind, const std::string& text, std::span<const int64_t> bounds,
                       double unit_divisor, uint16_t native_words) {
  std::string key;
  key.push_back(static_cast<char>(kind));
  key.append(text);
  key.append(reinterpret_cast<const char*>(bounds.data()), bounds.size_bytes());
  key.append(reinterpret_cast<const char*>(&unit_divisor), sizeof unit_divisor);
  key.append(reinterpret_cast<const char*>(&native_words), sizeof native_words);
  return key;
}
}  // namespace

// The record of a series already registered, or (gauges) a released one of
// the same series made live again with zeroed values; -1 when none.
int32_t SegmentWriter::find_record_locked(const std::string& key, bool reuse_released) {
  if (!reuse_released) {
    auto it = series_.find(key);
    return it != series_.end() ? static_cast<int32_t>(it->second) : -1;
  }
  auto it = released_gauges_.find(key);
  if (it == released_gauges_.end() || it->second.empty()) return -1;
  uint32_t index = it->second.back();
  it->second.pop_back();
  zero_values(record_of(base_, index), base_);
  segment::store_release(&record_of(base_, index)->state, segment::kRecordLive);
  return static_cast<int32_t>(index);
}

namespace {
constexpr uint32_t round_up(uint32_t n, uint32_t to) {
  return (n + to - 1) / to * to;
}
}  // namespace

// Where a histogram's bounds are in the string area: a set the segment has
// already, or a new one placed at `strings_end` (which moves past it). 0
// without bounds.
uint32_t SegmentWriter::bounds_offset_locked(std::span<const int64_t> bounds,
                                             uint32_t& strings_end) const {
  if (bounds.empty()) return 0;
  for (const auto& [offset, count] : bounds_sets_)
    if (count == bounds.size() &&
        std::memcmp(string_at(base_, offset), bounds.data(), bounds.size_bytes()) == 0)
      return offset;
  const uint32_t offset = round_up(strings_end, 8);
  strings_end = offset + static_cast<uint32_t>(bounds.size_bytes());
  return offset;
}

// A record's text entry (and its bounds when they are new) into reserved
// pages of the string area.
void SegmentWriter::write_text_locked(uint32_t text_offset, uint32_t bounds_offset,
                                      std::span<const int64_t> bounds, const std::string& text) {
  if (!bounds.empty() && bounds_offset >= next_string_) {
    std::memcpy(string_at(base_, bounds_offset), bounds.data(), bounds.size_bytes());
    bounds_sets_.emplace_back(bounds_offset, static_cast<uint32_t>(bounds.size()));
  }
  const segment::TextEntry entry{static_cast<uint32_t>(text.size()), bounds_offset};
  std::memcpy(string_at(base_, text_offset), &entry, sizeof entry);
  std::memcpy(string_at(base_, text_offset + sizeof entry), text.data(), text.size());
}

// A new record published at the end of the segment, its text entry at the
// end of the string area and its value lines after the last ones; -1
// (counted as dropped) when the segment has no room.
int32_t SegmentWriter::append_record_locked(SeriesKind kind, const std::string& text,
                                            size_t label_count, std::span<const int64_t> bounds,
                                            double unit_divisor, uint16_t native_words) {
  Header* h = header_of(base_);
  const uint32_t index = segment::load_relaxed(&h->record_count);
  const uint32_t shards = kind == SeriesKind::kHistogram ? segment::kHistogramShards : 1;
  const uint32_t lines =
      segment::value_lines_for(kind, static_cast<uint32_t>(bounds.size()), shards, native_words);
  uint32_t strings_end = next_string_;
  const uint32_t bounds_offset = bounds_offset_locked(bounds, strings_end);
  const uint32_t text_offset = round_up(strings_end, 4);
  strings_end = text_offset + sizeof(segment::TextEntry) + static_cast<uint32_t>(text.size());
  if (index >= segment::kMaxRecords || next_line_ + lines > segment::kValueLines ||
      strings_end > segment::kStringBytes ||
      !reserve_locked(fd_, index + 1, strings_end, next_line_ + lines)) {
    count_drop_locked();
    return -1;
  }
  write_text_locked(text_offset, bounds_offset, bounds, text);
  RecordHead* r = record_of(base_, index);
  r->kind = static_cast<uint8_t>(kind);
  r->label_count = static_cast<uint8_t>(label_count);
  r->bound_count = static_cast<uint8_t>(bounds.size());
  r->shards = static_cast<uint8_t>(shards);
  r->value_line = next_line_;
  r->text_bytes = static_cast<uint16_t>(text.size());
  r->native_words = native_words;
  r->unit_divisor = unit_divisor;
  r->text_offset = text_offset;
  segment::store_release(&r->state, segment::kRecordLive);
  segment::store_release(&h->record_count, index + 1);
  next_line_ += lines;
  next_string_ = strings_end;
  return static_cast<int32_t>(index);
}

int32_t SegmentWriter::find_or_add_record_locked(SeriesKind kind, std::string_view family,
                                                 std::span<const Label> labels,
                                                 std::span<const int64_t> bounds,
                                                 double unit_divisor, bool reuse_released,
                                                 uint16_t native_words) {
  std::string text;
  if (!canonical_text(family, labels, bounds, unit_divisor, text)) {
    ensure_segment_locked();
    count_drop_locked();
    return -1;
  }
  std::string key = series_key(kind, text, bounds, unit_divisor, native_words);
  if (const int32_t found = find_record_locked(key, reuse_released); found >= 0) return found;
  if (!ensure_segment_locked()) {
    count_drop_locked();
    return -1;
  }
  const int32_t index =
      append_record_locked(kind, text, labels.size(), bounds, unit_divisor, native_words);
  if (index < 0) return -1;
  if (reuse_released) {
    if (gauge_keys_.size() <= size_t(index)) gauge_keys_.resize(size_t(index) + 1);
    gauge_keys_[size_t(index)] = std::move(key);
  } else {
    series_.emplace(std::move(key), uint32_t(index));
  }
  return index;
}

Counter SegmentWriter::counter(std::string_view family, std::span<const Label> labels,
                               double unit_divisor) {
  std::lock_guard<std::mutex> lock(mu_);
  int32_t index =
      find_or_add_record_locked(SeriesKind::kCounter, family, labels, {}, unit_divisor, false);
  if (index < 0) return Counter();
  RecordHead* r = record_of(base_, static_cast<uint32_t>(index));
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
  RecordHead* r = record_of(base_, static_cast<uint32_t>(index));
  hist.buckets_ = reinterpret_cast<uint64_t*>(line_of(base_, r->value_line));
  hist.shard_mask_ = r->shards - 1;
  hist.shard_words_ =
      segment::shard_lines(r->bound_count, r->native_words) * segment::kLineBytes / 8;
  hist.sum_index_ = r->native_words != 0 ? 0u : r->bound_count + 1u;  // segment_format.h
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
  RecordHead* r = record_of(base_, index);
  uint32_t line = segment::load_relaxed(&r->exemplar_line);
  if (line != 0) return line;  // another thread's, meanwhile
  const uint32_t lines = r->bound_count + 1u;
  const uint32_t records = segment::load_relaxed(&header_of(base_)->record_count);
  if (detached_ || fd_ < 0 || next_line_ + lines > segment::kValueLines ||
      !reserve_locked(fd_, records, next_string_, next_line_ + lines)) {
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

// The first value word of a gauge's or an ages record's series (a released
// record of the same series reused, its values zeroed), its record in
// `index`; null when it cannot be had.
int64_t* SegmentWriter::slot_words_locked(SeriesKind kind, std::string_view family,
                                          std::span<const Label> labels, uint32_t& index) {
  const int32_t found = find_or_add_record_locked(kind, family, labels, {}, 1.0, true);
  if (found < 0) return nullptr;
  index = static_cast<uint32_t>(found);
  return reinterpret_cast<int64_t*>(line_of(base_, record_of(base_, index)->value_line));
}

Gauge SegmentWriter::gauge(std::string_view family, std::span<const Label> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Gauge gauge;  // unregistered, its value is its own
  if (int64_t* words = slot_words_locked(SeriesKind::kGauge, family, labels, gauge.record_)) {
    gauge.value_ = words;
    gauge.writer_ = this;
  }
  return gauge;
}

AgeSlots SegmentWriter::ages(std::string_view family, std::span<const Label> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  AgeSlots ages;
  ages.words_ = slot_words_locked(SeriesKind::kAges, family, labels, ages.record_);
  if (ages.words_ != nullptr) ages.writer_ = this;
  return ages;
}

// Releases a gauge's or an ages record's slot (its values zeroed first).
void SegmentWriter::release_gauge(uint32_t index) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (base_ == nullptr || index >= gauge_keys_.size()) return;
  RecordHead* r = record_of(base_, index);
  zero_values(r, base_);
  segment::store_release(&r->state, segment::kRecordReleased);
  try {
    released_gauges_[gauge_keys_[index]].push_back(index);
  } catch (...) {
    // Out of memory: the slot stays released and is simply not reused.
  }
}

// ---------------------------------------------------------------- fork and exit

void SegmentWriter::prepare_fork() noexcept {
  writers_mutex().lock();
  for (SegmentWriter* w : writers()) {
    w->mu_.lock();
    w->records_at_fork_ =
        w->base_ != nullptr ? segment::load_acquire(&header_of(w->base_)->record_count) : 0;
  }
}

void SegmentWriter::after_fork_parent() noexcept {
  for (SegmentWriter* w : writers()) w->mu_.unlock();
  writers_mutex().unlock();
}

void SegmentWriter::release_at_exit() noexcept {
  std::vector<std::string> dirs;
  // Held through the folds too: a fork meanwhile (prepare_fork takes it
  // first) would give the child the descriptor that holds the lock.
  std::unique_lock<std::mutex> all(writers_mutex(), std::try_to_lock);
  if (!all.owns_lock()) return;
  try {
    // Never wait at exit: a writer whose mutex is held keeps its segment,
    // for the next writer or the exporter to fold once the process is gone.
    for (SegmentWriter* w : writers()) {
      std::unique_lock<std::mutex> lock(w->mu_, std::try_to_lock);
      if (!lock.owns_lock()) continue;
      w->drop_marker();
      if (w->fd_ < 0 || w->base_ == nullptr || w->detached_) continue;
      // The mapping holds the file, and with it the owner lock: it is
      // replaced by private pages (threads still writing write there, and
      // never fault), then the file is closed: exited, as far as a reader
      // can tell.
      if (::mmap(w->base_, segment::kTotalBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
        continue;
      w->detached_ = true;
      ::close(w->fd_);
      w->fd_ = -1;
      if (std::find(dirs.begin(), dirs.end(), w->dir_) == dirs.end()) dirs.push_back(w->dir_);
    }
  } catch (...) {
    return;  // out of memory: they are folded once the process is gone
  }
  // Processes exiting together take turns: each waits a little for another
  // folding writer, so that the last one folds them all.
  for (const std::string& dir : dirs) {
    try {
      RegistryReader::fold_exited(dir, std::chrono::milliseconds(200));
    } catch (...) {
    }
  }
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
