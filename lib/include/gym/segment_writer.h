// SegmentWriter: one process's own segment in the registry directory, and the
// handles (Counter, Gauge, Histogram) that update values in it.
//
// Thread-safety: registration takes a process-local mutex; updates through a
// handle are lock-free relaxed atomics, safe from any thread; no concurrent
// call to any API of these types causes a data race. Updates are also
// async-signal-safe (they are single atomic instructions).
//
// Fork-safety: in a child created by fork(), every SegmentWriter of the parent
// moves to a segment of the child's own (same series, counters and histograms
// starting from zero, gauges keeping the values of the objects the child
// inherited but not exported from the child, since the parent still reports
// them), so handles created before the fork keep working in the child and
// never write into the parent's segment, and nothing is counted twice.
//
// Failure: when the directory is missing, unwritable or full, or the segment
// is full, the writer keeps working; counter and histogram updates become
// no-ops, a gauge keeps its value in process memory, and (when a segment
// exists) the number of series that could not be registered is kept in its
// header. Every page is reserved (fallocate) before it is touched, so a full
// tmpfs is a counted drop, never SIGBUS; if another process truncates the
// segment, the fault is caught (fault_guard.h) and the process goes on
// unmetered. A process left without a segment leaves an empty locked marker
// file that the exporter counts. Nothing here throws to the caller on the
// update path, and no signal reaches it.
//
// Internal (docs/api.md), except SegmentWriter::process(), the default
// writer the API's constructors take.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gym/contract.h"
#include "gym/native_histogram.h"
#include "gym/segment_format.h"
#include "gym/trace_context.h"

namespace gym {

struct Label {
  std::string_view name;
  std::string_view value;
};

class SegmentWriter;

namespace detail {
// Which histogram shard this thread updates, fixed per thread from its first
// observation: the lowest of the first kHistogramShards - 1 that no live
// thread holds (handed back when the thread exits; its holder alone writes
// it), or the last, shared one when all are held. Constant-
// initialized and initial-exec, so reading it is one load (no guard, no
// __tls_get_addr); 0 means not assigned yet.
extern constinit thread_local uint32_t t_shard_plus_one __attribute__((tls_model("initial-exec")));
uint32_t assign_thread_shard() noexcept;
inline uint32_t thread_shard() noexcept {
  const uint32_t s = t_shard_plus_one;
  return __builtin_expect(s != 0, 1) ? s - 1 : assign_thread_shard();
}
// In a forked child: only the calling thread still holds a shard.
void shards_after_fork() noexcept;
// This thread's lane of the ages records' counts of beginnings
// (segment_format.h): 1..kAgeLanes-1 while the thread owns one, 0 (shared)
// when all are taken. Handed back when the thread exits.
extern constinit thread_local uint32_t t_age_lane_plus_one
    __attribute__((tls_model("initial-exec")));
uint32_t assign_age_lane() noexcept;
inline uint32_t age_lane() noexcept {
  const uint32_t l = t_age_lane_plus_one;
  return __builtin_expect(l != 0, 1) ? l - 1 : assign_age_lane();
}
// In a forked child: only the calling thread still owns a lane.
void age_lanes_after_fork() noexcept;
}  // namespace detail

// A monotonic count. Cheap to copy; valid while its SegmentWriter lives.
class Counter {
 public:
  Counter() = default;
  void add(uint64_t n = 1) const noexcept {
    if (value_ != nullptr) segment::add_relaxed(value_, n);
  }
  // Whether updates reach a segment.
  bool registered() const noexcept { return value_ != nullptr; }
  uint64_t value() const noexcept { return value_ ? segment::load_relaxed(value_) : 0; }

 private:
  friend class SegmentWriter;
  explicit Counter(uint64_t* value) : value_(value) {}
  uint64_t* value_ = nullptr;
};

// A value that goes up and down, one slot per instance: the slot is released
// when the Gauge is destroyed, and the reader sums the live slots that share
// family and labels. Move-only; a moved-from Gauge may still be updated, and
// its value is unspecified.
class Gauge {
 public:
  Gauge();
  Gauge(Gauge&& other) noexcept;
  Gauge& operator=(Gauge&& other) noexcept;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;
  ~Gauge();

  void add(int64_t delta) const noexcept { segment::add_relaxed(value_, delta); }
  void set(int64_t v) const noexcept { segment::store_relaxed(value_, v); }
  int64_t value() const noexcept { return segment::load_relaxed(value_); }
  bool registered() const noexcept { return writer_ != nullptr; }
  // The value's own memory (a segment cache line, or process memory when not
  // registered), for primitives whose state is this value (compare-exchange).
  int64_t* raw() const noexcept { return value_; }

 private:
  friend class SegmentWriter;
  void reset() noexcept;
  void take_value(Gauge& other) noexcept;
  SegmentWriter* writer_ = nullptr;
  uint32_t record_ = 0;
  int64_t* value_ = &local_;
  int64_t local_ = 0;  // the value when not registered (no heap block)
};

// The start times of what is in progress now (one instance's waiters or
// holders), for the age of the oldest: an ages record (segment_format.h).
// One record per instance, released when destroyed, like a Gauge; the
// reader adds up the counts of instances with the same family and labels and
// takes the oldest start. Move-only. Unregistered, every call does nothing
// and begin() returns 0.
class AgeSlots {
 public:
  AgeSlots() = default;
  AgeSlots(AgeSlots&& other) noexcept;
  AgeSlots& operator=(AgeSlots&& other) noexcept;
  AgeSlots(const AgeSlots&) = delete;
  AgeSlots& operator=(const AgeSlots&) = delete;
  ~AgeSlots();

  // Starts one at `start` (segment::stamp_now_ns() or a finer time of the
  // same clock): claims a free slot, or counts it without an age when every
  // slot is taken, and counts it as begun in the thread's lane. Returns its
  // ticket, for end() or restart().
  int64_t begin(int64_t start) const noexcept;
  // Ends the one `ticket` started. Ticket 0, or a ticket whose slot an
  // earlier end_any() took, ends another in progress instead (one without a
  // slot first, else the oldest): the count stays right. Returns the start
  // of the one ended (`ticket`'s own when it names one; 0: unknown, one
  // without a slot ended for ticket 0, or none registered).
  int64_t end(int64_t ticket) const noexcept;
  // Gives `ticket`'s slot to one that starts at `start` (a slot handed from
  // one holder to the next) with no instant in which the count differs; the
  // new one is counted as begun. Returns the new ticket.
  int64_t restart(int64_t ticket, int64_t start) const noexcept;
  // In progress now, ever begun (restarts included), and the oldest start
  // (0 when none has a slot).
  int64_t count() const noexcept;
  int64_t begun() const noexcept;
  int64_t oldest_start() const noexcept;
  bool registered() const noexcept { return words_ != nullptr; }

 private:
  friend class SegmentWriter;
  int64_t end_any() const noexcept;       // the start of the one ended, 0: unknown
  uint32_t count_begun() const noexcept;  // returns the thread's lane
  SegmentWriter* writer_ = nullptr;
  uint32_t record_ = 0;
  int64_t* words_ = nullptr;
};

// Counts observations into fixed buckets and, when registered with native
// buckets, into the native schema's (gym/native_histogram.h) too. Values are
// raw integers (for durations: nanoseconds); the exposition divides by the
// unit divisor given at registration. Cheap to copy; valid while its
// SegmentWriter lives.
class Histogram {
 public:
  Histogram() = default;
  void observe(int64_t v) const noexcept {
    if (buckets_ == nullptr) return;
    add(bucket_of(v), v);
  }
  // The same, and, with a valid `trace`, `v` becomes its bucket's exemplar
  // (the latest: it replaces the one before). The first exemplar of a
  // histogram reserves its slots (under the writer's lock, once); one that
  // meets another thread's write of the same bucket is left out (never
  // waits); none is kept when the segment has no room.
  void observe(int64_t v, const TraceContext& trace) const noexcept {
    if (buckets_ == nullptr) return;
    const uint32_t i = bucket_of(v);
    add(i, v);
    if (trace.valid()) keep_exemplar(i, v, trace);
  }
  bool registered() const noexcept { return buckets_ != nullptr; }

 private:
  friend class SegmentWriter;
  // Branchless binary search: the bucket is the number of bounds below v.
  // bounds_ holds at most 15 bounds padded with INT64_MAX to 16 slots.
  uint32_t bucket_of(int64_t v) const noexcept {
    uint32_t i = 0;
    i += bounds_[i + 7] < v ? 8 : 0;
    i += bounds_[i + 3] < v ? 4 : 0;
    i += bounds_[i + 1] < v ? 2 : 0;
    i += bounds_[i] < v ? 1 : 0;
    return i;
  }
  // The slot's words, between an odd and the next even seq (the seqlock in
  // segment_format.h). A slot another thread is writing is left alone.
  void keep_exemplar(uint32_t bucket, int64_t v, const TraceContext& trace) const noexcept {
    uint32_t line = segment::load_acquire(exemplar_line_);
    if (__builtin_expect(line == 0, 0)) line = reserve_exemplars();
    if (line == 0 || line == segment::kNoExemplarLine) return;
    auto* slot = reinterpret_cast<segment::ExemplarSlot*>(values_ + uint64_t{line + bucket} *
                                                                        segment::kLineBytes);
    uint64_t seq = segment::load_relaxed(&slot->seq);
    if ((seq & 1) != 0 || !__atomic_compare_exchange_n(&slot->seq, &seq, seq + 1, false,
                                                       __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
      return;
    // Released words (no fence: ThreadSanitizer has none): a reader that
    // loads one of them (acquire) sees the odd seq stored before it.
    uint64_t ids[3];
    __builtin_memcpy(ids, trace.trace_id.data(), 16);
    __builtin_memcpy(ids + 2, trace.span_id.data(), 8);
    timespec now{};
    clock_gettime(CLOCK_REALTIME_COARSE, &now);
    segment::store_release(&slot->value, v);
    segment::store_release(&slot->trace_id[0], ids[0]);
    segment::store_release(&slot->trace_id[1], ids[1]);
    segment::store_release(&slot->span_id, ids[2]);
    segment::store_release(&slot->unix_ns, int64_t{now.tv_sec} * 1000000000 + now.tv_nsec);
    segment::store_release(&slot->seq, seq + 2);
  }
  // The first line of its exemplar slots, reserved now (once, under the
  // writer's lock); kNoExemplarLine when there is no room.
  uint32_t reserve_exemplars() const noexcept;
  void add(uint32_t i, int64_t v) const noexcept {
    const uint32_t s = detail::thread_shard() & shard_mask_;
    uint64_t* shard = buckets_ + s * shard_words_;
    auto* sum = reinterpret_cast<int64_t*>(shard + sum_index_);
    const bool own = __builtin_expect(s != shard_mask_, 1);  // this thread's own shard
    if (native_ != nullptr) {
      // The sum first; then one add counts the value in its native and its
      // classic bucket (the joint array, every shard's): no reader sees one
      // without the other; then the shard's count of them (released: a
      // reader that finds the counts as it last read them skips the array).
      // An own shard then publishes its sum and count as of this completed
      // observation: the reader of a writer killed in the middle of one
      // finds it by them and takes its value out of the sum when its bucket
      // was never counted (segment_format.h, version 8).
      const uint32_t w = native::word_of(double(v) * unit_scale_);
      if (own) {
        const int64_t total = segment::load_relaxed(sum) + v;
        segment::store_relaxed(sum, total);
        segment::add_relaxed(&native_[segment::joint_word(w, i)], uint64_t{1});
        const uint64_t count = segment::load_relaxed(shard + 1) + 1;
        segment::store_release(shard + 1, count);
        segment::store_relaxed(reinterpret_cast<int64_t*>(shard + 2), total);
        segment::store_relaxed(shard + 3, count);
      } else {
        segment::add_relaxed(sum, v);
        segment::add_relaxed(&native_[segment::joint_word(w, i)], uint64_t{1});
        segment::add_release(shard + 1, uint64_t{1});
      }
      return;
    }
    if (own) {
      segment::add_owned(&shard[i], uint64_t{1});
    } else {
      segment::add_relaxed(&shard[i], uint64_t{1});
    }
    if (own)
      segment::add_owned(sum, v);
    else
      segment::add_relaxed(sum, v);
  }
  uint64_t* buckets_ = nullptr;  // shard 0
  uint32_t shard_mask_ = 0;
  uint32_t shard_words_ = 0;    // uint64 words from one shard to the next
  uint32_t sum_index_ = 0;      // the sum's word within a shard
  uint64_t* native_ = nullptr;  // the joint array, every shard's; null: no native buckets
  double unit_scale_ = 1.0;     // 1 / the unit divisor: a raw value in the exposed unit
  int64_t bounds_[segment::kBoundSlots] = {};
  SegmentWriter* writer_ = nullptr;    // for the exemplar slots' reservation
  uint32_t record_ = 0;                // its record's index
  uint32_t* exemplar_line_ = nullptr;  // its record's exemplar_line
  unsigned char* values_ = nullptr;    // the segment's value area
};

// A histogram registered at its first observation, by `make` (once, on
// whichever thread observes first): an outcome that never happens takes no
// space in the segment and no series. After that, one acquire load.
class LazyHistogram {
 public:
  template <class Make>
  const Histogram& get(Make&& make) const {
    if (!ready_.load(std::memory_order_acquire))
      std::call_once(once_, [&] {
        histogram_ = make();
        ready_.store(true, std::memory_order_release);
      });
    return histogram_;
  }

 private:
  mutable std::once_flag once_;
  mutable std::atomic<bool> ready_{false};
  mutable Histogram histogram_;
};

class SegmentWriter {
 public:
  // Default registry directory (contract.h), and the environment variable
  // that overrides it.
  static constexpr const char* kDefaultDir = kDefaultRegistryDir;
  static constexpr const char* kDirEnv = "GYM_METRICS_DIR";

  // A writer for `dir`; its segment is created on first registration.
  explicit SegmentWriter(std::string dir);
  // Unmaps the segment and drops its lock: the exporter then folds its
  // counters and removes it. Handles must not outlive their writer.
  ~SegmentWriter();
  SegmentWriter(const SegmentWriter&) = delete;
  SegmentWriter& operator=(const SegmentWriter&) = delete;

  // The process's writer, for $GYM_METRICS_DIR or kDefaultDir. Never destroyed.
  static SegmentWriter& process();

  // Get-or-create by family and labels (label order does not matter). A
  // counter of a unit counts raw integers (nanoseconds for seconds) and
  // `unit_divisor` turns them into its unit, as a histogram's.
  Counter counter(std::string_view family, std::span<const Label> labels,
                  double unit_divisor = 1.0);
  // With `native`, it also counts native buckets (of values in the exposed
  // unit, seconds for durations). A family is native or not in every series.
  Histogram histogram(std::string_view family, std::span<const Label> labels,
                      std::span<const int64_t> bounds, double unit_divisor, bool native = false);
  // A new slot for one instance.
  Gauge gauge(std::string_view family, std::span<const Label> labels);
  // A new ages record for one instance.
  AgeSlots ages(std::string_view family, std::span<const Label> labels);

  const std::string& dir() const { return dir_; }
  // The segment file's path, empty when there is no segment.
  std::string path() const;
  bool has_segment() const;
  // Registrations that could not be made, by this writer in this process.
  uint64_t dropped_series() const;
  // Why the segment could not be created, empty if it could (or was not tried).
  std::string error() const;
  // Whether this process runs unmetered and says so with a marker file.
  bool unmetered() const;

  // At the process's exit (an atexit hook, registered with the first
  // segment): every writer lets its segment go (its lock dropped, its
  // marker removed) and the exited segments of its directory, its own
  // included, are folded into the totals and removed when no exporter runs.
  // What other threads count after that, while the process exits, is not
  // kept. Not for direct use.
  static void release_at_exit() noexcept;

 private:
  friend class Gauge;
  friend class AgeSlots;
  friend class Histogram;
  // The first line of record `index`'s exemplar slots, reserved now if it
  // has none (kNoExemplarLine when there is no room).
  uint32_t reserve_exemplars(uint32_t index) noexcept;
  bool ensure_segment_locked();
  bool create_segment_locked(bool after_fork);
  const char* prepare_file_locked(int fd, bool after_fork, uint32_t& inherited);
  bool take_mapping_locked(int fd, unsigned char* base, bool after_fork,
                           const std::string& final_path);
  int32_t find_or_add_record_locked(segment::SeriesKind kind, std::string_view family,
                                    std::span<const Label> labels, std::span<const int64_t> bounds,
                                    double unit_divisor, bool reuse_released,
                                    uint16_t native_words = 0);
  int32_t find_record_locked(const std::string& key, bool reuse_released);
  int32_t append_record_locked(segment::SeriesKind kind, const std::string& text,
                               size_t label_count, std::span<const int64_t> bounds,
                               double unit_divisor, uint16_t native_words);
  uint32_t bounds_offset_locked(std::span<const int64_t> bounds, uint32_t& strings_end) const;
  void write_text_locked(uint32_t text_offset, uint32_t bounds_offset,
                         std::span<const int64_t> bounds, const std::string& text);
  void count_drop_locked();
  int64_t* slot_words_locked(segment::SeriesKind kind, std::string_view family,
                             std::span<const Label> labels, uint32_t& index);
  bool reserve_locked(int fd, uint32_t records, uint32_t strings, uint32_t lines);
  void mark_unmetered_locked() noexcept;
  void drop_marker() noexcept;
  void release_gauge(uint32_t record) noexcept;
  void renew_after_fork() noexcept;
  static void prepare_fork() noexcept;
  static void after_fork_parent() noexcept;
  static void after_fork_child() noexcept;

  std::string dir_;
  mutable std::mutex mu_;
  int fd_ = -1;
  unsigned char* base_ = nullptr;  // mapping of segment::kTotalBytes
  uint32_t next_line_ = 0;         // first free value line
  uint32_t next_string_ = 0;       // first free byte of the string area
  // Records published when the process last forked (taken under mu_ in
  // prepare_fork): what a child inherits. Not the shared header's count,
  // which the parent raises again as soon as the fork returns.
  uint32_t records_at_fork_ = 0;
  uint64_t reserved_records_end_ = 0;  // file offsets reserved up to
  uint64_t reserved_strings_end_ = 0;
  uint64_t reserved_values_end_ = 0;
  // Each distinct set of histogram bounds in the string area: its offset
  // and its count (a segment keeps each once).
  std::vector<std::pair<uint32_t, uint32_t>> bounds_sets_;
  int marker_fd_ = -1;  // the unmetered marker, when there is one
  std::string marker_path_;
  uint64_t local_dropped_ = 0;
  bool tried_ = false;
  bool detached_ = false;  // a child whose own segment could not be made
  std::string error_;
  std::string path_;
  // Counters and histograms: key -> record. Gauges: key -> released records.
  std::unordered_map<std::string, uint32_t> series_;
  std::unordered_map<std::string, std::vector<uint32_t>> released_gauges_;
  std::vector<std::string> gauge_keys_;  // record -> key, for gauges
};

}  // namespace gym
