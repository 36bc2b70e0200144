// The registry reader's series: records, interning, values, folding, damage.
#include "registry_reader_internal.h"

#include <cstring>

namespace gym {

// The series id of a record's metadata (a copy, never shared memory),
// interning it the first time; kInvalid with why, or kOverLimit.
int32_t RegistryReader::intern(const Record& rec, std::string* why) {
  auto invalid = [&](const char* what) {
    *why = what;
    return kInvalid;
  };
  if (rec.kind < 1 || rec.kind > 4) return invalid("unknown kind");
  const auto kind = static_cast<SeriesKind>(rec.kind);
  if (rec.label_count > segment::kMaxLabels) return invalid("too many labels");
  if (rec.bound_count > segment::kMaxBounds ||
      (kind != SeriesKind::kHistogram && rec.bound_count != 0))
    return invalid("bad bound count");
  if (rec.text_bytes > segment::kTextBytes) return invalid("text too long");
  const uint32_t shards = kind == SeriesKind::kHistogram ? rec.shards : 1;
  if (kind == SeriesKind::kHistogram &&
      (shards == 0 || shards > segment::kMaxShards || (shards & (shards - 1)) != 0))
    return invalid("bad shard count");
  if (!(rec.unit_divisor > 0) || !std::isfinite(rec.unit_divisor)) return invalid("bad divisor");
  if (rec.native_words != 0 &&
      (kind != SeriesKind::kHistogram || rec.native_words != native::kWords))
    return invalid("bad native bucket count");
  for (uint32_t i = 1; i < rec.bound_count; ++i)
    if (rec.bounds[i] <= rec.bounds[i - 1]) return invalid("bounds not increasing");

  std::string_view parts[1 + 2 * segment::kMaxLabels];
  size_t nparts = 0;
  size_t start = 0;
  for (size_t i = 0; i < rec.text_bytes; ++i) {
    if (rec.text[i] != '\0') continue;
    if (nparts == std::size(parts)) return invalid("malformed text");
    parts[nparts++] = std::string_view(rec.text + start, i - start);
    start = i + 1;
  }
  if (start != rec.text_bytes || nparts != 1 + 2 * size_t{rec.label_count})
    return invalid("malformed text");
  if (!detail::valid_metric_name(parts[0])) return invalid("bad family name");
  for (size_t i = 0; i < rec.label_count; ++i) {
    std::string_view name = parts[1 + 2 * i];
    std::string_view value = parts[2 + 2 * i];
    if (!detail::valid_label_name(name)) return invalid("bad label name");
    if (i > 0 && !(parts[2 * i - 1] < name)) return invalid("labels not sorted");
    if (value.size() > segment::kMaxValueBytes) return invalid("label value too long");
    if (!detail::valid_utf8(value)) return invalid("label value is not valid UTF-8");
  }

  std::string key;
  key.push_back(static_cast<char>(kind));
  key.append(rec.text, rec.text_bytes);
  key.append(reinterpret_cast<const char*>(rec.bounds), sizeof(int64_t) * rec.bound_count);
  key.append(reinterpret_cast<const char*>(&rec.unit_divisor), sizeof rec.unit_divisor);
  key.append(reinterpret_cast<const char*>(&rec.native_words), sizeof rec.native_words);
  auto it = series_ids_.find(key);
  if (it != series_ids_.end()) return static_cast<int32_t>(it->second);

  std::vector<int64_t> bounds(rec.bounds, rec.bounds + rec.bound_count);
  std::string family(parts[0]);
  auto fam = families_.find(family);
  if (fam != families_.end() && (fam->second.kind != kind || fam->second.bounds != bounds ||
                                 fam->second.unit_divisor != rec.unit_divisor ||
                                 fam->second.native_words != rec.native_words))
    return invalid("conflicts with the kind or buckets of its family");
  if (live_series_ >= options_.max_series) return kOverLimit;
  if (fam == families_.end())
    families_.emplace(family, FamilyShape{kind, bounds, rec.unit_divisor, rec.native_words});
  auto info = std::make_unique<SeriesInfo>();
  info->kind = kind;
  info->family = std::move(family);
  for (size_t i = 0; i < rec.label_count; ++i)
    info->labels.emplace_back(std::string(parts[1 + 2 * i]), std::string(parts[2 + 2 * i]));
  info->bounds = std::move(bounds);
  info->unit_divisor = rec.unit_divisor;
  info->native_words = rec.native_words;
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
    infos_[id] = std::move(info);
  } else {
    id = static_cast<uint32_t>(infos_.size());
    infos_.push_back(std::move(info));
    keys_.push_back(nullptr);
    refs_.push_back(0);
    last_change_.push_back(0);
    retired_.emplace_back();
    current_.emplace_back();
  }
  refs_[id] = 0;
  last_change_[id] = now_ns();
  retired_[id] = Accumulator{};
  ++live_series_;
  keys_[id] = &series_ids_.emplace(std::move(key), id).first->first;
  const size_t labels_at = std::min<size_t>(parts[0].size() + 1, rec.text_bytes);
  note_limit_part(id, infos_[id]->family,
                  std::string_view(rec.text + labels_at, rec.text_bytes - labels_at));
  order_dirty_ = true;
  return static_cast<int32_t>(id);
}

// Examines records [s.parsed, count): copies each out with pread (a hole or
// a truncated file reads as zeros or short, never faults), validates it once,
// and notes where its values are.
void RegistryReader::parse_new_records(Segment& s, uint32_t count) {
  uint32_t invalid = 0;
  std::string first_problem;
  for (uint32_t i = s.parsed; i < count; ++i) {
    Record rec;
    const off_t at = static_cast<off_t>(s.records_offset + uint64_t{i} * segment::kRecordBytes);
    std::string why;
    int32_t id = kInvalid;
    if (::pread(s.fd, &rec, sizeof rec, at) != static_cast<ssize_t>(sizeof rec)) {
      why = "unreadable";
    } else if (rec.state == segment::kRecordEmpty) {
      why = "counted but never published";
    } else {
      const uint32_t shards = rec.kind == uint8_t(SeriesKind::kHistogram) ? rec.shards : 1;
      const uint32_t lines =
          rec.bound_count <= segment::kMaxBounds
              ? segment::value_lines_for(static_cast<SeriesKind>(rec.kind), rec.bound_count, shards,
                                         rec.native_words, s.version)
              : 0;
      if (uint64_t{rec.value_line} + lines > s.value_lines) {
        why = "value out of range";
      } else {
        id = intern(rec, &why);
      }
    }
    if (id == kOverLimit) {
      ++snapshot_.stats.series_over_limit_total;
      if (!over_limit_reported_)
        snapshot_.problems.push_back("registry.max_series (" + std::to_string(options_.max_series) +
                                     ") reached: further series are not tracked");
      over_limit_reported_ = true;
      continue;
    }
    if (id < 0) {
      ++snapshot_.stats.invalid_records_total;
      if (invalid++ == 0)
        first_problem =
            "skipped record " + std::to_string(i) + " of " + dir_ + "/" + s.name + ": " + why;
      continue;
    }
    Segment::Entry e{};
    e.record = i;
    e.id = static_cast<uint32_t>(id);
    e.value_line = rec.value_line;
    e.kind = static_cast<SeriesKind>(rec.kind);
    e.shards = e.kind == SeriesKind::kHistogram ? rec.shards : 1;
    e.bound_count = rec.bound_count;
    e.native_words = rec.native_words;
    e.scratch = s.scratch_words;
    e.last = static_cast<uint32_t>(s.last.size());
    const uint32_t hist_words = segment::shard_words(e.bound_count, e.native_words);
    // Copied out: every shard's words, as the segment has them (version 4:
    // each with native words; 5: the buckets and sum, then one native array).
    const uint32_t copied = s.version >= segment::kSharedNativeVersion
                                ? e.shards * (e.bound_count + 2u) + e.native_words
                                : e.shards * hist_words;
    s.scratch_words += e.kind == SeriesKind::kHistogram ? copied
                       : e.kind == SeriesKind::kAges    ? segment::kAgeWords
                                                        : 1u;
    if (e.kind == SeriesKind::kCounter || e.kind == SeriesKind::kAges) s.last.push_back(0);
    if (e.kind == SeriesKind::kHistogram) s.last.resize(s.last.size() + hist_words, 0);
    ++refs_[e.id];
    s.entries.push_back(e);
  }
  s.parsed = std::max(s.parsed, count);
  if (invalid > 0) snapshot_.problems.push_back(first_problem);
  if (invalid > 1)
    snapshot_.problems.push_back("skipped " + std::to_string(invalid - 1) +
                                 " more invalid records of " + dir_ + "/" + s.name);
}

namespace {
// A version 5 histogram's values into `to`: each shard's buckets and sum
// (bound_count + 2 words), then the native array. Both kinds of bucket of
// one moment: the native words first (acquire), then the classic ones. A
// writer adds the classic bucket before the native one (released), so the
// classic total is never below the native one; they agree unless an
// observation was in flight, and then the histogram is read again. False
// when they never agreed. A histogram with no classic observation has its
// native counts taken as zero, not read (many outcomes never happen; a
// classic count never falls back to zero, so native counts never fall).
bool read_shared_native(uint32_t shards, uint32_t bound_count, uint32_t native_words,
                        const uint64_t* line, uint64_t* to) {
  const uint32_t classic = bound_count + 1u;
  const uint32_t stride = segment::shard_lines(bound_count, native_words) * segment::kLineBytes / 8;
  const uint64_t* native = line + shards * stride;
  uint64_t* native_to = to + shards * (classic + 1u);
  auto read_classic = [&] {
    uint64_t total = 0;
    for (uint32_t k = 0; k < shards; ++k) {
      const uint64_t* shard = line + k * stride;
      uint64_t* out = to + k * (classic + 1u);
      for (uint32_t w = 0; w < classic; ++w) total += (out[w] = segment::load_relaxed(&shard[w]));
      out[classic] = segment::load_relaxed(&shard[classic]);  // the sum
    }
    return total;
  };
  if (native_words == 0) {
    read_classic();
    return true;
  }
  bool agree = false;
  for (int attempt = 0; attempt < kConsistentReadAttempts && !agree; ++attempt) {
    uint64_t native_total = 0;
    for (uint32_t w = 0; w < native_words; ++w)
      native_total += (native_to[w] = segment::load_acquire(&native[w]));
    const uint64_t classic_total = read_classic();
    if (classic_total == 0) {
      std::fill(native_to, native_to + native_words, uint64_t{0});
      return true;
    }
    agree = native_total == classic_total;
  }
  return agree;
}

}  // namespace

// Copies the segment's header counts, states and values out of shared memory
// into scratch_ with aligned atomic loads (untorn), under the SIGBUS guard.
// False when the mapping faulted (the file lost pages under us).
bool RegistryReader::read_values(Segment& s, uint32_t* count) {
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
  scratch_inconsistent_.assign(s.entries.size(), 0);
  uint64_t* out = scratch_.data();
  uint32_t* states = scratch_states_.data();
  char* inconsistent = scratch_inconsistent_.data();
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
      if (seg.version >= segment::kExemplarVersion)
        read_exemplars(seg, e.id, e.record, e.bound_count);
      if (seg.version >= segment::kSharedNativeVersion) {
        if (!read_shared_native(e.shards, e.bound_count, e.native_words, line, to))
          inconsistent[j] = 1;
        continue;
      }
      const uint32_t words = segment::shard_words(e.bound_count, e.native_words);
      const uint32_t stride = segment::shard_lines(e.bound_count, e.native_words, seg.version) *
                              segment::kLineBytes / 8;
      const uint32_t classic = e.bound_count + 1u;
      for (uint32_t k = 0; k < e.shards; ++k, line += stride) {
        uint64_t observed = 0;
        for (uint32_t w = 0; w < classic; ++w)
          observed |= (to[w] = segment::load_relaxed(&line[w]));
        // A shard with no observation in its classic buckets (most: threads
        // use one or two shards, and many outcomes never happen) has its
        // native counts taken as zero, not copied. One that shows later is
        // read from then on, and a classic count never falls back to zero,
        // so native counts never fall either.
        if (e.native_words != 0 && observed == 0) {
          std::fill(to + classic, to + words - 1, uint64_t{0});
        } else if (e.native_words != 0) {
          // Both kinds of bucket of one moment: the native words first
          // (acquire), then the classic ones. A writer adds the classic
          // bucket before the native one (released), so the classic total
          // is never below the native one; they agree unless an
          // observation was in flight, and then the shard is read again.
          bool agree = false;
          for (int attempt = 0; attempt < kConsistentReadAttempts && !agree; ++attempt) {
            uint64_t native_total = 0;
            for (uint32_t w = classic; w + 1 < words; ++w)
              native_total += (to[w] = segment::load_acquire(&line[w]));
            uint64_t classic_total = 0;
            for (uint32_t w = 0; w < classic; ++w)
              classic_total += (to[w] = segment::load_relaxed(&line[w]));
            agree = native_total == classic_total;
          }
          if (!agree) inconsistent[j] = 1;
        }
        to[words - 1] = segment::load_relaxed(&line[words - 1]);  // the sum
        to += words;
      }
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
void RegistryReader::read_exemplars(const Segment& s, uint32_t id, uint32_t record,
                                    uint32_t bound_count) {
  const uint32_t line = segment::load_acquire(&s.record(record)->exemplar_line);
  if (line == 0 || uint64_t{line} + bound_count + 1 > s.value_lines) return;
  const std::vector<int64_t>& bounds = infos_[id]->bounds;
  if (bounds.size() != bound_count) return;
  if (exemplars_.size() <= id) exemplars_.resize(id + 1);
  std::vector<Exemplar>& kept = exemplars_[id];
  for (uint32_t b = 0; b <= bound_count; ++b) {
    Exemplar x;
    const auto* slot = reinterpret_cast<const segment::ExemplarSlot*>(s.line(line + b));
    if (!read_exemplar(slot, x) || x.unix_ns <= 0 || !x.trace.valid()) continue;
    if ((b < bound_count && x.value > bounds[b]) || (b > 0 && x.value <= bounds[b - 1])) continue;
    if (kept.empty()) kept.resize(bound_count + 1);
    if (x.unix_ns >= kept[b].unix_ns) kept[b] = x;
  }
}

namespace {
// Adds a counter's or histogram's words (counter: 1; histogram: buckets and
// native buckets, then the sum) into an accumulator.
void add_words(std::vector<uint64_t>& buckets, uint64_t& counter, int64_t& sum, SeriesKind kind,
               const uint64_t* words, uint32_t bound_count, uint32_t native_words) {
  if (kind != SeriesKind::kHistogram) {  // a counter, or an ages record's count of beginnings
    counter = sat_add(counter, words[0]);
    return;
  }
  const size_t n = segment::shard_words(bound_count, native_words) - 1;
  if (buckets.size() != n) buckets.assign(n, 0);
  sat_add_words(buckets.data(), words, n);
  sum = segment::wrapping_add(sum, static_cast<int64_t>(words[n]));
}

// A live histogram's words (buckets, native buckets, sum; `words` in all)
// from one segment into its accumulator: viewed where they are (the
// segment's `last`, unchanged until the next snapshot) when they are the
// first this snapshot, added into the accumulator's own buckets from the
// second on.
}  // namespace

void RegistryReader::add_live_histogram(Accumulator& acc, const uint64_t* last, uint32_t words) {
  const uint32_t n = words - 1;
  if (acc.added++ == 0) {
    acc.view = last;
    acc.sum = static_cast<int64_t>(last[n]);
    return;
  }
  if (acc.view != nullptr) {  // the second: the first's words become its own
    acc.buckets.assign(acc.view, acc.view + n);
    acc.view = nullptr;
  }
  sat_add_words(acc.buckets.data(), last, n);
  acc.sum = segment::wrapping_add(acc.sum, static_cast<int64_t>(last[n]));
}

// Folds the values last read from a segment into the totals (it was damaged,
// or its owner is gone and it can no longer be read).
void RegistryReader::fold_last(Segment& s) {
  const int64_t now = now_ns();
  for (const Segment::Entry& e : s.entries) {
    if (e.kind == SeriesKind::kGauge) continue;
    Accumulator& acc = retired_[e.id];
    add_words(acc.buckets, acc.counter, acc.sum, e.kind, s.last.data() + e.last, e.bound_count,
              e.native_words);
    acc.note_created(s.created_ns);
    acc.present = true;
    last_change_[e.id] = now;
  }
  std::fill(s.last.begin(), s.last.end(), 0);
  totals_dirty_ = true;
}

void RegistryReader::damage(Segment& s, const std::string& why) {
  if (s.damaged) return;
  fold_last(s);
  s.damaged = true;
  ++snapshot_.stats.damaged_segments_total;
  snapshot_.problems.push_back("segment " + dir_ + "/" + s.name + " of pid " +
                               std::to_string(s.pid) + " is damaged (" + why +
                               "): its last values are kept, it is not read again");
}

// Reads a segment's values: counters and histograms (and gauges when
// `gauges`) into current_ (live) or, for a dead owner's segment (no
// gauges), retired_. A
// counter or histogram below what was read before is a reset: what was read
// before is folded into the totals first.
void RegistryReader::read_segment(Segment& s, bool gauges) {
  if (s.damaged) return;
  struct stat st {};
  if (::fstat(s.fd, &st) == 0) {
    snapshot_.stats.registry_bytes += uint64_t(st.st_blocks) * 512;
    if (static_cast<uint64_t>(st.st_size) < s.size)
      return damage(s, "truncated to " + std::to_string(st.st_size) + " bytes");
  }
  uint32_t count = 0;
  if (!read_values(s, &count)) return damage(s, "a page faulted while reading");
  const int64_t now = now_ns();
  const bool into_retired = !gauges;
  bool declared = false;
  for (size_t j = 0; j < s.entries.size(); ++j) {
    const Segment::Entry& e = s.entries[j];
    const uint32_t state = scratch_states_[j];
    const uint64_t* cur = scratch_.data() + e.scratch;
    uint64_t ages_begun = 0;
    if (e.kind == SeriesKind::kAges) {
      if (state != segment::kRecordLive && state != segment::kRecordInherited) {
        // Released: its count of beginnings (a counter) goes to the totals.
        uint64_t* last = s.last.data() + e.last;
        if (*last != 0) {
          Accumulator& ret = retired_[e.id];
          ret.counter = sat_add(ret.counter, *last);
          ret.note_created(s.created_ns);
          ret.present = true;
          *last = 0;
          totals_dirty_ = true;
          last_change_[e.id] = now;
        }
        continue;
      }
      Accumulator& acc = into_retired ? retired_[e.id] : current_[e.id];
      if (gauges && state == segment::kRecordLive) {
        // In progress: word 0 and the slots in use; the oldest start is the
        // smallest ticket.
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
        last_change_[e.id] = now;
        note_limit_value(e.id, n);
      }
      // Begun: the sum of the lanes, read on as a counter.
      for (uint32_t l = 0; l < segment::kAgeLanes; ++l)
        ages_begun = sat_add(ages_begun, cur[segment::kAgeFirstLane + l]);
    } else if (state != segment::kRecordLive) {
      continue;
    }
    Accumulator& acc = into_retired ? retired_[e.id] : current_[e.id];
    if (e.kind == SeriesKind::kGauge) {
      if (!gauges) continue;
      acc.gauge = segment::wrapping_add(acc.gauge, static_cast<int64_t>(*cur));
      acc.present = true;
      last_change_[e.id] = now;
      note_limit_value(e.id, static_cast<int64_t>(*cur));
      const SeriesInfo& info = *infos_[e.id];
      if (!declared && info.family == family::kServerIdentity) {
        DeclaredServer server;
        for (const auto& [k, v] : info.labels) {
          if (k == label::kServerName) server.name = v;
          if (k == label::kServerType) server.server_type = v;
        }
        if (!server.name.empty()) {
          server.pid = s.pid;
          server.start_ticks = s.start_ticks;
          server.pid_ns = s.pid_ns;
          snapshot_.servers.push_back(std::move(server));
          declared = true;
        }
      }
      continue;
    }
    uint64_t* last = s.last.data() + e.last;
    uint64_t folded[segment::kMaxBounds + 2 + native::kWords];
    uint32_t words = 1;
    if (e.kind == SeriesKind::kCounter) {
      folded[0] = cur[0];
    } else if (e.kind == SeriesKind::kAges) {
      folded[0] = ages_begun;
    } else {
      // The shards' buckets and sums added up.
      words = segment::shard_words(e.bound_count, e.native_words);
      if (s.version >= segment::kSharedNativeVersion) {
        // Shards of buckets and sum, then the native array: into the buckets,
        // the native buckets, the sum.
        const uint32_t classic = e.bound_count + 1u;
        std::copy(cur, cur + classic, folded);
        folded[words - 1] = cur[classic];
        for (uint32_t k = 1; k < e.shards; ++k) {
          const uint64_t* shard = cur + k * (classic + 1u);
          sat_add_words(folded, shard, classic);
          folded[words - 1] += shard[classic];  // the sum wraps, as writers' adds do
        }
        const uint64_t* native = cur + e.shards * (classic + 1u);
        std::copy(native, native + e.native_words, folded + classic);
      } else {
        std::copy(cur, cur + words, folded);
        for (uint32_t k = 1; k < e.shards; ++k) {
          const uint64_t* shard = cur + k * words;
          sat_add_words(folded, shard, words - 1);
          folded[words - 1] += shard[words - 1];  // the sum wraps, as writers' adds do
        }
      }
    }
    // A histogram whose buckets could not be read at one moment (a writer
    // observing flat out) keeps its last values, which add up, this time.
    if (scratch_inconsistent_[j]) {
      std::copy(last, last + words, folded);
      ++snapshot_.stats.inconsistent_reads_total;
    }
    if (any_below(folded, last, e.kind == SeriesKind::kHistogram ? words - 1 : words)) {
      Accumulator& ret = retired_[e.id];
      add_words(ret.buckets, ret.counter, ret.sum, e.kind, last, e.bound_count, e.native_words);
      ret.note_created(s.created_ns);
      ret.present = true;
      ++snapshot_.stats.counter_resets_total;
      totals_dirty_ = true;
      last_change_[e.id] = now;
    }
    std::copy(folded, folded + words, last);
    if (into_retired || e.kind != SeriesKind::kHistogram)
      add_words(acc.buckets, acc.counter, acc.sum, e.kind, folded, e.bound_count, e.native_words);
    else
      add_live_histogram(acc, last, words);
    acc.note_created(s.created_ns);
    acc.present = true;
    if (!into_retired) last_change_[e.id] = now;
  }
  if (gauges) close_segment_limits();
}

// The owner is gone: keep its counters and histograms in the totals, drop
// the rest. The retiring reader removes its file once the totals that hold
// it are written; a read-only reader leaves it.
void RegistryReader::retire(Segment& s) {
  if (!s.damaged) {
    read_segment(s, /*gauges=*/false);
    if (!s.damaged) {
      const int64_t now = now_ns();
      for (const Segment::Entry& e : s.entries)
        if (e.kind != SeriesKind::kGauge) last_change_[e.id] = now;
    }
  }
  retired_dropped_ = sat_add(retired_dropped_, s.dropped);
  if (!retiring()) {
    // Read only: skipped while its file stays (list_directory).
    folded_pending_[s.name] = s.ino;
    return;
  }
  ++snapshot_.stats.retired_segments_total;
  totals_dirty_ = true;
  struct stat st {};
  if (::fstatat(dir_fd_, s.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino == s.ino)
    folded_pending_[s.name] = s.ino;
}

// Forgets an open segment (and its records' references to series); returns
// the next one.
RegistryReader::SegmentMap::iterator RegistryReader::drop_segment(SegmentMap::iterator it) {
  for (const Segment::Entry& e : it->second->entries) --refs_[e.id];
  return segments_.erase(it);
}

// Forgets series that no open segment names and that have not changed for
// the TTL.
void RegistryReader::expire_series(int64_t now) {
  const int64_t ttl_ns = int64_t{options_.retired_series_ttl.count()} * 1000000;
  for (uint32_t id = 0; id < infos_.size(); ++id) {
    if (!infos_[id] || refs_[id] != 0 || current_[id].present) continue;
    if (now - last_change_[id] <= ttl_ns) continue;
    series_ids_.erase(series_ids_.find(*keys_[id]));
    keys_[id] = nullptr;
    infos_[id].reset();
    if (id < limit_part_.size()) limit_part_[id] = 0;
    retired_[id] = Accumulator{};
    if (id < exemplars_.size()) exemplars_[id].clear();
    free_ids_.push_back(id);
    --live_series_;
    ++snapshot_.stats.expired_series_total;
    order_dirty_ = true;
    totals_dirty_ = true;
  }
  if (live_series_ < options_.max_series) over_limit_reported_ = false;
}

}  // namespace gym
