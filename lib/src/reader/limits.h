// The registry reader's limits (LimitTable): the one join of a limit's
// series, and the limit spread over processes. Not installed.
//
// A LimitMeter writes its series with the same labels; the table knows each
// series' part in its limit from the moment it is interned (note_part, by
// its family and its labels' text). While a snapshot reads live segments it
// notes each one's values of those parts (note_value) and closes it
// (close_segment): that segment's process holds the limit when it has the
// limit's own live record, and its free slots count as stranded when it has
// no caller queued. Then the snapshot's series are placed (place: which
// output series is which part) and the rows made from their summed values
// (rows): a row a limit with a gym_concurrency_limit series (a limit now) or
// a holds' series (its admissions, which stay when its writers are gone).
// A table lives as long as its reader.
//
// Thread-safety: none; its reader's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gym/registry_reader.h"

namespace gym::reader_internal {

class LimitTable {
 public:
  // Series `id` of `family` with these labels (their text, sorted).
  void note_part(uint32_t id, std::string_view family, std::string_view labels);
  // Series `id` is forgotten (its id may be reused).
  void forget(uint32_t id) {
    if (id < part_.size()) part_[id] = 0;
  }
  // A new snapshot's values begin.
  void begin();
  // A live record's value in the segment being read (gauges; holds: how
  // many are held).
  void note_value(uint32_t id, int64_t value);
  // The segment just read is done.
  void close_segment();
  // Output series `index` of the snapshot is series `id`.
  void place(uint32_t id, size_t index);
  // The snapshot's rows, from its series' values (snap.series placed).
  void rows(Snapshot& snap);

 private:
  // A series' part in a limit (the low three bits of part_).
  enum Part : uint32_t {
    kNoPart = 0,
    kLimitPart,
    kAvailablePart,
    kHoldsPart,
    kQueuedPart,
    kTimeoutsPart,
    kCancelledPart
  };
  static Part part_of(std::string_view family);
  // One limit's values in the segment being read, and its spread so far.
  struct Tally {
    uint32_t stamp = 0;  // segment whose values below are noted
    bool held = false;   // that segment has the limit's own record
    int64_t limit = 0, available = 0, holds = 0, queued = 0;
    uint32_t processes = 0, queued_processes = 0;
    int64_t unqueued_free = 0;
  };

  static void fill(const Snapshot& snap, const Tally& t, LimitRow& row);

  std::vector<uint32_t> part_;                       // by id: (limit << 3) | Part, 0 for none
  std::unordered_map<std::string, uint32_t> index_;  // labels text -> limit
  std::vector<Tally> tallies_;                       // by limit
  std::vector<uint32_t> touched_;                    // limits noted in this segment
  uint32_t stamp_ = 0;
  // By limit: where its parts are in this snapshot's series (kNone: none),
  // and whether it is a row; the rows in the order they were made.
  struct Placed {
    static constexpr uint32_t kNone = UINT32_MAX;
    uint32_t at[kCancelledPart + 1] = {kNone, kNone, kNone, kNone, kNone, kNone, kNone};  // by Part
    bool ordered = false;
  };
  std::vector<Placed> placed_;
  std::vector<uint32_t> order_;
};

}  // namespace gym::reader_internal
