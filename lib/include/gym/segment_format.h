// The registry segment format: the one definition of the bytes that writers
// put into shared memory and that RegistryReader parses. Nothing else in the
// project interprets a segment.
//
// Thread-safety: this header only describes memory; the rules for touching it
// are the publication rule below.
//
// A segment is a regular file in the registry directory, named
// `gym-<pid>-<start ticks>-<sequence>.seg`, created 0600 by one writer process
// (its owner) and mapped MAP_SHARED by the owner (read-write) and by the
// exporter (read-only). Sizes and offsets are in bytes; integers are native
// endian (writer and reader run on the same host).
//
//   Header: page 0, kHeaderBytes = 4096
//   offset size field
//   ------ ---- -----------------------------------------------------------
//        0    8 magic            "GYMSEG\0\1"  (kMagic; written last, release)
//        8    4 format_version   kFormatVersion
//       12    4 header_bytes     4096
//       16    4 record_bytes     32 (v7; 1024 in versions 1 to 6: one record)
//       20    4 max_records      kMaxRecords     (series per segment)
//       24    4 line_bytes       64              (one value cache line)
//       28    4 value_lines      kValueLines     (value cache lines)
//       32    8 records_offset   (v7) 256: records share the header's page;
//                                (1 to 6) 4096
//       40    8 values_offset    (v7) strings_offset + string_bytes;
//                                (1 to 6) records_offset + max_records *
//                                record_bytes
//       48    8 total_bytes      values_offset + value_lines * line_bytes
//       56    4 owner_pid
//       60    4 (zero)
//       64    8 owner_start_ticks  field 22 of /proc/<pid>/stat (clock ticks
//                                  after boot): with the pid, an identity that
//                                  survives pid reuse
//       72   16 owner_boot_id      /proc/sys/kernel/random/boot_id, raw bytes
//       88    8 created_unix_ns
//       96    8 owner_pid_ns     the owner's pid namespace (0: unknown)
//      104    8 strings_offset   (v7) records_offset + max_records *
//                                record_bytes, rounded up to a page
//      112    4 string_bytes     (v7) kStringBytes: the string area's size
//      116   12 (zero)
//      128    4 record_count     atomic: records [0, record_count) may be read
//      132   60 (zero)           (record_count alone on its cache line)
//      192    8 dropped_series   atomic: registrations this process could not
//                                make (segment full, limits exceeded)
//      200 3896 (zero)
//
//   Metadata records (cold): max_records x 32 bytes at records_offset (the
//   header's page holds the first 120), each pointing into the string area
//   (v7); in versions 1 to 6, max_records x 1024 bytes from the second page,
//   each with its bounds and text inline (bytes 32 to 1023)
//   offset size field
//   ------ ---- -----------------------------------------------------------
//        0    4 state            atomic: kRecordEmpty, kRecordLive,
//                                kRecordReleased, kRecordInherited (v2)
//        4    1 kind             SeriesKind (kAges from v3)
//        5    1 label_count      <= kMaxLabels
//        6    1 bound_count      histograms: finite upper bounds, <= kMaxBounds
//        7    1 shards           histograms: kHistogramShards; otherwise 1
//        8    4 value_line       first value cache line of this series
//       12    2 text_bytes       bytes of `text` in use
//       14    2 native_words     (v4) histograms: native::kWords when the
//                                series also counts native buckets; else 0
//       16    8 unit_divisor     double: exposed value = raw / unit_divisor
//                                (histogram sum and bounds; 1 otherwise)
//       24    4 exemplar_line    (v6) histograms: atomic; 0 while it has no
//                                exemplar slots, then the first value line
//                                of bound_count + 1 of them (one a classic
//                                bucket); kNoExemplarLine: none could be
//                                reserved (the segment is full)
//       28    4 text_offset      (v7) its text entry in the string area
//                                (4-aligned); zero in versions 1 to 6
//   (1 to 6 only, inline:)
//       32  128 bounds           int64[16]: bound_count <= kMaxBounds (15) used,
//                                strictly increasing, raw units; the rest zero
//      160  864 text             "family\0name1\0value1\0...nameN\0valueN\0",
//                                labels sorted by name
//
//   String area (v7): string_bytes at strings_offset (cold), written only by
//   the owner, before the record that points into it is published, and
//   never changed after. A text entry, 4-aligned, at a record's text_offset:
//     uint32 text_bytes    the text's length (equal to the record's)
//     uint32 bounds_offset histograms with bounds: where in the string area
//                          its bound_count int64 bounds are (8-aligned, before
//                          the entry: bounds are written first, and a
//                          segment keeps each distinct set once); else 0
//     char   text[text_bytes]  as the inline text above
//   Records are 32 bytes and the text takes its length, not 864 bytes: a
//   series of a few dozen bytes of text takes ~0.1 KiB of /dev/shm, not 1,
//   and a writer of up to 120 series has no page of records of its own.
//
//   Values: value_lines x 64 bytes at values_offset (hot; a series' values
//   start on a cache line of their own and no two series share a line)
//     counter    uint64 at value_line                          (1 line)
//     gauge      int64  at value_line                          (1 line)
//     ages       (v3) kAgeLines lines = kAgeWords int64: word 0 counts the
//                ones in progress without a slot; words 1..kAgeSlots are
//                slots, each 0 (free) or a ticket: the start time
//                (stamp_now_ns(), its low 6 bits replaced by the word's
//                index); then kAgeLanes lanes counting the ones ever begun.
//                In progress now: word 0 plus the slots in use; the oldest
//                started at the smallest ticket with its low bits cleared;
//                begun (a counter): the sum of the lanes.
//     histogram  (v5) `shards` shards, each ceil((n + 2) * 8 / 64) lines:
//                uint64 bucket[n + 1] (not cumulative; the last is the +Inf
//                overflow), then int64 sum of raw observations; then, when
//                native_words != 0, ceil(native_words * 8 / 64) lines of
//                uint64 native bucket counts (gym/native_histogram.h: the
//                zero bucket, then one per key), one array for all shards.
//                A thread updates one shard's buckets and sum (so threads do
//                not bounce one line) and adds to the native array
//                atomically, after its classic bucket (release); the reader
//                adds the shards up. The count is the sum of the buckets, so
//                a reader's +Inf bucket always equals its count.
//                (v4: each shard ceil((n + 2 + native_words) * 8 / 64)
//                lines, its native counts between its buckets and its sum.)
//                (v8) A histogram with native_words != 0 has `shards`
//                shards of one line, each its int64 sum at word 0 and its
//                uint64 count at word 1 (added after the sum and the joint
//                word, released: a reader that finds every shard's count and
//                sum as it last read them keeps what it read); an own shard
//                (all but the last) then stores its sum and count as of
//                that completed observation at words 2 and 3 (the
//                published pair; zeros before the first, and from writers
//                before 2026-12-06, which added the joint word first). One
//                joint array of native_words + n uint64 words, every
//                shard's: word w + i counts the values in native word w and
//                classic bucket i (joint_word). One atomic add counts a
//                value in both kinds of bucket, so a reader's copy always
//                adds up, even of a writer killed in the middle of an
//                observation. A killed writer's own shard whose count is
//                its published one but whose sum is not was in the middle
//                of an observation of value sum - published sum; the
//                joint array counts J - (the shards' counts) such values
//                (read_joint takes out those it did not count). The reader
//                splits the array: native word w
//                and bucket i are the word's, w + i = j, with i the number
//                of bounds k whose joint_word(native word of bound k, k)
//                is below j. A histogram without native buckets keeps the
//                v5 layout.
//     exemplars  (v6) a histogram's, reserved after its first observation
//                with a trace context (not with the histogram: most never
//                get one): n + 1 lines at exemplar_line, one a classic bucket,
//                each the bucket's latest exemplar: uint64 seq (0: none yet;
//                odd: being written), int64 value (raw units), uint8
//                trace_id[16], uint8 span_id[8], int64 Unix ns observed, 16
//                bytes zero. A writer claims the slot with a compare-exchange
//                of an even seq to seq + 1 (another thread's write in
//                progress: it leaves this exemplar out, it never waits),
//                release stores of the words, then stores seq + 2 (release).
//                A reader loads seq (acquire), the words (acquire), seq
//                again: an exemplar whose two seqs differ or are odd is torn
//                and read again or skipped, never served. (No fences:
//                ThreadSanitizer does not model them.)
//
// Publication rule. The owner creates the file unnamed (O_TMPFILE), sizes it
// (sparse), reserves the header page with fallocate, takes an OFD write lock
// on it that it holds until it exits, writes the header with the magic last,
// and only then links it into the directory: a named segment is always
// complete. To register a series the owner (under a process-local mutex)
// first reserves (fallocate) the pages of the record, of its text entry (and
// bounds) in the string area and of its value lines, so that no page it or a
// reader touches is ever a hole (on a full tmpfs a hole faults with SIGBUS; a
// failed reservation is a counted drop instead), then writes the text entry,
// fills a record whose state is kRecordEmpty, stores state = kRecordLive
// with release, then raises record_count with release. Metadata of a record
// never changes after that; a released gauge slot is only reused for the same
// family and labels. Value updates are relaxed atomic read-modify-writes on
// the value lines. A gauge is released by storing 0 into its value, then
// state = kRecordReleased (release); it is reused by zeroing the value, then
// state = kRecordLive. The reader loads record_count and each state with
// acquire, so it never sees a record before its metadata, and reads values
// with relaxed loads. The owner is alive exactly while its OFD lock is held;
// the kernel drops it when the process dies.
//
// Fork (version 2). A child gets a segment of its own with the parent's
// records: counters and histograms start at zero there, and the gauges it
// inherited are marked kRecordInherited: their values live on in the child
// (a primitive may still use them) but are not exported from it, because the
// parent still reports them. A released-and-reused slot in the child is
// kRecordLive again: a gauge the child made itself.
//
// Ages (version 3). A waiter or holder claims a free slot with a
// compare-exchange of 0 to its ticket and frees it with a compare-exchange of
// its ticket to 0; when no slot is free it adds 1 to word 0 instead (counted,
// but with no age: the oldest is still right for the slots held). Each
// beginning is also counted in its thread's lane: lanes 1.. belong to one
// thread of the process at a time (handed out and back with an atomic
// bitmap), which adds with a plain load and store, no read-modify-write;
// lane 0 is shared (an atomic add) by threads beyond the lanes. An ages record is an instance's,
// like a gauge: released and reused the same way, its words in progress (0..kAgeSlots) zeroed
// each time, its lanes kept. Its count of beginnings is a counter: read from a live, inherited or
// released record alike, it goes on counting in a reused one, is folded into the totals when its
// owner is gone, and in a forked child's copy it starts from zero (the child's copy is not
// exported as in progress, as for gauges, but what the child begins in it is counted). Writers
// of earlier builds zeroed the lanes too at release: a reader takes that for a reset.
//
// Versions. 2 added kRecordInherited and the reservation rule; the layout is
// that of 1. 3 added kAges records. 4 added native buckets to histograms
// (native_words) and made the value area 16,384 lines. 5 keeps one native
// array per histogram instead of one per shard (a native histogram's values
// take 36 lines instead of 104). 6 adds exemplars (a record's exemplar_line,
// zero in older versions: they have none). 7 moves a record's text and
// bounds out of it into the string area (records of 32 bytes instead of
// 1024). 8 counts a native histogram's values in one joint array of native
// and classic buckets (one add a value instead of two that a reader had to
// see agree). A reader reads 7 and 8 (kMinFormatVersion..kFormatVersion):
// versions 1 to 6 were written only by builds before 0.1's format floor, and
// a segment of one is refused (counted and logged) like any unsupported
// version. The fields and rules of older versions stay described here.
//
// Internal (docs/api.md): the segment layout, for the reader and writer.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>

namespace gym::segment {

inline constexpr char kMagic[8] = {'G', 'Y', 'M', 'S', 'E', 'G', '\0', '\1'};
// The magic as the 64-bit word the writer stores (native byte order).
inline uint64_t magic_word() {
  uint64_t w;
  __builtin_memcpy(&w, kMagic, sizeof w);
  return w;
}
inline constexpr uint32_t kFormatVersion = 8;
// The first version with one native array per histogram (format 7's
// histogram layout, which formats 5 and 6 had).
inline constexpr uint32_t kSharedNativeVersion = 5;
// The first version with the string area (records of kRecordBytes).
inline constexpr uint32_t kStringsVersion = 7;
// The oldest version a reader reads (docs/registry.md: the format floor).
inline constexpr uint32_t kMinFormatVersion = kStringsVersion;
// The first version with a native histogram's joint array.
inline constexpr uint32_t kJointVersion = 8;
// Reservations (fallocate) are made in whole pages.
inline constexpr uint64_t kPageBytes = 4096;
inline constexpr uint32_t kHeaderBytes = 4096;
inline constexpr uint32_t kRecordBytes = 32;          // version 7 on
inline constexpr uint32_t kInlineRecordBytes = 1024;  // versions 1 to 6
inline constexpr uint32_t kStringBytes = 1u << 20;    // 1 MiB (sparse)
inline constexpr uint32_t kLineBytes = 64;

// Limits. Exceeding any of them makes the registration a counted drop.
inline constexpr uint32_t kMaxRecords = 1024;    // series per segment
inline constexpr uint32_t kValueLines = 16384;   // 1 MiB of values (sparse)
inline constexpr uint32_t kMaxLabels = 8;        // labels per series
inline constexpr uint32_t kMaxNameBytes = 64;    // a family or label name
inline constexpr uint32_t kMaxValueBytes = 128;  // a label value
inline constexpr uint32_t kMaxBounds = 15;       // finite histogram bounds
inline constexpr uint32_t kBoundSlots = 16;      // bounds array in a record
inline constexpr uint32_t kTextBytes = 864;      // family + labels, with NULs

enum class SeriesKind : uint8_t { kCounter = 1, kGauge = 2, kHistogram = 3, kAges = 4 };

// An ages record: word 0 (in progress without a slot), words
// 1..kAgeSlots (slots), then kAgeLanes lanes of beginnings from word
// kAgeFirstLane. A ticket's low kAgeIndexBits bits are its slot's word index
// (0: no slot).
inline constexpr uint32_t kAgeLines = 8;
inline constexpr uint32_t kAgeWords = kAgeLines * kLineBytes / 8;
inline constexpr uint32_t kAgeSlots = 31;
inline constexpr uint32_t kAgeFirstLane = 32;
inline constexpr uint32_t kAgeLanes = kAgeWords - kAgeFirstLane;
inline constexpr uint32_t kAgeIndexBits = 6;
inline constexpr int64_t kAgeIndexMask = (int64_t{1} << kAgeIndexBits) - 1;
static_assert(kAgeSlots < kAgeFirstLane && kAgeFirstLane < (1u << kAgeIndexBits));

inline constexpr uint32_t kRecordEmpty = 0;
inline constexpr uint32_t kRecordLive = 1;
inline constexpr uint32_t kRecordReleased = 2;
inline constexpr uint32_t kRecordInherited = 3;  // v2: a forked child's copy of a gauge

struct Header {
  uint64_t magic;  // the bytes of kMagic
  uint32_t format_version;
  uint32_t header_bytes;
  uint32_t record_bytes;
  uint32_t max_records;
  uint32_t line_bytes;
  uint32_t value_lines;
  uint64_t records_offset;
  uint64_t values_offset;
  uint64_t total_bytes;
  int32_t owner_pid;
  uint32_t reserved0;
  uint64_t owner_start_ticks;
  uint8_t owner_boot_id[16];
  uint64_t created_unix_ns;
  // The owner's pid namespace: the inode of /proc/self/ns/pid (0: unknown,
  // a writer from before it was recorded). owner_pid is the owner's pid in
  // that namespace; the exporter finds its pid on the host from it
  // (owner_start_ticks is the same in every namespace).
  uint64_t owner_pid_ns;
  uint64_t strings_offset;  // v7
  uint32_t string_bytes;    // v7
  uint8_t reserved1[12];
  alignas(64) uint32_t record_count;
  alignas(64) uint64_t dropped_series;
};
static_assert(offsetof(Header, owner_pid) == 56);
static_assert(offsetof(Header, owner_start_ticks) == 64);
static_assert(offsetof(Header, created_unix_ns) == 88);
static_assert(offsetof(Header, owner_pid_ns) == 96);
static_assert(offsetof(Header, strings_offset) == 104);
static_assert(offsetof(Header, string_bytes) == 112);
static_assert(offsetof(Header, record_count) == 128);
static_assert(offsetof(Header, dropped_series) == 192);
static_assert(sizeof(Header) <= kHeaderBytes);
static_assert(sizeof(Header) <= 256);  // format 7's records follow it

// A record of version 7: the first 32 bytes of a Record, its text entry at
// text_offset in the string area.
struct RecordHead {
  uint32_t state;
  uint8_t kind;
  uint8_t label_count;
  uint8_t bound_count;
  uint8_t shards;
  uint32_t value_line;
  uint16_t text_bytes;
  uint16_t native_words;  // v4
  double unit_divisor;
  uint32_t exemplar_line;  // v6
  uint32_t text_offset;    // v7
};
static_assert(sizeof(RecordHead) == kRecordBytes);

// A record of versions 1 to 6, with its bounds and text inline; also the
// reader's copy of a record of any version (its head, bounds and text).
struct Record {
  uint32_t state;
  uint8_t kind;
  uint8_t label_count;
  uint8_t bound_count;
  uint8_t shards;
  uint32_t value_line;
  uint16_t text_bytes;
  uint16_t native_words;  // v4
  double unit_divisor;
  uint32_t exemplar_line;       // v6
  uint32_t text_offset;         // v7 (zero before)
  int64_t bounds[kBoundSlots];  // bound_count used, the rest zero
  char text[kTextBytes];
};
static_assert(offsetof(Record, unit_divisor) == 16);
static_assert(offsetof(Record, exemplar_line) == 24);
static_assert(offsetof(Record, bounds) == 32);
static_assert(offsetof(Record, text) == 160);
static_assert(sizeof(Record) == kInlineRecordBytes);
// The head is a Record's first bytes, field for field.
static_assert(offsetof(RecordHead, value_line) == offsetof(Record, value_line) &&
              offsetof(RecordHead, text_bytes) == offsetof(Record, text_bytes) &&
              offsetof(RecordHead, native_words) == offsetof(Record, native_words) &&
              offsetof(RecordHead, unit_divisor) == offsetof(Record, unit_divisor) &&
              offsetof(RecordHead, exemplar_line) == offsetof(Record, exemplar_line) &&
              offsetof(RecordHead, text_offset) == offsetof(Record, text_offset));

// The string area's text entry (v7), followed by text_bytes of text.
struct TextEntry {
  uint32_t text_bytes;
  uint32_t bounds_offset;
};
static_assert(sizeof(TextEntry) == 8);

inline constexpr uint64_t kRecordsOffset = 256;  // in the header's page
inline constexpr uint64_t kStringsOffset =
    (kRecordsOffset + uint64_t{kMaxRecords} * kRecordBytes + kPageBytes - 1) / kPageBytes *
    kPageBytes;
inline constexpr uint64_t kValuesOffset = kStringsOffset + kStringBytes;
inline constexpr uint64_t kTotalBytes = kValuesOffset + uint64_t{kValueLines} * kLineBytes;
static_assert(kStringsOffset % kPageBytes == 0 && kValuesOffset % kPageBytes == 0);

// One exemplar slot: a value cache line (see the layout above).
// The ids' bytes are kept in words (their bytes in memory order), so that
// every access is an aligned atomic one.
struct ExemplarSlot {
  uint64_t seq;
  int64_t value;
  uint64_t trace_id[2];
  uint64_t span_id;
  int64_t unix_ns;
  uint64_t zero[2];
};
static_assert(sizeof(ExemplarSlot) == kLineBytes);
// Record::exemplar_line when no slots could be reserved.
inline constexpr uint32_t kNoExemplarLine = 0xFFFFFFFFu;

// Shards of a histogram (a power of two). Each of the first
// kHistogramShards - 1 is written by one thread of the owner at a time (with
// loads and stores); the last by the threads beyond them (atomic adds).
inline constexpr uint32_t kHistogramShards = 4;
inline constexpr uint32_t kMaxShards = 64;

// Words of one histogram shard in version 4 and what a reader folds a
// histogram into in every version: the buckets, the native buckets, the sum.
constexpr uint32_t shard_words(uint32_t bound_count, uint32_t native_words) {
  return bound_count + 2 + native_words;
}
constexpr uint32_t lines_of_words(uint32_t words) {
  return (words * 8 + kLineBytes - 1) / kLineBytes;
}
// Value cache lines of one histogram shard, in the versions a reader reads
// (7 and 8): version 8 with native buckets, its sum and count; otherwise
// its buckets and sum.
constexpr uint32_t shard_lines(uint32_t bound_count, uint32_t native_words,
                               uint32_t version = kFormatVersion) {
  if (version >= kJointVersion && native_words != 0) return 1;
  return lines_of_words(bound_count + 2);
}
// Words of a histogram's one array after its shards: the native buckets,
// or (version 8) the joint array of native and classic buckets; 0 without
// native buckets.
constexpr uint32_t shared_words(uint32_t bound_count, uint32_t native_words,
                                uint32_t version = kFormatVersion) {
  if (native_words == 0) return 0;
  return version >= kJointVersion ? native_words + bound_count : native_words;
}
// Value cache lines a series occupies, in a segment of `version`.
constexpr uint32_t value_lines_for(SeriesKind kind, uint32_t bound_count, uint32_t shards,
                                   uint32_t native_words, uint32_t version = kFormatVersion) {
  if (kind == SeriesKind::kAges) return kAgeLines;
  if (kind != SeriesKind::kHistogram) return 1;
  return shards * shard_lines(bound_count, native_words, version) +
         lines_of_words(shared_words(bound_count, native_words, version));
}
// Version 8: the joint array's word that counts a value of native word `w`
// in classic bucket `i`. Both grow with the value, so w + i tells every
// (w, i) that a value can have from every other.
constexpr uint32_t joint_word(uint32_t w, uint32_t i) {
  return w + i;
}

// Atomic access to fields of a mapping (the struct fields are plain integers
// so that writer and reader share one definition; every shared access goes
// through these).
template <class T>
inline T load_acquire(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
template <class T>
inline T load_relaxed(const T* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}
template <class T>
inline void store_release(T* p, T v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
template <class T>
inline void store_relaxed(T* p, T v) {
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
template <class T>
inline void add_relaxed(T* p, T v) {
  __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
// An add by the one thread that writes *p (readers only load it): a load and
// a store, no read-modify-write.
template <class T>
inline void add_owned(T* p, T v) {
  __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}
// The same two adds ordered after the writer's earlier stores: a reader that
// sees this add (an acquire load) sees them too. A histogram's native bucket
// is added so, after its classic bucket; on x86 these are the same
// instructions as the relaxed ones.
template <class T>
inline void add_owned_release(T* p, T v) {
  __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + v, __ATOMIC_RELEASE);
}
template <class T>
inline void add_release(T* p, T v) {
  __atomic_fetch_add(p, v, __ATOMIC_RELEASE);
}

// The clock of ages' start times: CLOCK_MONOTONIC_COARSE (one tick of
// resolution, a few ns to read; shared by every process of the host). The
// exporter reads the same clock to turn a start into an age.
inline int64_t stamp_now_ns() noexcept {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}
// The same clock read precisely (CLOCK_MONOTONIC): a wait's start, so that
// its duration is exact, and the reader's "now" for an age.
inline int64_t precise_now_ns() noexcept {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}
// The clock's resolution (a tick), for the error bound of an age.
inline int64_t stamp_resolution_ns() noexcept {
  timespec t{};
  clock_getres(CLOCK_MONOTONIC_COARSE, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}
// The start time a ticket (or slot word) holds.
constexpr int64_t ticket_start(int64_t ticket) {
  return ticket & ~kAgeIndexMask;
}

// a + b and a - b on int64 values that come from shared memory: any process
// may have written them, so they wrap (as the atomic updates do) instead of
// overflowing, which would be undefined behaviour (found by fuzzing).
inline int64_t wrapping_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrapping_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}

}  // namespace gym::segment
