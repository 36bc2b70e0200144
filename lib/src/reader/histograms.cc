#include "reader/histograms.h"

#include <algorithm>

#include "reader/core.h"

namespace gym::reader_internal {

namespace {
// Format 7 lays histograms out as formats 5 and 6 did (and format 8 those
// without native buckets).
constexpr uint32_t kSharedNativeLayout = segment::kSharedNativeVersion;

// Whether `shards` shards of classic buckets and sum (`to`, as read) add up
// to `last`'s buckets and sum (segment_totals' words, `native_words` of
// native buckets between them), as segment_totals adds them.
bool as_last(const uint64_t* to, uint32_t shards, uint32_t classic, const uint64_t* last,
             uint32_t native_words) {
  uint64_t sum = 0;
  for (uint32_t k = 0; k < shards; ++k) sum += to[k * (classic + 1u) + classic];
  if (sum != last[classic + native_words]) return false;
  for (uint32_t w = 0; w < classic; ++w) {
    uint64_t bucket = 0;
    for (uint32_t k = 0; k < shards; ++k) bucket = sat_add(bucket, to[k * (classic + 1u) + w]);
    if (bucket != last[w]) return false;
  }
  return true;
}

// A version 7 histogram's values into `to`: each shard's buckets and sum
// (bound_count + 2 words), then the native array. Both kinds of bucket of
// one moment: the native words first (acquire), then the classic ones. A
// writer adds the classic bucket before the native one (released), so the
// classic total is never below the native one; they agree unless an
// observation was in flight, and then the histogram is read again. A
// histogram with no classic observation has its native counts taken as
// zero, not read (many outcomes never happen; a classic count never falls
// back to zero, so native counts never fall).
//
// `last` is what was read of it before (segment_totals' words: the
// buckets, the native buckets, the sum). When its classic buckets and sum
// are still those, no observation ended since, and its native counts are
// those of `last` too: they are not read (kNativeAsLast), which spares a
// scrape 1.5 KiB of shared memory a histogram that did not change. Else
// kRead, or kInconsistent when the two kinds never agreed.
ReadOutcome read_shared_native(uint32_t shards, uint32_t bound_count, uint32_t native_words,
                               const uint64_t* line, const uint64_t* last, uint64_t* to) {
  const uint32_t classic = bound_count + 1u;
  const uint32_t stride = segment::shard_lines(bound_count, native_words, kSharedNativeLayout) *
                          segment::kLineBytes / 8;
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
    return ReadOutcome::kRead;
  }
  read_classic();
  if (as_last(to, shards, classic, last, native_words)) return ReadOutcome::kNativeAsLast;
  bool agree = false;
  for (int attempt = 0; attempt < kConsistentReadAttempts && !agree; ++attempt) {
    uint64_t native_total = 0;
    for (uint32_t w = 0; w < native_words; ++w)
      native_total += (native_to[w] = segment::load_acquire(&native[w]));
    const uint64_t classic_total = read_classic();
    if (classic_total == 0) {
      std::fill(native_to, native_to + native_words, uint64_t{0});
      return ReadOutcome::kRead;
    }
    agree = native_total == classic_total;
  }
  return agree ? ReadOutcome::kRead : ReadOutcome::kInconsistent;
}

// Each bound's own joint word in a version 8 histogram of `info`'s: that of
// the native word the writer would count the bound in (at most the last,
// which keeps every split word within the native words) and its index.
void joint_bound_words(const SeriesInfo& info, uint32_t native_words, uint32_t* out) {
  const double unit_scale = 1.0 / info.unit_divisor;  // as the writer has it
  for (uint32_t k = 0; k < info.bounds.size(); ++k) {
    const uint32_t w = native::word_of(double(info.bounds[k]) * unit_scale);
    out[k] = segment::joint_word(std::min(w, native_words - 1u), k);
  }
}

// A version 8 histogram of `info`'s with native buckets into `to`, in the
// words of a version 7 one (its shards' buckets and sums, then its native
// words): every shard's sum, and the joint array split into classic buckets
// (shard 0's) and native words. Joint word j counts into bucket i, the
// number of bounds whose own joint word is below j (joint_bound_words:
// ascending, so i grows with j), and native word j - i. One add counted each
// value in both: the copy adds up, whenever it is made. When the shards'
// counts and sums are those of `last` (what was read of it before), no
// observation ended since: `last`'s buckets stand, and its native counts too
// (kNativeAsLast), without reading the array. (`info`'s bounds are the
// record's, as its identity; kInconsistent, last values kept, were they not.)
// A killed writer's observations in flight (format 8, `to` as read_joint
// fills it): an own shard whose count is its published one and whose sum is
// not was adding a value, sum - published sum. The joint array counted
// (buckets - counts) of them; each it did not count is taken out of its
// shard's sum. Which ones those are is known when none was counted or all
// the values are equal; otherwise (two threads killed around the one add,
// with different values: the sum stays at most their values off), or when
// the shared last shard may hold one too, the sums stay as read.
void settle_in_flight(uint32_t shards, uint32_t classic, const uint64_t* line, uint64_t counts,
                      uint64_t* to) {
  const uint32_t stride = segment::kLineBytes / 8;
  uint32_t at[segment::kHistogramShards];
  int64_t value[segment::kHistogramShards];
  uint32_t n = 0;
  for (uint32_t k = 0; k + 1 < shards && k < segment::kHistogramShards; ++k) {
    const uint64_t* shard = line + k * stride;
    auto& sum = reinterpret_cast<int64_t&>(to[k * (classic + 1u) + classic]);
    const auto published = int64_t(segment::load_relaxed(&shard[2]));
    if (segment::load_relaxed(&shard[1]) != segment::load_relaxed(&shard[3]) || sum == published)
      continue;
    at[n] = k;
    value[n++] = sum - published;
  }
  uint64_t buckets = 0;
  for (uint32_t b = 0; b < classic; ++b) buckets += to[b];
  const uint64_t counted = buckets - std::min(buckets, counts);
  if (n == 0 || counted >= n) return;
  const bool equal = std::all_of(value, value + n, [&](int64_t v) { return v == value[0]; });
  if (counted != 0 && !equal) return;
  for (uint32_t m = counted; m < n; ++m)  // equal values: which ones does not matter
    to[at[m] * (classic + 1u) + classic] -= uint64_t(value[m]);
}

ReadOutcome read_joint(const SeriesInfo& info, uint32_t shards, uint32_t bound_count,
                       uint32_t native_words, const uint64_t* line, const uint64_t* last, bool gone,
                       uint64_t* to) {
  if (info.bounds.size() != bound_count) return ReadOutcome::kInconsistent;
  const uint32_t classic = bound_count + 1u;
  const uint32_t stride = segment::kLineBytes / 8;  // a shard is its sum's and count's line
  uint64_t* native_to = to + shards * (classic + 1u);
  std::fill(to, native_to + native_words, uint64_t{0});
  uint64_t count = 0, sum = 0, last_count = 0;
  for (uint32_t k = 0; k < shards; ++k) {
    count += segment::load_acquire(&line[k * stride + 1]);
    sum += (to[k * (classic + 1u) + classic] = segment::load_relaxed(&line[k * stride]));
  }
  for (uint32_t b = 0; b < classic; ++b) last_count += last[b];
  if (!gone && count == last_count && sum == last[classic + native_words]) {
    std::copy(last, last + classic, to);
    return ReadOutcome::kNativeAsLast;
  }
  uint32_t bound_words[segment::kMaxBounds];
  joint_bound_words(info, native_words, bound_words);
  const uint64_t* joint = line + shards * stride;
  const uint32_t words = segment::shared_words(bound_count, native_words);
  uint32_t i = 0;
  for (uint32_t j = 0; j < words; ++j) {
    const uint64_t n = segment::load_relaxed(&joint[j]);
    if (n == 0) continue;
    while (i < bound_count && bound_words[i] < j) ++i;
    to[i] = sat_add(to[i], n);
    native_to[j - i] = sat_add(native_to[j - i], n);
  }
  if (gone) settle_in_flight(shards, classic, line, count, to);
  return ReadOutcome::kRead;
}

}  // namespace

ReadOutcome read_histogram(const HistogramShape& h, const SeriesInfo& info, const uint64_t* line,
                           const uint64_t* last, bool gone, uint64_t* to) {
  if (h.version >= segment::kJointVersion && h.native_words != 0)
    return read_joint(info, h.shards, h.bound_count, h.native_words, line, last, gone, to);
  return read_shared_native(h.shards, h.bound_count, h.native_words, line, last, to);
}

uint32_t histogram_totals(const HistogramShape& h, const uint64_t* cur, bool native_as_last,
                          uint64_t* out) {
  const uint32_t words = segment::shard_words(h.bound_count, h.native_words);
  // Shards of buckets and sum, then the native array.
  const uint32_t classic = h.bound_count + 1u;
  std::copy(cur, cur + classic, out);
  out[words - 1] = cur[classic];
  for (uint32_t k = 1; k < h.shards; ++k) {
    const uint64_t* shard = cur + k * (classic + 1u);
    sat_add_words(out, shard, classic);
    out[words - 1] += shard[classic];  // the sum wraps, as writers' adds do
  }
  if (native_as_last) return words;  // not read: `last`'s stay
  const uint64_t* native = cur + h.shards * (classic + 1u);
  std::copy(native, native + h.native_words, out + classic);
  return words;
}

}  // namespace gym::reader_internal
