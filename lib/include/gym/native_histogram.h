// The one native (sparse exponential) histogram schema of the registry: the
// bucket a value falls in, and the bounds of a bucket. Writers count into
// these buckets beside the classic ones; the exporter serves them as
// Prometheus native histograms (protobuf).
//
// Schema 3: bucket `key` holds values in (2^((key-1)/8), 2^(key/8)], so any
// two values in one bucket are within a factor 2^(1/8) (about 9.05%) of each
// other, which bounds the error of a quantile read from the buckets. The
// buckets are fixed for durations in seconds from about 1 ms to 2 h:
//   zero bucket   [0, 2^-10 s]           (0.977 ms; negative values too)
//   keys          kMinKey .. kMaxKey     (2^-10 s, 2^13 s] = (0.98 ms, 2.3 h]
// A value above 2^13 s is counted in the last bucket. In a shard they are
// kWords consecutive uint64 counts: the zero bucket, then one per key.
//
// Internal (docs/api.md): installed because segment_writer.h includes it.
#pragma once

#include <bit>
#include <cstdint>

namespace gym::native {

inline constexpr int32_t kSchema = 3;
inline constexpr int32_t kPerOctave = 1 << kSchema;       // buckets per power of two
inline constexpr int32_t kMinKey = -10 * kPerOctave + 1;  // (2^-10, 2^(-10+1/8)]
inline constexpr int32_t kMaxKey = 13 * kPerOctave;       // (.., 2^13]
inline constexpr uint32_t kBuckets = uint32_t(kMaxKey - kMinKey + 1);
inline constexpr uint32_t kWords = 1 + kBuckets;      // zero bucket, then the keys
inline constexpr double kZeroThreshold = 1.0 / 1024;  // 2^-10, the upper bound of the zero bucket

// The upper bounds of the buckets of one octave, as fractions in [0.5, 1):
// 2^(k/8 - 1) for k = 1..7 (the 8th, 1, is the next octave's 0.5).
inline constexpr double kOctave[kPerOctave - 1] = {
    0.54525386633262884, 0.59460355750136051, 0.64841977732550482, 0.70710678118654757,
    0.77110541270397037, 0.84089641525371450, 0.91700404320467122};

namespace detail {
inline constexpr uint64_t kMantissa = (uint64_t{1} << 52) - 1;
// A double's mantissa is m in [1, 2); its top 4 bits split [1, 2) into 16
// equal parts, each holding at most one bucket bound 2^(j/8) (they are at
// least 0.09 apart). Per part: the bounds below it, and the mantissa bits
// of the bound inside it (all ones when none).
struct Part {
  uint64_t bound;
  int32_t below;
};
struct Parts {
  Part p[16];
};
constexpr Parts make_parts() {
  Parts t{};
  // Bound j (j = 0..7) in mantissa bits: 1 = 0, then kOctave's (2^(j/8)/2
  // has the same mantissa as 2^(j/8)).
  uint64_t bounds[kPerOctave] = {0};
  for (int j = 1; j < kPerOctave; ++j)
    bounds[j] = std::bit_cast<uint64_t>(kOctave[j - 1]) & kMantissa;
  for (uint64_t part = 0; part < 16; ++part) {
    const uint64_t lo = part << 48;
    const uint64_t hi = (part + 1) << 48;
    t.p[part] = {kMantissa, 0};
    for (int j = 0; j < kPerOctave; ++j) {
      if (bounds[j] < lo)
        ++t.p[part].below;
      else if (bounds[j] < hi)
        t.p[part].bound = bounds[j];
    }
  }
  return t;
}
inline constexpr Parts kParts = make_parts();
}  // namespace detail

// The word (0 = zero bucket, 1 + key - kMinKey otherwise) that counts `x`:
// key = 8 * exponent + the bounds of its octave below its mantissa.
inline uint32_t word_of(double x) noexcept {
  // Without a branch (durations just under and over 1 ms would mispredict
  // it): the key from the bits, clamped; below 2^-10, zero and negative
  // values (whose bits, read as a signed number, shift to a very negative
  // exponent) come out under the first key and go to the zero bucket. (NaN
  // counts in the last bucket; a count of nanoseconds is never NaN.)
  const auto bits = std::bit_cast<uint64_t>(x);
  const int32_t exp = int32_t(std::bit_cast<int64_t>(bits) >> 52) - 1023;
  const detail::Part& part = detail::kParts.p[(bits >> 48) & 15];
  int32_t key = exp * kPerOctave + part.below + ((bits & detail::kMantissa) > part.bound);
  key = key > kMaxKey ? kMaxKey : key;
  key = key < kMinKey - 1 ? kMinKey - 1 : key;
  return uint32_t(key - (kMinKey - 1));
}

// The key of a bucket word (1..kBuckets).
constexpr int32_t key_of(uint32_t word) {
  return int32_t(word) - 1 + kMinKey;
}

}  // namespace gym::native
