// The registry reader's series: records validated and interned, segments
// retired and dropped, series expired.
#include "reader/core.h"

#include <cstring>

#include "reader/record_copies.h"

namespace gym::reader_internal {

namespace {

// A record's text in parts: the family name, then each label's name and value.
struct RecordText {
  std::string_view parts[1 + 2 * segment::kMaxLabels];
  size_t count = 0;
  std::string_view label_name(size_t i) const { return parts[1 + 2 * i]; }
  std::string_view label_value(size_t i) const { return parts[2 + 2 * i]; }
};

// The record's text after its family's NUL: "name\0value\0" a label.
std::string_view label_text(const Record& rec, const RecordText& text) {
  const size_t at = std::min<size_t>(text.parts[0].size() + 1, rec.text_bytes);
  return {rec.text + at, rec.text_bytes - at};
}

// Why a record's kind, counts, divisor and bounds are not a series', or
// nullptr.
const char* bad_shape(const Record& rec) {
  if (rec.kind < 1 || rec.kind > 4) return "unknown kind";
  const auto kind = static_cast<SeriesKind>(rec.kind);
  if (rec.label_count > segment::kMaxLabels) return "too many labels";
  if (rec.bound_count > segment::kMaxBounds ||
      (kind != SeriesKind::kHistogram && rec.bound_count != 0))
    return "bad bound count";
  if (rec.text_bytes > segment::kTextBytes) return "text too long";
  const uint32_t shards = kind == SeriesKind::kHistogram ? rec.shards : 1;
  if (kind == SeriesKind::kHistogram &&
      (shards == 0 || shards > segment::kMaxShards || (shards & (shards - 1)) != 0))
    return "bad shard count";
  if (!(rec.unit_divisor > 0) || !std::isfinite(rec.unit_divisor)) return "bad divisor";
  if (rec.native_words != 0 &&
      (kind != SeriesKind::kHistogram || rec.native_words != native::kWords))
    return "bad native bucket count";
  for (uint32_t i = 1; i < rec.bound_count; ++i)
    if (rec.bounds[i] <= rec.bounds[i - 1]) return "bounds not increasing";
  return nullptr;
}

// Why a record's text is not a family name and sorted labels, or nullptr;
// its parts into `text`.
const char* bad_text(const Record& rec, RecordText& text) {
  size_t start = 0;
  for (size_t i = 0; i < rec.text_bytes; ++i) {
    if (rec.text[i] != '\0') continue;
    if (text.count == std::size(text.parts)) return "malformed text";
    text.parts[text.count++] = std::string_view(rec.text + start, i - start);
    start = i + 1;
  }
  if (start != rec.text_bytes || text.count != 1 + 2 * size_t{rec.label_count})
    return "malformed text";
  if (!detail::valid_metric_name(text.parts[0])) return "bad family name";
  for (size_t i = 0; i < rec.label_count; ++i) {
    const std::string_view name = text.label_name(i), value = text.label_value(i);
    if (!detail::valid_label_name(name)) return "bad label name";
    if (i > 0 && !(text.label_name(i - 1) < name)) return "labels not sorted";
    if (value.size() > segment::kMaxValueBytes) return "label value too long";
    if (!detail::valid_utf8(value)) return "label value is not valid UTF-8";
  }
  return nullptr;
}

std::unique_ptr<SeriesInfo> series_info(const Record& rec, const RecordText& text) {
  auto info = std::make_unique<SeriesInfo>();
  info->kind = static_cast<SeriesKind>(rec.kind);
  info->family = text.parts[0];  // the record's copy: the table keeps it (add)
  info->labels = SeriesLabels::from_text(label_text(rec, text), rec.label_count);
  info->bounds.assign(rec.bounds, rec.bounds + rec.bound_count);
  info->unit_divisor = rec.unit_divisor;
  info->native_words = rec.native_words;
  return info;
}

}  // namespace

// The series id of a record's metadata (a copy, never shared memory),
// interning it the first time; kInvalid with why, or kOverLimit.
int32_t SegmentReading::intern(const Record& rec, std::string* why) {
  RecordText text;
  const char* bad = bad_shape(rec);
  if (bad == nullptr) bad = bad_text(rec, text);
  if (bad != nullptr) {
    *why = bad;
    return kInvalid;
  }
  const uint64_t hash = identity_hash(rec, in_.series.seed());
  const auto same = [&](const SeriesInfo& info) { return same_identity(info, rec); };
  if (std::optional<uint32_t> id = in_.series.find(hash, same)) return static_cast<int32_t>(*id);
  std::unique_ptr<SeriesInfo> info = series_info(rec, text);
  if (!in_.series.fits_its_family(*info)) {
    *why = "conflicts with the kind or buckets of its family";
    return kInvalid;
  }
  if (in_.series.live() >= in_.options.max_series) return kOverLimit;
  const uint32_t id = in_.series.add(hash, std::move(info), now_ns());
  in_.values.made(id);
  in_.limits.note_part(id, text.parts[0], label_text(rec, text));
  return static_cast<int32_t>(id);
}

// Examines records [s.parsed, count): copies them out (record_copies.h),
// validates each once, and notes where its values are.
void SegmentReading::parse_new_records(Segment& s, uint32_t count) {
  uint32_t invalid = 0;
  std::string first_problem;
  const reader_internal::RecordCopies copies(
      {s.fd, s.records_offset, s.strings_offset, s.string_bytes}, s.parsed, count,
      scratch_strings_);
  for (uint32_t i = s.parsed; i < count; ++i) {
    Record rec;
    std::string why;
    int32_t id = kInvalid;
    const char* bad_text = nullptr;
    if (!copies.head(i, rec)) {
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
      } else if ((bad_text = copies.text(i, rec)) != nullptr) {
        why = bad_text;
      } else {
        id = intern(rec, &why);
      }
    }
    if (id == kOverLimit) {
      ++in_.out.stats.series_over_limit_total;
      if (!over_limit_reported_)
        in_.out.problems.push_back("registry.max_series (" +
                                   std::to_string(in_.options.max_series) +
                                   ") reached: further series are not tracked");
      over_limit_reported_ = true;
      continue;
    }
    if (id < 0) {
      ++in_.out.stats.invalid_records_total;
      if (invalid++ == 0)
        first_problem =
            "skipped record " + std::to_string(i) + " of " + in_.dir + "/" + s.name + ": " + why;
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
    s.scratch_words +=
        e.kind == SeriesKind::kHistogram
            ? HistogramShape{s.version, e.shards, e.bound_count, e.native_words}.copied_words()
        : e.kind == SeriesKind::kAges ? segment::kAgeWords
                                      : 1u;
    if (e.kind == SeriesKind::kCounter || e.kind == SeriesKind::kAges) s.last.push_back(0);
    if (e.kind == SeriesKind::kHistogram) s.last.resize(s.last.size() + hist_words, 0);
    ++in_.series.refs(e.id);
    s.entries.push_back(e);
  }
  s.parsed = std::max(s.parsed, count);
  if (invalid > 0) in_.out.problems.push_back(first_problem);
  if (invalid > 1)
    in_.out.problems.push_back("skipped " + std::to_string(invalid - 1) +
                               " more invalid records of " + in_.dir + "/" + s.name);
}

void SegmentReading::series_expired() {
  over_limit_reported_ = false;
}

// The owner is gone: keep its counters and histograms in the totals, drop
// the rest. The retiring reader removes its file once the totals that hold
// it are written; a read-only reader leaves it.
void ReaderCore::retire(Segment& s) {
  if (!s.damaged) {
    reading_.read_segment(s, /*gauges=*/false);
    if (!s.damaged) {
      const int64_t now = options_.mode == ReaderOptions::Mode::kFold ? kNotYetServed : now_ns();
      for (const Segment::Entry& e : s.entries)
        if (e.kind != SeriesKind::kGauge) series_.last_change(e.id) = now;
    }
  }
  retired_dropped_ = sat_add(retired_dropped_, s.dropped);
  if (!retiring()) {
    // Read only: skipped while its file stays (list_directory).
    segments_.fold(s.name, s.ino);
    return;
  }
  ++snapshot_.stats.retired_segments_total;
  totals_dirty_ = true;
  struct stat st {};
  if (::fstatat(dir_fd_, s.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino == s.ino)
    segments_.fold(s.name, s.ino);
}

// A segment's records no longer name their series.
void ReaderCore::let_go(const Segment& s) {
  for (const Segment::Entry& e : s.entries) --series_.refs(e.id);
}

// Forgets an open segment (and its records' references to series); returns
// the next one.
SegmentSet::Map::iterator ReaderCore::drop_segment(SegmentSet::Map::iterator it) {
  let_go(*it->second);
  return segments_.erase(it);
}

// Forgets series that no open segment names and that have not changed for
// the TTL.
void ReaderCore::expire_series(int64_t now) {
  const int64_t ttl_ns = int64_t{options_.retired_series_ttl.count()} * 1000000;
  for (uint32_t id = 0; id < series_.size(); ++id) {
    if (!series_.info(id) || series_.refs(id) != 0 || values_.live(id).present) continue;
    if (now - series_.last_change(id) <= ttl_ns) continue;
    series_.forget(id);
    limits_.forget(id);
    values_.forget(id);
    ++snapshot_.stats.expired_series_total;
    totals_dirty_ = true;
  }
  if (series_.live() < options_.max_series) reading_.series_expired();
}

}  // namespace gym::reader_internal
