// What the registry reader's files (registry_reader*.cc) share: the segment
// as the reader holds it, the reader's limits and small helpers. Not
// installed; the reader's interface is gym/registry_reader.h.
//
//   registry_reader.cc          the reader's life, the directory lock, snapshots
//   registry_reader_totals.cc   folded totals: loading and persisting them
//   registry_reader_listing.cc  the directory: segments, markers, temporaries
//   registry_reader_series.cc   records, interning, values, folding, damage
//   registry_reader_limits.cc   limits spread over processes (LimitSpread)
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

#include "fault_guard.h"
#include "gym/contract.h"
#include "label_rules.h"
#include "owner_lock.h"
#include "process_identity.h"
#include "totals_file.h"

#include "gym/registry_reader.h"

namespace gym {
namespace reader_internal {

// Reads of a histogram shard whose native and classic totals differ before
// its last values are kept instead (read_values).
inline constexpr int kConsistentReadAttempts = 16;

inline constexpr int32_t kInvalid = -2;
inline constexpr int32_t kOverLimit = -3;
// Layout sizes a header may declare; anything larger is not ours.
inline constexpr uint64_t kMaxSegmentBytes = uint64_t{1} << 30;
// A named temporary (only where O_TMPFILE is unsupported) older than this,
// and unlocked, was left by a writer that died while creating it.
inline constexpr time_t kStaleTempSeconds = 60;
// A totals file larger than this is not ours.
inline constexpr off_t kMaxTotalsBytes = off_t{64} << 20;
inline constexpr const char* kTotalsTemp = ".exporter-totals.new";

inline bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

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

}  // namespace reader_internal

using segment::Header;
using segment::Record;
using segment::SeriesKind;
using namespace reader_internal;

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

}  // namespace gym
