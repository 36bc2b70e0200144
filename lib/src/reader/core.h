// What the registry reader's files (reader/*.cc) share: ReaderCore, the
// reader behind RegistryReader's installed interface (gym/registry_reader.h),
// a thin owner of the typed parts below, and small helpers. Not installed.
//
//   reader.cc        the reader's life, the directory lock, a snapshot's steps,
//                    the samples it hands out
//   segment.h        a segment as the reader holds it
//   segment_set.h    the directory's files: listing, opening, markers,
//                    rejection, folded names (SegmentSet); who is trusted
//   reading.h        a segment's records and values read (SegmentReading)
//   series.cc        records validated and interned (SegmentReading); segments
//                    retired; expiry
//   values.cc        a segment's values, exemplars, resets, ages, gauges,
//                    damage (SegmentReading)
//   record_copies.h  a segment's new records copied out
//   series_table.h   the series table (ids, identity keys, order)
//   accumulators.h   each series' sums, live and retired (SeriesValues)
//   histograms.h     a histogram's values, one layout reader a format family
//   limits.h         the limits: their series joined once (LimitTable)
//   totals.cc        folded totals: loading and persisting them
//   totals_file.h    the totals file's format
//   totals_store.h   the totals file read, checked and written (TotalsFile)
//
// A file's life in the reader. Each snapshot lists the directory; a name it
// has not seen (or the same name on a new inode) is examined once:
//   - a segment (gym-*.seg) whose header is a layout this reader reads
//     (formats 7 and 8) is opened and mapped: LIVE. Its new records are
//     parsed as they are published (each validated once, then an Entry),
//     and its values read at every snapshot into the live sums;
//   - a marker (gym-*.unmetered) is kept open: while its owner holds its
//     lock, an unmetered writer; then removed (by the retiring reader);
//   - anything else, and a segment refused (untrusted owner, unsupported
//     format, inconsistent layout), is REJECTED: counted and logged once
//     for that inode, then skipped; a file that cannot be read is counted
//     at every snapshot and logged once.
// A LIVE segment becomes DAMAGED when it is truncated or a read faults: its
// last values are folded into the retired sums, it is not read again, and
// its live owner counts as unmetered. When its owner is gone (the kernel
// dropped its owner lock) or its file is removed, it is RETIRED: read a
// last time into the retired sums (not its gauges), then closed. The
// retiring reader keeps its name as folded-pending until the totals file
// that holds it is written, then removes the file; a read-only reader
// keeps its own totals and skips the file while it stays (DEAD to it),
// until the retiring reader's totals change and it reads those instead.
#pragma once

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
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/fault_guard.h"
#include "common/label_rules.h"
#include "common/owner_lock.h"
#include "common/process_identity.h"
#include "gym/contract.h"
#include "reader/accumulators.h"
#include "reader/histograms.h"
#include "reader/limits.h"
#include "reader/reading.h"
#include "reader/segment.h"
#include "reader/segment_set.h"
#include "reader/series_table.h"
#include "reader/totals_file.h"
#include "reader/totals_store.h"

#include "gym/registry_reader.h"

namespace gym {
namespace reader_internal {

// Reads of a histogram whose native and classic totals differ, or of an
// exemplar slot torn by its writer, before its last values are kept instead.
inline constexpr int kConsistentReadAttempts = 16;

inline constexpr int32_t kInvalid = -2;
inline constexpr int32_t kOverLimit = -3;
// A series' last change in the totals when a folding writer folded it and
// no serving reader has had it since: such a reader starts its
// retired_series_ttl when it loads it (so that what writers counted while no
// exporter ran is served for the TTL once one starts, however long ago).
inline constexpr int64_t kNotYetServed = INT64_MAX;
// What a folding writer writes before its pid in the lock file.
inline constexpr const char* kFolderTag = "fold ";

inline int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Sums of values from shared memory saturate: a planted value near 2^64 must
// not make a total wrap around and fall.
inline uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

// Two words at a time (GCC's vector extension: SSE2 on x86-64, whatever the
// target has elsewhere), for the loops over a histogram's ~200 words a shard.
using Words2 = uint64_t __attribute__((vector_size(16)));
inline Words2 load2(const uint64_t* p) {
  Words2 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// dst[i] = sat_add(dst[i], src[i]) for i < n.
inline void sat_add_words(uint64_t* dst, const uint64_t* src, size_t n) {
  size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    const Words2 a = load2(dst + i), b = load2(src + i), r = a + b;
    const Words2 carry = ((a & b) | ((a | b) & ~r)) >> 63;  // 1 where a + b wrapped
    const Words2 out = r | -carry;
    std::memcpy(dst + i, &out, sizeof out);
  }
  if (i < n) dst[i] = sat_add(dst[i], src[i]);
}

// Whether any now[i] < before[i], i < n (a counter that went down).
inline bool any_below(const uint64_t* now, const uint64_t* before, size_t n) {
  Words2 borrow = {0, 0};  // top bits: some now - before borrowed
  size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    const Words2 a = load2(now + i), b = load2(before + i);
    borrow |= (~a & b) | ((~a | b) & (a - b));
  }
  bool below = ((borrow[0] | borrow[1]) >> 63) != 0;
  if (i < n) below |= now[i] < before[i];
  return below;
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

using segment::Header;
using segment::Record;
using segment::SeriesKind;

// The reader itself: RegistryReader's state and workings, behind its
// installed interface.
class ReaderCore {
 public:
  static constexpr const char* kLockFile = RegistryReader::kLockFile;
  static constexpr const char* kTotalsFile = RegistryReader::kTotalsFile;

  ReaderCore(std::string dir, ReaderOptions options);
  ~ReaderCore();
  ReaderCore(const ReaderCore&) = delete;
  ReaderCore& operator=(const ReaderCore&) = delete;

  bool claim(std::string* why, std::chrono::milliseconds patience);
  bool retiring() const { return lock_fd_ >= 0; }
  const Snapshot& snapshot();
  const Snapshot& last_snapshot() const { return snapshot_; }
  const std::string& dir() const { return dir_; }

 private:
  bool open_dir();
  void follow_holders_totals();
  void retire_gone_owners();
  void read_live_segments();
  bool try_lock(std::string* why);
  // Mode::kFold's snapshot: exited writers folded while the lock is free.
  const Snapshot& fold_snapshot();
  void retire(Segment& s);
  void list_directory();
  void let_go(const Segment& s);
  SegmentSet::Map::iterator drop_segment(SegmentSet::Map::iterator it);
  void load_totals(bool adopt_folded);
  void persist_totals();
  void expire_series(int64_t now_ns);
  void build_output();

  std::string dir_;
  ReaderOptions options_;
  Trust trust_;
  int dir_fd_ = -1;
  int lock_fd_ = -1;
  bool lock_refused_ = false;  // reported once
  bool holder_folds_ = false;  // the last refusal's holder is a folding writer
  Snapshot snapshot_;

  // The directory's files: segments, markers, those skipped (segment_set.h).
  SegmentSet segments_{dir_, trust_, snapshot_};

  // Series, by id (series_table.h).
  SeriesTable series_;
  // The limits (limits.h): each series' part in one, noted as it is
  // interned; their values and spread as live segments are read.
  LimitTable limits_;
  // Each series' sums, live and retired, and its exemplars (accumulators.h).
  SeriesValues values_;
  uint64_t retired_dropped_ = 0;

  // Totals: whether they changed since written (the folded segments whose
  // files wait for them are the SegmentSet's).
  bool totals_dirty_ = false;
  bool totals_error_reported_ = false;
  TotalsFile totals_file_;  // its reads and writes (totals_store.h)

  // Segments' records and values into the parts above (reading.h).
  SegmentReading reading_{{series_, values_, limits_, snapshot_, totals_dirty_, dir_, options_}};
};

}  // namespace reader_internal

}  // namespace gym
