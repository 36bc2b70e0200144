#include "reader/accumulators.h"

#include <algorithm>

#include "reader/core.h"

namespace gym::reader_internal {

void Accumulator::add_words(SeriesKind kind, const uint64_t* words, uint32_t bound_count,
                            uint32_t native_words) {
  if (kind != SeriesKind::kHistogram) {  // a counter, or an ages record's count of beginnings
    counter = sat_add(counter, words[0]);
    return;
  }
  const size_t n = segment::shard_words(bound_count, native_words) - 1;
  if (buckets.size() != n) buckets.assign(n, 0);
  sat_add_words(buckets.data(), words, n);
  sum = segment::wrapping_add(sum, static_cast<int64_t>(words[n]));
}

// Viewed where they are (the segment's `last`, unchanged until the next
// snapshot) when they are the first this snapshot, added into its own
// buckets from the second on.
void Accumulator::add_live_histogram(const uint64_t* last, uint32_t words) {
  const uint32_t n = words - 1;
  if (added++ == 0) {
    view = last;
    sum = static_cast<int64_t>(last[n]);
    return;
  }
  if (view != nullptr) {  // the second: the first's words become its own
    buckets.assign(view, view + n);
    view = nullptr;
  }
  sat_add_words(buckets.data(), last, n);
  sum = segment::wrapping_add(sum, static_cast<int64_t>(last[n]));
}

void SeriesValues::made(uint32_t id) {
  if (id == retired_.size()) {
    retired_.emplace_back();
    live_.emplace_back();
  }
  retired_[id].reset();
}

void SeriesValues::forget(uint32_t id) {
  retired_[id].reset();
  if (id < exemplars_.size()) exemplars_[id].clear();
}

void SeriesValues::drop_retired() {
  for (auto& acc : retired_) acc.reset();
}

void SeriesValues::begin_snapshot() {
  for (Accumulator& acc : live_) {
    acc.present = false;
    acc.counter = 0;
    acc.gauge = 0;
    acc.oldest = 0;
    acc.in_progress = false;
    acc.sum = 0;
    acc.created_ns = 0;
    acc.created_unknown = false;
    acc.view = nullptr;
    acc.added = 0;  // its buckets are rewritten by the second segment that adds to it
  }
}

Accumulator& SeriesValues::retired(uint32_t id) {
  std::unique_ptr<Accumulator>& acc = retired_[id];
  if (!acc) acc = std::make_unique<Accumulator>();
  return *acc;
}

const Accumulator& SeriesValues::retired_or_none(uint32_t id) const {
  static const Accumulator kNone;
  return retired_[id] ? *retired_[id] : kNone;
}

std::vector<Exemplar>& SeriesValues::exemplars(uint32_t id) {
  if (exemplars_.size() <= id) exemplars_.resize(id + 1);
  return exemplars_[id];
}

std::span<const Exemplar> SeriesValues::exemplars_of(uint32_t id) const {
  return id < exemplars_.size() ? std::span<const Exemplar>(exemplars_[id])
                                : std::span<const Exemplar>();
}

std::span<const uint64_t> SeriesValues::native_view(const uint64_t* live, const Accumulator& ret,
                                                    size_t classic, size_t words) {
  static constexpr uint64_t kZeros[native::kWords] = {};
  const bool in_ret = ret.buckets.size() >= classic + words;
  if (live != nullptr && !in_ret) return {live + classic, words};
  if (in_ret && live == nullptr) return {ret.buckets.data() + classic, words};
  if (live == nullptr) return {kZeros, std::min<size_t>(words, native::kWords)};
  if (merged_.size() <= merged_used_) merged_.emplace_back();
  std::vector<uint64_t>& sum = merged_[merged_used_++];
  sum.resize(words);
  for (size_t w = 0; w < words; ++w) sum[w] = sat_add(live[classic + w], ret.buckets[classic + w]);
  return sum;
}

}  // namespace gym::reader_internal
