// RegistryReader: the only code that parses segments (see segment_format.h).
// Takes snapshots of every segment in a registry directory, sums series with
// the same family and labels across live segments, and retires the segments
// of owners that are gone: their counters and histograms are folded into
// totals (so they never go down), their gauges are dropped, and their files
// are removed.
//
// One retiring reader per directory, enforced by an OFD lock on
// `<dir>/.exporter.lock`: the reader that holds it (claim()) retires segments
// and keeps the folded totals in `<dir>/.exporter-totals`, written crash-safely
// (a new file renamed over the old) before any folded segment is removed, so
// that totals survive a restart or SIGKILL of the exporter. A reader without
// the lock reads only: it removes nothing, reads a dead owner's segment once
// into totals of its own (skipping the file while it stays), and adds the
// holder's totals file to what it sees.
//
// Trust: nothing in the directory can make the reader crash, hang or report a
// falling counter. Metadata is copied out with pread and validated once;
// values are read with aligned atomic loads under a SIGBUS guard
// (fault_guard.h), so a segment truncated or emptied under the reader is
// counted as damaged (its last values are folded) instead of faulting. A live
// counter or histogram that goes down is taken as a reset of its segment: the
// values seen before are folded in. Sums saturate instead of wrapping.
//
// Bounded state: a series with no live writer that has not changed for
// `retired_series_ttl` is forgotten; at most `max_series` series are tracked,
// further ones are skipped and counted.
//
// Thread-safety: none; one thread takes snapshots (the exporter serializes
// scrapes). A snapshot never blocks or waits for a writer.
//
// Internal (docs/api.md): the registry's one reader, installed for the
// exporter; no compatibility promise.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gym/native_histogram.h"
#include "gym/segment_format.h"
#include "gym/series_labels.h"
#include "gym/trace_context.h"

namespace gym {

// What a series is: immutable once the reader has seen it.
struct SeriesInfo {
  segment::SeriesKind kind;
  // The family's name, kept once by the reader for all of its series
  // (valid for the reader's life).
  std::string_view family;
  SeriesLabels labels;          // sorted by name
  std::vector<int64_t> bounds;  // raw, histograms only
  double unit_divisor = 1.0;    // exposed value = raw / unit_divisor
  // Histograms that also count native buckets: native::kWords; else 0.
  uint16_t native_words = 0;
};

// A histogram bucket's exemplar: the latest observation with a trace
// context (gym/trace_context.h) of any process that wrote the series, by the
// time it was observed; kept after its writer exits, until the series expires.
struct Exemplar {
  int64_t value = 0;    // raw units, as the histogram's sum
  int64_t unix_ns = 0;  // when it was observed; 0: the bucket has none
  TraceContext trace;
};

struct SeriesSample {
  const SeriesInfo* info = nullptr;
  // The reader's number for the series' family, the same for every series
  // of one family for the reader's life: where a family's run of series
  // begins, compared without comparing names.
  uint32_t family = 0;
  // Ages: a live record (a limit or operation that still exists) reported
  // what is in progress. Without one only the count of beginnings (folded
  // from records that are gone) remains, and there is no age to report.
  // (Beside `family`: they share a word.)
  bool in_progress = false;
  uint64_t counter = 0;  // counters
  int64_t gauge = 0;     // gauges; ages: how many are in progress
  // Ages: the oldest start in progress (segment::stamp_now_ns() clock), 0
  // when none has a slot.
  int64_t oldest_start = 0;
  // Histograms: cumulative counts per bound, then +Inf (which is the count).
  std::vector<uint64_t> cumulative_buckets;
  int64_t sum = 0;  // histograms, raw units
  // Native histograms: native::kWords counts (the zero bucket, then one per
  // key; not cumulative); empty for the others. It views the reader's own
  // counts (no copy of them per snapshot): valid until the next snapshot(),
  // like the sample itself.
  std::span<const uint64_t> native;
  // Histograms with an exemplar in any bucket: one per classic bucket (the
  // last is +Inf's), unix_ns 0 where a bucket has none; empty otherwise.
  // Views the reader's own: valid until the next snapshot().
  std::span<const Exemplar> exemplars;
  // Counters, histograms and ages' beginnings: since when the value counts
  // (Unix ns): the earliest start of the writers and folded totals it adds
  // up; 0 when one of them has no known start (totals of an older exporter).
  int64_t created_unix_ns = 0;
  uint64_t count() const { return cumulative_buckets.empty() ? 0 : cumulative_buckets.back(); }
};

struct RegistryStats {
  uint64_t live_segments = 0;  // live writer segments in this snapshot
  // Live segments by format version (index = version; 0 unused).
  std::array<uint64_t, segment::kFormatVersion + 1> live_segments_by_version{};
  uint64_t retired_segments_total = 0;  // owners gone, folded in and removed
  uint64_t rejected_files_total = 0;    // files that were not valid segments
  uint64_t dropped_series_total = 0;    // registrations writers could not make
  uint64_t invalid_records_total = 0;   // records with bad metadata, skipped
  uint64_t read_errors_total = 0;       // files that could not be opened or read
  // Live segments whose pages went away under the reader (truncated, or a
  // fault while reading): last values folded in, not read again.
  uint64_t damaged_segments_total = 0;
  // Live writer processes whose numbers cannot be read now: those that run
  // without a segment (their marker files) and those whose segment is damaged.
  uint64_t unmetered_writers = 0;
  uint64_t counter_resets_total = 0;     // live counters or histograms that went down
  uint64_t expired_series_total = 0;     // series forgotten after retired_series_ttl
  uint64_t series_over_limit_total = 0;  // series not tracked: max_series reached
  uint64_t series = 0;                   // series the reader tracks now
  uint64_t registry_bytes = 0;           // memory the directory's files take (blocks)
  uint64_t totals_write_errors_total = 0;
  // Histogram reads whose buckets never added up to their count while a
  // writer observed: the last values were kept instead.
  uint64_t inconsistent_reads_total = 0;
  bool retiring = false;  // this reader holds the directory's lock
};

// A live process that declared its server identity (gym/server_identity.h).
struct DeclaredServer {
  std::string name;
  std::string server_type;
  pid_t pid = 0;
  uint64_t start_ticks = 0;  // the owner's start time (/proc/<pid>/stat field 22)
  // The owner's pid namespace (segment Header::owner_pid_ns; 0: not
  // recorded). `pid` is its pid there.
  uint64_t pid_ns = 0;
};

// One live writer process seen in the registry.
struct WriterInfo {
  pid_t pid = 0;
  uint64_t start_ticks = 0;  // the owner's start time (/proc/<pid>/stat field 22)
  uint32_t format_version = 0;
  bool unmetered = false;  // its segment is damaged: its numbers cannot be read
  uint64_t pid_ns = 0;     // as DeclaredServer::pid_ns
};

// A limit's free and held slots from its series, summed over writers or not:
// since format 3 a writer keeps the limit itself in gym_concurrency_available
// and counts its holds in the holds' ages record
// (gym_concurrency_oldest_hold_seconds), so free = available - holds and
// active = limit - free. Wrapping, as the words are.
struct LimitSlots {
  int64_t free = 0;
  int64_t active = 0;
};
inline LimitSlots limit_slots(int64_t limit, int64_t available, int64_t holds) {
  const int64_t free = segment::wrapping_sub(available, holds);
  return {free, segment::wrapping_sub(limit, free)};
}

// A concurrency limit as one row, its series joined once (by the reader, by
// their labels) from one snapshot: what /metrics, the API and gym-stat all
// read of it. A limit that several processes open with the same labels
// (uvicorn --workers, a forked child's own semaphore) is one series summed
// over them; summed, a free slot in one process and a queue in another look
// like a broken semaphore. `stranded_slots` are the free slots of processes
// with no caller queued while another process of the limit has callers
// queued (0 otherwise): work the load balancer sent to the wrong process,
// not a limit too small.
struct LimitRow {
  static constexpr size_t kNone = SIZE_MAX;
  // Indexes in Snapshot::series of its parts, which share the limit's labels
  // (kNone: that part has no series): its gym_concurrency_limit (kNone once
  // every writer of the limit is gone and only its counters remain, when
  // the values below are zero), and the others.
  size_t series = kNone;
  size_t available = kNone;    // gym_concurrency_available
  size_t queue_depth = kNone;  // gym_concurrency_queue_depth
  size_t holds = kNone;        // gym_concurrency_oldest_hold_seconds (the holds' ages)
  size_t timeouts = kNone;     // gym_concurrency_admission_timeouts_total
  size_t cancelled = kNone;    // gym_concurrency_admission_cancelled_total
  // Its values (limit_slots: free = available - holds, active = limit -
  // free; with no free slots known, all are held).
  int64_t limit = 0, free = 0, active = 0, queued = 0, holds_now = 0;
  double oldest_hold_seconds = 0;  // 0 when nothing is held
  uint32_t processes = 0;          // live processes holding the limit
  int64_t stranded_slots = 0;
  // Whether it is a limit now (it has its gym_concurrency_limit series).
  bool present() const { return series != kNone; }
  // One of its parts' series, for its labels.
  size_t any() const {
    for (size_t i : {series, available, queue_depth, holds, timeouts, cancelled})
      if (i != kNone) return i;
    return kNone;
  }
};

struct Snapshot {
  // CLOCK_MONOTONIC (the ages' clock) when the snapshot began: before any
  // value was read, so that an age never exceeds how long its caller has
  // really been in progress (beyond one tick of the stamps' clock).
  int64_t monotonic_ns = 0;
  // Sorted by family, then labels; a family's series are adjacent.
  std::vector<SeriesSample> series;
  RegistryStats stats;
  // Why files or records were skipped in this snapshot (each file or record
  // once), for the caller to log.
  std::vector<std::string> problems;
  // Empty, or why the directory itself could not be listed.
  std::string directory_error;
  // Live processes with a declared identity (one entry per process).
  std::vector<DeclaredServer> servers;
  // Live writer processes with a segment, by segment name.
  std::vector<WriterInfo> writers;
  // The limits: those with a gym_concurrency_limit series (limits now), in
  // series order, then those whose writers are gone with their admissions
  // (a holds' series) left, in series order.
  std::vector<LimitRow> limits;
  // Changes whenever a series is added or forgotten: a SeriesInfo pointer
  // kept from a snapshot with another epoch may have been freed (and its
  // address reused).
  uint64_t series_epoch = 0;
  // When the reader was made (Unix ns): its counts in `stats` start there.
  int64_t reader_started_unix_ns = 0;
};

struct ReaderOptions {
  // Segments owned by a user outside `trusted_uids` are skipped and counted
  // (as rejected files). Empty: the owner of the directory and this
  // process's effective user.
  std::vector<uid_t> trusted_uids;
  // kRetire: claim the directory's lock at the first snapshot that finds the
  // directory (read only, with a problem reported once, while another
  // process holds it). kReadOnly: never claim, never change the directory.
  // kFold: what fold_exited() does (a writer's own use): each snapshot, when
  // the lock is free, folds exited writers' segments into the totals and
  // removes them and dead markers, then lets the lock go; it reads no live
  // segment's values and its Snapshot holds only stats.
  enum class Mode { kRetire, kReadOnly, kFold } mode = Mode::kRetire;
  std::chrono::milliseconds retired_series_ttl = std::chrono::hours(1);
  size_t max_series = 100000;
};

// The age in seconds of the oldest in progress of an ages series (0 when
// none has a start), as of the snapshot.
inline double age_seconds(const Snapshot& snap, const SeriesSample& s) {
  if (s.oldest_start <= 0 || snap.monotonic_ns <= s.oldest_start) return 0.0;
  return double(snap.monotonic_ns - s.oldest_start) / 1e9;
}

namespace reader_internal {
class ReaderCore;
}

class RegistryReader {
 public:
  static constexpr const char* kLockFile = ".exporter.lock";
  static constexpr const char* kTotalsFile = ".exporter-totals";

  explicit RegistryReader(std::string dir, ReaderOptions options = {});
  ~RegistryReader();
  RegistryReader(const RegistryReader&) = delete;
  RegistryReader& operator=(const RegistryReader&) = delete;

  // Takes the directory's lock now. False, with `why` naming the holder's
  // pid, when another process holds it; true when the directory does not
  // exist yet (the lock is then taken by the first snapshot that finds it).
  // A writer folding exited segments (fold_exited) holds it for
  // milliseconds: claim waits up to `patience` for such a holder to let go.
  bool claim(std::string* why,
             std::chrono::milliseconds patience = std::chrono::milliseconds(2000));
  bool retiring() const;

  // Reads every segment now. The reference stays valid until the next call.
  const Snapshot& snapshot();
  // The last snapshot taken, as it was (monotonic_ns is 0 before the first).
  const Snapshot& last_snapshot() const;

  const std::string& dir() const;

  // Folds the segments of writers that have exited into `dir`'s totals and
  // removes them (and dead writers' markers), as the retiring exporter
  // does, when no other process holds the directory's lock; waits up to
  // `patience` for another folding writer (never for an exporter, which
  // folds them itself). The registry's own cleaning when no exporter runs:
  // writers call it (segment_writer.h). How many segments it folded; 0 when
  // the lock was held or nothing had exited.
  static uint64_t fold_exited(const std::string& dir,
                              std::chrono::milliseconds patience = std::chrono::milliseconds(0));

 private:
  // Its state and workings (lib/src/reader/): not part of this header.
  std::unique_ptr<reader_internal::ReaderCore> core_;
};

}  // namespace gym
