// A segment read into the reader's parts: its new records validated once
// and interned (the series table, the limits), its values copied out of
// shared memory under the fault guard and added to the live sums (or, for
// an owner that is gone, the retired ones), with resets, ages, gauges,
// declared servers, exemplars and damage. Not installed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gym/registry_reader.h"
#include "reader/accumulators.h"
#include "reader/histograms.h"
#include "reader/limits.h"
#include "reader/segment.h"
#include "reader/series_table.h"

namespace gym::reader_internal {

class SegmentReading {
 public:
  // What it reads into, all the reader's; `totals_dirty` is set when the
  // retired sums change; `dir` names segments in messages.
  struct Into {
    SeriesTable& series;
    SeriesValues& values;
    LimitTable& limits;
    Snapshot& out;
    bool& totals_dirty;
    const std::string& dir;
    const ReaderOptions& options;
  };
  explicit SegmentReading(Into into) : in_(into) {}

  // The series id of a record's metadata (a copy, never shared memory),
  // interning it the first time; kInvalid with why, or kOverLimit.
  int32_t intern(const segment::Record& rec, std::string* why);
  // Reads a segment's values: counters and histograms (and gauges when
  // `gauges`) into the live sums or, for a dead owner's segment (no
  // gauges), the retired sums.
  void read_segment(Segment& s, bool gauges);
  // Series expired: the over-limit problem may be said again.
  void series_expired();

 private:
  void parse_new_records(Segment& s, uint32_t count);
  bool read_values(Segment& s, bool gone, uint32_t* count);
  void read_exemplars(const Segment& s, uint32_t id, uint32_t record, uint32_t bound_count);
  void add_in_progress(const Segment::Entry& e, const uint64_t* cur, Accumulator& acc, int64_t now);
  void add_gauge(const Segment& s, const Segment::Entry& e, const uint64_t* cur, Accumulator& acc,
                 int64_t now, bool& declared);
  void add_total(Segment& s, const Segment::Entry& e, const uint64_t* folded, uint32_t words,
                 bool native_as_last, Accumulator& acc, bool into_retired, int64_t now);
  void fold_last(Segment& s);
  void damage(Segment& s, const std::string& why);

  Into in_;
  bool over_limit_reported_ = false;
  std::vector<uint64_t> scratch_;      // one segment's values, copied out
  std::vector<char> scratch_strings_;  // one segment's string area, copied out
  std::vector<uint32_t> scratch_states_;
  std::vector<ReadOutcome> scratch_outcomes_;  // by entry: how its values were read
};

}  // namespace gym::reader_internal
