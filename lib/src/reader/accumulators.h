// The registry reader's sums of each series (SeriesValues): what this
// snapshot's live segments add up to (live), and what writers that are gone
// or were reset counted (retired: folded, kept in the totals), each by
// series id; the exemplars kept of each histogram; and the native counts of
// series with both parts, added up for the snapshot. Not installed.
//
// A series' values move one way: a live segment's are added into live()
// at each snapshot (begin_snapshot clears them first); when its writer is
// gone, or a counter went down, what was read of it is added into
// retired(), which only grows until the series is forgotten (forget) or the
// totals are replaced (drop_retired, when the reader takes the directory's
// totals over or follows the retiring reader's).
//
// Thread-safety: none; its reader's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "gym/registry_reader.h"

namespace gym::reader_internal {

// Per series id, twice (live and retired): its fields ordered so that the
// flags share a word (80 bytes, not 104).
struct Accumulator {
  uint64_t counter = 0;
  int64_t gauge = 0;
  int64_t oldest = 0;  // ages
  int64_t sum = 0;
  std::vector<uint64_t> buckets;  // not cumulative: the classic ones, then the native ones
  // A live histogram with one segment adding to it this snapshot, nearly
  // all of them: that segment's words (buckets, native buckets, sum, in its
  // `last`), viewed rather than copied into `buckets`, which a second
  // segment's words make. Null otherwise.
  const uint64_t* view = nullptr;
  int64_t created_ns = 0;  // the earliest start of what it adds up
  uint32_t added = 0;      // live histograms: segments added this snapshot
  bool present = false;
  bool in_progress = false;      // ages: a live record reported its part
  bool created_unknown = false;  // something it adds up has no known start
  void note_created(int64_t ns) {
    if (ns <= 0)
      created_unknown = true;
    else if (created_ns == 0 || ns < created_ns)
      created_ns = ns;
  }
  // A counter's or histogram's words (counter: 1; histogram: buckets and
  // native buckets, then the sum) added in.
  void add_words(segment::SeriesKind kind, const uint64_t* words, uint32_t bound_count,
                 uint32_t native_words);
  // A live histogram's words (`words` in all) from one more segment.
  void add_live_histogram(const uint64_t* last, uint32_t words);
};
static_assert(sizeof(Accumulator) <= 80);

class SeriesValues {
 public:
  // Series `id` was just made (ids are dense: a new one is the next, or
  // one forgotten before): no retired part.
  void made(uint32_t id);
  // Series `id` is forgotten: its retired part and its exemplars go.
  void forget(uint32_t id);
  // Every series' retired part goes (the totals are read anew).
  void drop_retired();
  // A snapshot's reading begins: every live part is cleared.
  void begin_snapshot();

  Accumulator& live(uint32_t id) { return live_[id]; }
  const Accumulator& live(uint32_t id) const { return live_[id]; }
  // Its retired part, made when a series first has some (most never do: a
  // pointer a series, not 80 bytes).
  Accumulator& retired(uint32_t id);
  // Its retired part, or none (an empty accumulator).
  const Accumulator& retired_or_none(uint32_t id) const;

  // A histogram's exemplars, one a classic bucket (empty: none yet).
  std::vector<Exemplar>& exemplars(uint32_t id);
  std::span<const Exemplar> exemplars_of(uint32_t id) const;

  // A series' native counts for the snapshot: a view of its live part's or
  // its retired part's when only one has them (nearly always), else both
  // added up (kept until the next begin_output).
  std::span<const uint64_t> native_view(const uint64_t* live, const Accumulator& retired,
                                        size_t classic, size_t words);
  void begin_output() { merged_used_ = 0; }

 private:
  std::vector<Accumulator> live_;
  std::vector<std::unique_ptr<Accumulator>> retired_;
  std::vector<std::vector<Exemplar>> exemplars_;
  std::vector<std::vector<uint64_t>> merged_;
  size_t merged_used_ = 0;
};

}  // namespace gym::reader_internal
