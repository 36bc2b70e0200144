// The registry reader's values: a segment's values copied out of shared
// memory, its exemplars, and what they add to each series (resets, ages,
// gauges, declared servers, damage).
#include "reader/core.h"
#include "reader/histograms.h"

namespace gym::reader_internal {

namespace {
// A counter's word, or an ages record's count of beginnings (the sum of its
// lanes), into `out`: one word.
uint32_t count_total(SeriesKind kind, const uint64_t* cur, uint64_t* out) {
  out[0] = kind == SeriesKind::kCounter ? cur[0] : 0;
  if (kind == SeriesKind::kAges)
    for (uint32_t l = 0; l < segment::kAgeLanes; ++l)
      out[0] = sat_add(out[0], cur[segment::kAgeFirstLane + l]);
  return 1;
}

HistogramShape shape_of(const Segment& s, const Segment::Entry& e) {
  return {s.version, e.shards, e.bound_count, e.native_words};
}
}  // namespace

// Copies the segment's header counts, states and values out of shared memory
// into scratch_ with aligned atomic loads (untorn), under the SIGBUS guard.
// False when the mapping faulted (the file lost pages under us).
bool SegmentReading::read_values(Segment& s, bool gone, uint32_t* count) {
  uint32_t n = 0;
  uint64_t dropped = 0;
  if (!guarded(s.base, s.size, [&] {
        n = std::min(segment::load_acquire(&s.header()->record_count), s.max_records);
        dropped = segment::load_relaxed(&s.header()->dropped_series);
      }))
    return false;
  s.dropped = dropped;
  *count = n;
  if (n > s.parsed) parse_new_records(s, n);
  scratch_.resize(s.scratch_words);
  scratch_states_.resize(s.entries.size());
  scratch_outcomes_.assign(s.entries.size(), ReadOutcome::kRead);
  uint64_t* out = scratch_.data();
  uint32_t* states = scratch_states_.data();
  ReadOutcome* outcome = scratch_outcomes_.data();
  const Segment& seg = s;
  return guarded(s.base, s.size, [&] {
    for (size_t j = 0; j < seg.entries.size(); ++j) {
      const Segment::Entry& e = seg.entries[j];
      states[j] = segment::load_acquire(&seg.record(e.record)->state);
      const uint64_t* line = seg.line(e.value_line);
      uint64_t* to = out + e.scratch;
      if (e.kind == SeriesKind::kAges) {
        for (uint32_t w = 0; w < segment::kAgeWords; ++w) to[w] = segment::load_relaxed(&line[w]);
        continue;
      }
      if (e.kind != SeriesKind::kHistogram) {
        *to = segment::load_relaxed(line);
        continue;
      }
      read_exemplars(seg, e.id, e.record, e.bound_count);
      outcome[j] = read_histogram(shape_of(seg, e), *in_.series.info(e.id), line,
                                  seg.last.data() + e.last, gone, to);
    }
  });
}

namespace {
// One slot's exemplar, read between two equal even seqs (the seqlock in
// segment_format.h); false when it has none or every read was torn.
bool read_exemplar(const segment::ExemplarSlot* slot, Exemplar& out) {
  for (int attempt = 0; attempt < kConsistentReadAttempts; ++attempt) {
    const uint64_t seq = segment::load_acquire(&slot->seq);
    if (seq == 0) return false;
    if ((seq & 1) != 0) continue;
    // Acquire loads (no fence: ThreadSanitizer has none): one that reads a
    // newer write's word makes the seq loaded after it that write's or later.
    const int64_t value = segment::load_acquire(&slot->value);
    const uint64_t ids[3] = {segment::load_acquire(&slot->trace_id[0]),
                             segment::load_acquire(&slot->trace_id[1]),
                             segment::load_acquire(&slot->span_id)};
    const int64_t unix_ns = segment::load_acquire(&slot->unix_ns);
    if (segment::load_relaxed(&slot->seq) != seq) continue;
    out.value = value;
    out.unix_ns = unix_ns;
    std::memcpy(out.trace.trace_id.data(), ids, 16);
    std::memcpy(out.trace.span_id.data(), ids + 2, 8);
    return true;
  }
  return false;
}
}  // namespace

// A live histogram's exemplars, each bucket's replacing the one kept when it
// is as new or newer (so the newest of all processes wins). One whose value
// is not in its bucket (a corrupt segment) or whose context is invalid is
// not taken.
void SegmentReading::read_exemplars(const Segment& s, uint32_t id, uint32_t record,
                                    uint32_t bound_count) {
  const uint32_t line = segment::load_acquire(&s.record(record)->exemplar_line);
  if (line == 0 || uint64_t{line} + bound_count + 1 > s.value_lines) return;
  const std::vector<int64_t>& bounds = in_.series.info(id)->bounds;
  if (bounds.size() != bound_count) return;
  std::vector<Exemplar>& kept = in_.values.exemplars(id);
  for (uint32_t b = 0; b <= bound_count; ++b) {
    Exemplar x;
    const auto* slot = reinterpret_cast<const segment::ExemplarSlot*>(s.line(line + b));
    if (!read_exemplar(slot, x) || x.unix_ns <= 0 || !x.trace.valid()) continue;
    if ((b < bound_count && x.value > bounds[b]) || (b > 0 && x.value <= bounds[b - 1])) continue;
    if (kept.empty()) kept.resize(bound_count + 1);
    if (x.unix_ns >= kept[b].unix_ns) kept[b] = x;
  }
}

// Folds the values last read from a segment into the totals (it was damaged,
// or its owner is gone and it can no longer be read).
void SegmentReading::fold_last(Segment& s) {
  const int64_t now = now_ns();
  for (const Segment::Entry& e : s.entries) {
    if (e.kind == SeriesKind::kGauge) continue;
    Accumulator& acc = in_.values.retired(e.id);
    acc.add_words(e.kind, s.last.data() + e.last, e.bound_count, e.native_words);
    acc.note_created(s.created_ns);
    acc.present = true;
    in_.series.last_change(e.id) = now;
  }
  std::fill(s.last.begin(), s.last.end(), 0);
  in_.totals_dirty = true;
}

void SegmentReading::damage(Segment& s, const std::string& why) {
  if (s.damaged) return;
  fold_last(s);
  s.damaged = true;
  ++in_.out.stats.damaged_segments_total;
  in_.out.problems.push_back("segment " + in_.dir + "/" + s.name + " of pid " +
                             std::to_string(s.pid) + " is damaged (" + why +
                             "): its last values are kept, it is not read again");
}

// A live ages record's callers in progress: word 0 and the slots in use;
// the oldest start is the smallest ticket.
void SegmentReading::add_in_progress(const Segment::Entry& e, const uint64_t* cur, Accumulator& acc,
                                     int64_t now) {
  int64_t n = static_cast<int64_t>(cur[0]);
  int64_t oldest = 0;
  for (uint32_t w = 1; w <= segment::kAgeSlots; ++w) {
    const auto t = static_cast<int64_t>(cur[w]);
    if (t == 0) continue;
    n = segment::wrapping_add(n, 1);
    if (t > 0 && (oldest == 0 || t < oldest)) oldest = t;
  }
  acc.gauge = segment::wrapping_add(acc.gauge, n);
  oldest = segment::ticket_start(oldest);
  if (oldest > 0 && (acc.oldest == 0 || oldest < acc.oldest)) acc.oldest = oldest;
  acc.present = true;
  acc.in_progress = true;
  in_.series.last_change(e.id) = now;
  in_.limits.note_value(e.id, n);
}

// A live gauge's value; a declared server's identity series names the
// segment's owner as that server (once a segment).
void SegmentReading::add_gauge(const Segment& s, const Segment::Entry& e, const uint64_t* cur,
                               Accumulator& acc, int64_t now, bool& declared) {
  acc.gauge = segment::wrapping_add(acc.gauge, static_cast<int64_t>(*cur));
  acc.present = true;
  in_.series.last_change(e.id) = now;
  in_.limits.note_value(e.id, static_cast<int64_t>(*cur));
  if (declared || !in_.series.identity(e.id)) return;
  DeclaredServer server;
  for (const auto& [k, v] : in_.series.info(e.id)->labels) {
    if (k == label::kServerName) server.name = v;
    if (k == label::kServerType) server.server_type = v;
  }
  server.pid = s.pid;
  server.start_ticks = s.start_ticks;
  server.pid_ns = s.pid_ns;
  in_.out.servers.push_back(std::move(server));
  declared = true;
}

// A counter's or histogram's words read now, `folded`, into `acc`. Below
// what was read before, it was reset: what was read before is folded into
// the totals first. `native_as_last`: a histogram's native words in
// `folded` were not read; those of `last` stand.
void SegmentReading::add_total(Segment& s, const Segment::Entry& e, const uint64_t* folded,
                               uint32_t words, bool native_as_last, Accumulator& acc,
                               bool into_retired, int64_t now) {
  uint64_t* last = s.last.data() + e.last;
  const bool histogram = e.kind == SeriesKind::kHistogram;
  // The counts read now: a counter's word; a histogram's buckets (not its
  // sum, which may wrap), classic only when its native ones stand.
  const uint32_t counts = !histogram ? words : native_as_last ? e.bound_count + 1u : words - 1;
  if (any_below(folded, last, counts)) {
    Accumulator& ret = in_.values.retired(e.id);
    ret.add_words(e.kind, last, e.bound_count, e.native_words);
    ret.note_created(s.created_ns);
    ret.present = true;
    ++in_.out.stats.counter_resets_total;
    in_.totals_dirty = true;
    in_.series.last_change(e.id) = now;
  }
  std::copy(folded, folded + counts, last);
  if (histogram) last[words - 1] = folded[words - 1];
  if (into_retired || !histogram)
    acc.add_words(e.kind, last, e.bound_count, e.native_words);
  else
    acc.add_live_histogram(last, words);
  acc.note_created(s.created_ns);
  acc.present = true;
  if (!into_retired) in_.series.last_change(e.id) = now;
}

// Reads a segment's values: counters and histograms (and gauges when
// `gauges`) into the live sums or, for a dead owner's segment (no
// gauges), the retired sums.
void SegmentReading::read_segment(Segment& s, bool gauges) {
  if (s.damaged) return;
  struct stat st {};
  if (::fstat(s.fd, &st) == 0) {
    in_.out.stats.registry_bytes += uint64_t(st.st_blocks) * 512;
    if (static_cast<uint64_t>(st.st_size) < s.size)
      return damage(s, "truncated to " + std::to_string(st.st_size) + " bytes");
  }
  uint32_t count = 0;
  if (!read_values(s, /*gone=*/!gauges, &count)) return damage(s, "a page faulted while reading");
  const int64_t now = now_ns();
  bool declared = false;
  for (size_t j = 0; j < s.entries.size(); ++j) {
    const Segment::Entry& e = s.entries[j];
    const uint32_t state = scratch_states_[j];
    const uint64_t* cur = scratch_.data() + e.scratch;
    const bool ages = e.kind == SeriesKind::kAges;
    // A released ages record keeps its count of beginnings (a counter); an
    // earlier build's writer zeroed it, which reads as a reset: folded then.
    if (ages && state != segment::kRecordLive && state != segment::kRecordInherited &&
        state != segment::kRecordReleased)
      continue;
    if (!ages && state != segment::kRecordLive) continue;
    if (e.kind == SeriesKind::kGauge) {  // a gauge is not folded: none made for it
      if (gauges) add_gauge(s, e, cur, in_.values.live(e.id), now, declared);
      continue;
    }
    Accumulator& acc = gauges ? in_.values.live(e.id) : in_.values.retired(e.id);
    if (ages && gauges && state == segment::kRecordLive) add_in_progress(e, cur, acc, now);
    uint64_t folded[segment::kMaxBounds + 2 + native::kWords];
    const ReadOutcome outcome = scratch_outcomes_[j];
    const bool native_as_last = outcome == ReadOutcome::kNativeAsLast;
    const uint32_t words = e.kind == SeriesKind::kHistogram
                               ? histogram_totals(shape_of(s, e), cur, native_as_last, folded)
                               : count_total(e.kind, cur, folded);
    // A histogram whose buckets could not be read at one moment (a writer
    // observing flat out) keeps its last values, which add up, this time.
    if (outcome == ReadOutcome::kInconsistent) {
      const uint64_t* last = s.last.data() + e.last;
      std::copy(last, last + words, folded);
      ++in_.out.stats.inconsistent_reads_total;
    }
    add_total(s, e, folded, words, native_as_last, acc, /*into_retired=*/!gauges, now);
  }
  if (gauges) in_.limits.close_segment();
}

}  // namespace gym::reader_internal
