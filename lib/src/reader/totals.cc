// The registry reader's folded totals: loading and persisting them.
#include "reader/core.h"

namespace gym::reader_internal {

namespace {
// A folded series as the record a writer would have written for it.
Record record_of(const detail::TotalsSeries& s) {
  Record rec{};
  rec.state = segment::kRecordLive;
  rec.kind = s.kind;
  rec.bound_count = static_cast<uint8_t>(s.bounds.size());
  rec.shards = s.kind == static_cast<uint8_t>(SeriesKind::kHistogram)
                   ? uint8_t{segment::kHistogramShards}
                   : uint8_t{1};
  rec.unit_divisor = s.unit_divisor;
  rec.native_words = s.native_words;
  std::copy(s.bounds.begin(), s.bounds.end(), rec.bounds);
  rec.text_bytes = static_cast<uint16_t>(s.text.size());
  std::memcpy(rec.text, s.text.data(), s.text.size());
  size_t nul = 0;
  for (char c : s.text) nul += c == '\0';
  rec.label_count = static_cast<uint8_t>(nul > 0 ? (nul - 1) / 2 : 0);
  return rec;
}
}  // namespace

void ReaderCore::load_totals(bool adopt_folded) {
  std::string why;
  detail::Totals t;
  const TotalsFile::Read read = totals_file_.read(dir_fd_, trust_, t, why);
  if (read == TotalsFile::Read::kCannotOpen) segments_.read_error(kTotalsFile, 0, "cannot open");
  if (read == TotalsFile::Read::kAbsent || read == TotalsFile::Read::kCannotOpen) return;
  if (read == TotalsFile::Read::kRefused) {
    ++snapshot_.stats.rejected_files_total;
    snapshot_.problems.push_back("ignored folded totals in " + dir_ + "/" + kTotalsFile + ": " +
                                 why + "; counters of exited writers start from zero");
    return;
  }
  retired_dropped_ = t.dropped_series;
  bool served_now = false;  // series folded by writers, served from now on
  for (const detail::TotalsSeries& s : t.series) {
    std::string bad;
    const Record rec = record_of(s);
    const int32_t id = reading_.intern(rec, &bad);
    if (id == kOverLimit) ++snapshot_.stats.series_over_limit_total;
    if (id < 0) continue;
    Accumulator& acc = values_.retired(uint32_t(id));
    acc.present = true;
    acc.counter = sat_add(acc.counter, s.counter);
    acc.sum = segment::wrapping_add(acc.sum, s.sum);
    if (rec.kind == static_cast<uint8_t>(SeriesKind::kHistogram) &&
        s.buckets.size() == s.bounds.size() + 1 + s.native_words) {
      acc.buckets.resize(s.buckets.size());
      for (size_t b = 0; b < s.buckets.size(); ++b)
        acc.buckets[b] = sat_add(acc.buckets[b], s.buckets[b]);
    }
    acc.note_created(s.created_ns);
    const bool first_served =
        options_.mode != ReaderOptions::Mode::kFold && s.last_change_ns == kNotYetServed;
    series_.last_change(uint32_t(id)) = first_served ? now_ns() : s.last_change_ns;
    served_now = served_now || first_served;
  }
  // The segments the totals say are folded: the holder's own (folded before
  // its last writer stopped, not yet removed: kept until written again), or,
  // read only, the holder's, skipped while their files stay.
  if (adopt_folded) {
    segments_.adopt_existing(t.folded, dir_fd_);
    totals_dirty_ = segments_.any_folded();
  } else {
    segments_.adopt_holders(t.folded);
  }
  // The holder writes when their TTL began, so that a restart keeps it.
  if (adopt_folded && served_now) totals_dirty_ = true;
}

void ReaderCore::persist_totals() {
  detail::Totals t;
  detail::read_boot_id(t.boot_id.data());
  t.dropped_series = retired_dropped_;
  t.folded = segments_.folded_names();
  for (size_t id = 0; id < series_.size(); ++id) {
    const Accumulator& acc = values_.retired_or_none(uint32_t(id));
    if (!series_.info(id) || !acc.present) continue;
    const SeriesInfo& info = *series_.info(id);
    detail::TotalsSeries s;
    s.kind = static_cast<uint8_t>(info.kind);
    s.unit_divisor = info.unit_divisor;
    s.bounds = info.bounds;
    s.native_words = info.native_words;
    s.text = info.family;
    s.text.push_back('\0');
    s.text.append(info.labels.text());  // "name\0value\0" a label
    s.last_change_ns = series_.last_change(id);
    s.counter = acc.counter;
    s.sum = acc.sum;
    s.buckets = acc.buckets;
    s.created_ns = acc.created_unknown ? 0 : acc.created_ns;
    t.series.push_back(std::move(s));
  }
  if (!totals_file_.write(dir_fd_, t)) {
    const int err = errno;
    ++snapshot_.stats.totals_write_errors_total;
    if (!totals_error_reported_)
      snapshot_.problems.push_back("cannot write folded totals to " + dir_ + "/" + kTotalsFile +
                                   ": " + std::strerror(err) +
                                   "; exited writers' segments are kept until it can");
    totals_error_reported_ = true;
    return;
  }
  totals_error_reported_ = false;
  totals_dirty_ = false;
  segments_.remove_folded(dir_fd_);  // the totals hold them now
}

}  // namespace gym::reader_internal
