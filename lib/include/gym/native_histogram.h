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
#pragma once

#include <cstdint>
#include <cstring>

namespace gym::native {

inline constexpr int32_t kSchema = 3;
inline constexpr int32_t kPerOctave = 1 << kSchema;  // buckets per power of two
inline constexpr int32_t kMinKey = -10 * kPerOctave + 1;  // (2^-10, 2^(-10+1/8)]
inline constexpr int32_t kMaxKey = 13 * kPerOctave;       // (.., 2^13]
inline constexpr uint32_t kBuckets = uint32_t(kMaxKey - kMinKey + 1);
inline constexpr uint32_t kWords = 1 + kBuckets;    // zero bucket, then the keys
inline constexpr double kZeroThreshold = 1.0 / 1024;  // 2^-10, the upper bound of the zero bucket

// The upper bounds of the buckets of one octave, as fractions in [0.5, 1):
// 2^(k/8 - 1) for k = 1..7 (the 8th, 1, is the next octave's 0.5).
inline constexpr double kOctave[kPerOctave - 1] = {
    0.54525386633262884, 0.59460355750136051, 0.64841977732550482, 0.70710678118654757,
    0.77110541270397037, 0.84089641525371450, 0.91700404320467122};

// The word (0 = zero bucket, 1 + key - kMinKey otherwise) that counts `x`.
inline uint32_t word_of(double x) noexcept {
  if (!(x > kZeroThreshold)) return 0;  // also NaN and negatives
  // x = frac * 2^exp with frac in [0.5, 1), read from the bits (x is a
  // normal number here: it exceeds 2^-10).
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const int32_t exp = int32_t((bits >> 52) & 0x7ff) - 1022;
  const uint64_t frac_bits = (bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1022} << 52);
  double frac;
  std::memcpy(&frac, &frac_bits, sizeof frac);
  // key = (exp - 1) * 8 + the number of octave bounds below frac; frac ==
  // 0.5 exactly is the previous octave's last bucket.
  int32_t sub = 0;
  sub += kOctave[3] < frac ? 4 : 0;
  sub += kOctave[sub + 1] < frac ? 2 : 0;
  sub += kOctave[sub] < frac ? 1 : 0;
  int32_t key = (exp - 1) * kPerOctave + sub + (frac == 0.5 ? 0 : 1);
  if (key > kMaxKey) key = kMaxKey;
  if (key < kMinKey) key = kMinKey;
  return uint32_t(1 + key - kMinKey);
}

// The key of a bucket word (1..kBuckets).
constexpr int32_t key_of(uint32_t word) { return int32_t(word) - 1 + kMinKey; }

}  // namespace gym::native
