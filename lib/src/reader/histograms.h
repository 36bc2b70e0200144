// A histogram's values as each format family lays them out, read out of a
// segment's mapping into the words the reader keeps of it: the shards'
// buckets and sums, then the native words (one layout reader per family).
//
//   format 7, and format 8's histograms without native buckets: a shard a
//     thread, each its classic buckets and sum, then one native array for
//     all shards (read_shared_native), the two kinds read until they agree;
//   format 8 with native buckets: a shard a thread holding its sum and
//     count, then one joint array of (native, classic) pairs (read_joint),
//     whose one add a value makes every read add up.
//
// A reader reads formats kMinFormatVersion (7) to kFormatVersion (8); it
// refuses older segments (docs/registry.md).
//
// Thread-safety: pure functions over the caller's memory; loads from the
// mapping are atomic (untorn), under the caller's SIGBUS guard.
#pragma once

#include <cstdint>

#include "gym/registry_reader.h"

namespace gym::reader_internal {

// How a histogram's values were read: whole; with its native counts those
// last read (its classic buckets and sum unchanged: no observation ended
// since), not read again; or never consistently, its last values kept.
enum class ReadOutcome : uint8_t { kRead, kNativeAsLast, kInconsistent };

// Where a histogram's values are, as its record says.
struct HistogramShape {
  uint32_t version;  // its segment's format
  uint32_t shards;
  uint32_t bound_count;
  uint32_t native_words;
  // The words a read copies out: every shard's buckets and sum, then the
  // native words.
  uint32_t copied_words() const { return shards * (bound_count + 2u) + native_words; }
};

// The values at `line` into `to` (copied_words() of them). `last` is what
// was read of it before (histogram_totals' words); `gone`: its writer is
// gone (a killed writer's observation in flight is settled). `info` is the
// series', for its bounds (the joint array splits by them).
ReadOutcome read_histogram(const HistogramShape& h, const SeriesInfo& info, const uint64_t* line,
                           const uint64_t* last, bool gone, uint64_t* to);

// The words read (`cur`, as read_histogram filled them) added up over the
// shards into `out`: the buckets, the native buckets, the sum
// (segment::shard_words of them, returned). `native_as_last`: the native
// words are left out (not read; those last read stand).
uint32_t histogram_totals(const HistogramShape& h, const uint64_t* cur, bool native_as_last,
                          uint64_t* out);

}  // namespace gym::reader_internal
