// Native buckets: the schema's arithmetic checked against logarithms, and
// the counts through writers (threads, a forked child), the reader, its
// folded totals and a new reader of those totals.
#include "gym/native_histogram.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <new>
#include <random>
#include <thread>
#include <vector>

#include "gym/registry_reader.h"
#include "gym/segment_writer.h"
#include "test_support.h"

namespace gym {
namespace {

using testing::find_series;
using testing::TempDir;

// The key of x by the definition: the smallest k with x <= 2^(k/8).
int32_t key_by_log(double x) {
  return static_cast<int32_t>(std::ceil(std::log2(x) * native::kPerOctave));
}

TEST(NativeHistogram, AValueFallsInTheBucketWhoseBoundsHoldIt) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> exponent(-12, 15);
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    const double x = std::exp2(exponent(rng));
    const double scaled = std::log2(x) * native::kPerOctave;
    if (std::abs(scaled - std::round(scaled)) < 1e-9) continue;  // too near a bound to say
    const uint32_t w = native::word_of(x);
    if (x <= native::kZeroThreshold) {
      EXPECT_EQ(w, 0u) << x;
      continue;
    }
    ASSERT_GE(w, 1u) << x;
    ASSERT_LE(w, native::kBuckets) << x;
    const int32_t want = std::clamp(key_by_log(x), native::kMinKey, native::kMaxKey);
    EXPECT_EQ(native::key_of(w), want) << x;
    ++checked;
  }
  EXPECT_GT(checked, 150000);
}

TEST(NativeHistogram, BoundsBelongToTheBucketTheyClose) {
  // Powers of two are exact bounds: 2^e closes bucket 8e, the next double
  // above it opens 8e + 1.
  for (int e = -9; e <= 13; ++e) {
    const double x = std::ldexp(1.0, e);
    EXPECT_EQ(native::key_of(native::word_of(x)), e * native::kPerOctave) << x;
    if (e < 13) {
      EXPECT_EQ(native::key_of(native::word_of(std::nextafter(x, 1e300))),
                e * native::kPerOctave + 1)
          << x;
    }
  }
  EXPECT_EQ(native::word_of(native::kZeroThreshold), 0u);
  EXPECT_EQ(native::key_of(native::word_of(std::nextafter(native::kZeroThreshold, 1.0))),
            native::kMinKey);
  EXPECT_EQ(native::word_of(0.0), 0u);
  EXPECT_EQ(native::word_of(-5.0), 0u);
  EXPECT_EQ(native::word_of(-std::numeric_limits<double>::infinity()), 0u);
  EXPECT_EQ(native::word_of(-1e-300), 0u);
  EXPECT_EQ(native::word_of(4.9e-324), 0u) << "the smallest subnormal";
  EXPECT_EQ(native::key_of(native::word_of(1e9)), native::kMaxKey) << "above 2^13 s: the last";
  EXPECT_EQ(native::key_of(native::word_of(std::numeric_limits<double>::infinity())),
            native::kMaxKey);
}

// What the reader must show for values observed in nanoseconds.
std::vector<uint64_t> expected_counts(const std::vector<int64_t>& ns) {
  std::vector<uint64_t> want(native::kWords, 0);
  for (int64_t v : ns) {
    const double x = double(v) / 1e9;
    if (x <= native::kZeroThreshold) {
      ++want[0];
      continue;
    }
    const int32_t key = std::clamp(key_by_log(x), native::kMinKey, native::kMaxKey);
    ++want[size_t(1 + key - native::kMinKey)];
  }
  return want;
}

TEST(NativeHistogram, ThreadsAForkedChildAndTheFoldedTotalsKeepEveryObservationInItsBucket) {
  TempDir tmp;
  const int64_t bounds[] = {1000000, 100000000};  // 1 ms, 100 ms
  std::vector<int64_t> values;
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> seconds(std::log(0.02), 2.0);
  for (int i = 0; i < 40000; ++i) {
    const auto ns = static_cast<int64_t>(seconds(rng) * 1e9);
    const double scaled = std::log2(double(ns) / 1e9) * native::kPerOctave;
    if (std::abs(scaled - std::round(scaled)) < 1e-6) continue;  // not at a bound
    values.push_back(ns);
  }
  const size_t half = values.size() / 2;
  {
    SegmentWriter writer(tmp.path());
    Histogram h = writer.histogram("op_seconds", {}, bounds, 1e9, /*native=*/true);
    Histogram classic = writer.histogram("classic_seconds", {}, bounds, 1e9);
    ASSERT_TRUE(h.registered());
    // The first half from eight threads: three in shards of their own
    // (loads and stores), the rest sharing the last (atomic adds).
    std::vector<std::thread> threads;
    for (size_t t = 0; t < 8; ++t)
      threads.emplace_back([&, t] {
        for (size_t i = t; i < half; i += 8) h.observe(values[i]);
      });
    for (auto& t : threads) t.join();
    classic.observe(5);
    // The second half from a forked child that then exits: folded.
    pid_t child = testing::spawn([&] {
      for (size_t i = half; i < values.size(); ++i) h.observe(values[i]);
      return 0;
    });
    RegistryReader reader(tmp.path());
    EXPECT_EQ(testing::wait_exit(child), 0);
    const Snapshot& snap = reader.snapshot();
    EXPECT_EQ(snap.stats.retired_segments_total, 1u);
    const SeriesSample* s = find_series(snap, "op_seconds");
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->info->native_words, native::kWords);
    EXPECT_EQ(std::vector<uint64_t>(s->native.begin(), s->native.end()), expected_counts(values));
    EXPECT_EQ(s->count(), values.size());
    const SeriesSample* c = find_series(snap, "classic_seconds");
    ASSERT_NE(c, nullptr);
    EXPECT_TRUE(c->native.empty()) << "a classic histogram has no native buckets";
    EXPECT_EQ(c->count(), 1u);
  }
  // The writer is gone: its counts live in the totals file, which a new
  // reader loads.
  {
    RegistryReader reader(tmp.path());
    const SeriesSample* s = find_series(reader.snapshot(), "op_seconds");
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(std::vector<uint64_t>(s->native.begin(), s->native.end()), expected_counts(values));
    EXPECT_EQ(s->count(), values.size());
  }
  {
    RegistryReader reader(tmp.path());  // and once more, from what the last one wrote
    const SeriesSample* s = find_series(reader.snapshot(), "op_seconds");
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(std::vector<uint64_t>(s->native.begin(), s->native.end()), expected_counts(values));
  }
}

// Older layouts written by hand: a segment with one native histogram,
// "op_seconds" (bounds 1 ms and 100 ms), whose values are then rewritten as
// an older writer laid them out, with these observations: shard 0 saw 0.5 ms
// and 2 ms, the shared shard 200 ms.
struct ByHand {
  uint32_t shard;
  int64_t ns;
  uint32_t bucket;
};
constexpr ByHand kByHand[] = {{0, 500000, 0}, {0, 2000000, 1}, {3, 200000000, 2}};

// The path of `writer`'s segment, in which it registered the histogram.
std::string native_segment(SegmentWriter& writer, const TempDir& tmp) {
  const int64_t bounds[] = {1000000, 100000000};  // 1 ms, 100 ms
  EXPECT_TRUE(writer.histogram("op_seconds", {}, bounds, 1e9, /*native=*/true).registered());
  for (const auto& e : std::filesystem::directory_iterator(tmp.path()))
    if (e.path().extension() == ".seg") return e.path().string();
  return {};
}

// `area` written at `at` in the segment file at `seg`, labelled `version`.
void write_by_hand(const std::string& seg, off_t at, const std::vector<uint64_t>& area,
                   uint32_t version) {
  const int fd = ::open(seg.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, area.data(), area.size() * 8, at), ssize_t(area.size() * 8));
  ASSERT_EQ(
      ::pwrite(fd, &version, sizeof version, off_t(offsetof(segment::Header, format_version))),
      ssize_t(sizeof version));
  ::close(fd);
}

// A reader of the directory serves kByHand, from a segment of `version`.
void expect_read_by_hand(const TempDir& tmp, uint32_t version) {
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(snap.stats.live_segments_by_version[version], 1u);
  const SeriesSample* s = find_series(snap, "op_seconds");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->cumulative_buckets, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(s->sum, 500000 + 2000000 + 200000000);
  EXPECT_EQ(std::vector<uint64_t>(s->native.begin(), s->native.end()),
            expected_counts({500000, 2000000, 200000000}));
}

// Version 8 counts a native histogram's values in one joint array; a
// segment of versions 5 to 7 (shards of classic buckets and sum, then one
// native array, which the reader checks against them) is read as before.
TEST(NativeHistogram, AVersion7SegmentsShardsAndNativeArrayAreAddedUp) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  const std::string seg = native_segment(writer, tmp);
  segment::RecordHead rec{};
  {
    const int fd = ::open(seg.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pread(fd, &rec, sizeof rec, off_t(segment::kRecordsOffset)), ssize_t(sizeof rec));
    ::close(fd);
  }
  ASSERT_EQ(rec.shards, segment::kHistogramShards);
  // Both layouts take the same lines for two bounds: 4 shards of one line,
  // then 24 lines of native words (version 7) or 25 joint words (version 8).
  ASSERT_EQ(
      segment::value_lines_for(segment::SeriesKind::kHistogram, 2, rec.shards, native::kWords, 7),
      segment::value_lines_for(segment::SeriesKind::kHistogram, 2, rec.shards, native::kWords));
  const uint32_t stride = segment::shard_lines(2, native::kWords, 7) * segment::kLineBytes / 8;
  std::vector<uint64_t> area(size_t{rec.shards} * stride + native::kWords, 0);
  uint64_t* native_words = area.data() + size_t{rec.shards} * stride;
  for (const ByHand& o : kByHand) {
    uint64_t* shard = area.data() + size_t{o.shard} * stride;
    ++shard[o.bucket];
    shard[3] += uint64_t(o.ns);  // the sum, after the buckets
    ++native_words[native::word_of(double(o.ns) / 1e9)];
  }
  write_by_hand(seg, off_t(segment::kValuesOffset + uint64_t{rec.value_line} * segment::kLineBytes),
                area, 7);
  expect_read_by_hand(tmp, 7);
}

// One add counts a value in its native and its classic bucket: a writer
// killed in the middle of observations leaves words that add up, and a
// reader that meets them for the first time serves all of them. (Format 7's
// two adds left one observation counted in a classic bucket only in about 1
// of 30 such kills, and then a new reader served the histogram empty.)
// A writer of op_seconds (1, 5, 100 ms bounds) whose two threads observe
// value(thread, rng) flat out, each once before it signals `ready`.
pid_t observe_flat_out(const std::string& dir, testing::Ready& ready, uint64_t seed,
                       const std::function<int64_t(std::mt19937_64&)>& value) {
  static const int64_t bounds[] = {1000000, 5000000, 100000000};
  return testing::spawn([&] {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the test
    SegmentWriter w(dir);
    Histogram h = w.histogram("op_seconds", {}, bounds, 1e9, /*native=*/true);
    std::vector<std::thread> threads;
    for (uint64_t t = 0; t < 2; ++t)
      threads.emplace_back([&, t] {
        std::mt19937_64 rng{seed * 2 + t};
        h.observe(1);
        ready.signal();
        for (;;) h.observe(value(rng));
      });
    for (auto& t : threads) t.join();
    return 0;
  });
}

TEST(NativeHistogram, AWriterKilledWhileItObservesFlatOutLeavesCountsThatAddUp) {
  for (int round = 0; round < 20; ++round) {
    TempDir tmp;
    testing::Ready ready;
    std::lognormal_distribution<double> seconds(std::log(0.005), 2.0);
    const pid_t writer = observe_flat_out(tmp.path(), ready, uint64_t(round), [&](auto& rng) {
      return static_cast<int64_t>(seconds(rng) * 1e9);
    });
    ready.wait(2);
    uint64_t before = 0;
    {
      RegistryReader live(
          tmp.path(), ReaderOptions{.trusted_uids = {}, .mode = ReaderOptions::Mode::kReadOnly});
      const SeriesSample* s = find_series(live.snapshot(), "op_seconds");
      ASSERT_NE(s, nullptr) << "round " << round;
      before = s->count();
    }
    ::usleep(2000 + 500 * round);
    ::kill(writer, SIGKILL);
    ASSERT_EQ(testing::wait_exit(writer), 128 + SIGKILL);
    RegistryReader reader(tmp.path());  // meets the segment dead
    const Snapshot& snap = reader.snapshot();
    const SeriesSample* s = find_series(snap, "op_seconds");
    ASSERT_NE(s, nullptr) << "round " << round;
    uint64_t native = 0;
    for (uint64_t n : s->native) native += n;
    EXPECT_EQ(native, s->count()) << "round " << round;
    EXPECT_EQ(s->cumulative_buckets.back(), s->count()) << "round " << round;
    EXPECT_GE(s->count(), before) << "round " << round << ": observations were lost";
    EXPECT_GE(before, 2u) << "round " << round;
    EXPECT_EQ(snap.stats.inconsistent_reads_total, 0u) << "round " << round;
    if (::testing::Test::HasFailure()) return;
  }
}

// A writer killed in the middle of an observation leaves a sum that agrees
// with its count: two threads observe 7 ms flat out, and after each of 100
// kills the folded sum is exactly the count times 7 ms. (Before the shards
// published their sum and count, an observation killed between its bucket's
// add and its sum's left the sum 7 ms short: 91 to 97 of 100 kills, the two
// threads' adds to the one joint word contending.)
TEST(NativeHistogram, AWriterKilledWhileItObservesLeavesASumThatAgreesWithItsCount) {
  constexpr int64_t kValue = 7000000;
  int short_sums = 0;
  for (int round = 0; round < 100; ++round) {
    TempDir tmp;
    testing::Ready ready;
    const pid_t writer =
        observe_flat_out(tmp.path(), ready, uint64_t(round), [](auto&) { return kValue; });
    ready.wait(2);
    ::usleep(500 + 37 * round);
    ::kill(writer, SIGKILL);
    ASSERT_EQ(testing::wait_exit(writer), 128 + SIGKILL);
    RegistryReader reader(tmp.path());  // meets the segment dead
    const SeriesSample* s = find_series(reader.snapshot(), "op_seconds");
    ASSERT_NE(s, nullptr) << "round " << round;
    ASSERT_GE(s->count(), 2u) << "round " << round;
    // Each thread's first observation is 1 ns (before it signals).
    const int64_t want = int64_t(s->count() - 2) * kValue + 2;
    short_sums += s->sum != want;
    EXPECT_EQ(s->sum, want) << "round " << round;
  }
  EXPECT_EQ(short_sums, 0);
}

// The reader views a live histogram's words where one segment has them and
// adds them up where several do (writers sharing labels), and adds what
// exited writers left on top: each way, snapshot after snapshot, exact.
TEST(NativeHistogram, LiveWritersSharingAHistogramAndOnesGoneAddUpSnapshotAfterSnapshot) {
  TempDir tmp;
  const int64_t bounds[] = {1000000, 100000000};  // 1 ms, 100 ms
  const Label labels[] = {{"op", "verify"}};
  std::vector<int64_t> seen;
  auto expect_all = [&](const Snapshot& snap, const char* when) {
    const SeriesSample* s = find_series(snap, "op_seconds", {{"op", "verify"}});
    ASSERT_NE(s, nullptr) << when;
    EXPECT_EQ(s->count(), seen.size()) << when;
    int64_t sum = 0;
    for (int64_t v : seen) sum += v;
    EXPECT_EQ(s->sum, sum) << when;
    EXPECT_EQ(std::vector<uint64_t>(s->native.begin(), s->native.end()), expected_counts(seen))
        << when;
  };
  // Two children, each with a writer of its own and the histogram, alive
  // (the parent registers it after the fork, so the children's copies of its
  // segment do not have it: every segment that adds to it adds something).
  SegmentWriter writer(tmp.path());
  RegistryReader reader(tmp.path());
  testing::Ready ready;
  auto child = [&](int64_t v) {
    return testing::spawn([&, v] {
      SegmentWriter w(tmp.path());
      w.histogram("op_seconds", labels, bounds, 1e9, /*native=*/true).observe(v);
      ready.signal();
      for (;;) ::pause();
      return 0;
    });
  };
  const pid_t a = child(20000000);
  ready.wait(1);
  seen.push_back(20000000);
  expect_all(reader.snapshot(), "one live writer");
  const pid_t b = child(300000000);
  ready.wait(1);
  seen.push_back(300000000);
  expect_all(reader.snapshot(), "two live writers");
  Histogram h = writer.histogram("op_seconds", labels, bounds, 1e9, /*native=*/true);
  h.observe(500000);
  seen.push_back(500000);
  expect_all(reader.snapshot(), "three live writers");
  h.observe(7000000);
  seen.push_back(7000000);
  expect_all(reader.snapshot(), "three live writers, one more observation");
  ::kill(a, SIGKILL);
  EXPECT_EQ(testing::wait_exit(a), 128 + SIGKILL);
  expect_all(reader.snapshot(), "two live writers and one gone");
  ::kill(b, SIGKILL);
  EXPECT_EQ(testing::wait_exit(b), 128 + SIGKILL);
  expect_all(reader.snapshot(), "one live writer and two gone");
  expect_all(reader.snapshot(), "the same, read again");
}

// A histogram whose shards' counts and sums are as last read has its
// buckets taken from that read, not read again; one observation more, even
// in a classic bucket already counted, or of 0 (the sum unchanged), reads
// them again.
TEST(NativeHistogram, ReadAgainUnchangedItKeepsItsCountsAndOneObservationMoreMovesThem) {
  TempDir tmp;
  const int64_t bounds[] = {1000000, 100000000};  // 1 ms, 100 ms
  SegmentWriter writer(tmp.path());
  RegistryReader reader(tmp.path());
  Histogram h = writer.histogram("op_seconds", {}, bounds, 1e9, /*native=*/true);
  [[maybe_unused]] Histogram idle =
      writer.histogram("idle_seconds", {}, bounds, 1e9, /*native=*/true);
  std::vector<int64_t> seen;
  auto expect_seen = [&](const char* when) {
    const Snapshot& snap = reader.snapshot();
    const SeriesSample* s = find_series(snap, "op_seconds");
    ASSERT_NE(s, nullptr) << when;
    EXPECT_EQ(std::vector<uint64_t>(s->native.begin(), s->native.end()), expected_counts(seen))
        << when;
    const SeriesSample* none = find_series(snap, "idle_seconds");
    ASSERT_NE(none, nullptr) << when;
    EXPECT_EQ(std::vector<uint64_t>(none->native.begin(), none->native.end()), expected_counts({}))
        << when;
  };
  for (int64_t v : {2000000, 30000000, 90000000}) {  // one classic bucket, three native
    h.observe(v);
    seen.push_back(v);
  }
  expect_seen("first read");
  expect_seen("read again, unchanged");
  expect_seen("and again");
  h.observe(5000000);  // the same classic bucket, another native one
  seen.push_back(5000000);
  expect_seen("one observation more");
  expect_seen("read again after it");
  h.observe(0);  // the sum as it was: the count tells
  seen.push_back(0);
  expect_seen("an observation of 0");
  EXPECT_EQ(reader.snapshot().stats.inconsistent_reads_total, 0u);
}

TEST(NativeHistogram, EverySnapshotAddsUpWhileAWriterObservesFlatOutAndHasAllOnceItStops) {
  TempDir tmp;
  const int64_t bounds[] = {1000000, 100000000};  // 1 ms, 100 ms
  // What the writer and the test share: when to stop, and how many
  // observations the writer made in all.
  struct Shared {
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> observed{0};
  };
  void* mem =
      ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  Shared* shared = new (mem) Shared;
  testing::Ready ready, stopped;
  // Writers that observe flat out until told to stop, in another process:
  // three threads in shards of their own, two sharing the last (atomic adds).
  const pid_t writer = testing::spawn([&] {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the test
    SegmentWriter w(tmp.path());
    Histogram h = w.histogram("op_seconds", {}, bounds, 1e9, /*native=*/true);
    std::vector<std::thread> threads;
    for (int t = 0; t < 5; ++t)
      threads.emplace_back([&, t] {
        std::mt19937_64 rng{static_cast<uint64_t>(t)};
        std::lognormal_distribution<double> seconds(std::log(0.02), 2.0);
        h.observe(1);
        uint64_t n = 1;
        if (t == 0) ready.signal();
        for (; !shared->stop.load(std::memory_order_relaxed); ++n)
          h.observe(static_cast<int64_t>(seconds(rng) * 1e9));
        shared->observed.fetch_add(n);
      });
    for (auto& t : threads) t.join();
    stopped.signal();
    for (;;) ::pause();
    return 0;
  });
  struct Stop {  // on every way out, a failed assertion's too
    pid_t pid;
    void* mem;
    ~Stop() {
      ::kill(pid, SIGKILL);
      testing::wait_exit(pid);
      ::munmap(mem, sizeof(Shared));
    }
  } stop{writer, mem};
  ready.wait(1);
  RegistryReader reader(tmp.path());
  uint64_t last_count = 0, seen = 0;
  int moved = 0;
  auto expect_adds_up = [&](int i) {
    const SeriesSample* s = find_series(reader.snapshot(), "op_seconds");
    if (s == nullptr) return;
    ++seen;
    uint64_t native = 0;
    for (uint64_t n : s->native) native += n;
    ASSERT_EQ(native, s->count()) << "snapshot " << i << ": zero bucket + buckets != count";
    ASSERT_GE(s->count(), last_count) << "snapshot " << i << ": the count fell";
    moved += s->count() > last_count ? 1 : 0;
    last_count = s->count();
  };
  for (int i = 0; i < 1000; ++i) {
    expect_adds_up(i);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_EQ(seen, 1000u);
  // How often a snapshot saw the writer's progress depends on the machine:
  // a read during which observations end keeps the last values (counted).
  // Once the writer stops, the next snapshot has every observation.
  std::printf("counts moved in %d of 1000 snapshots; %llu reads kept their last values\n", moved,
              (unsigned long long)reader.snapshot().stats.inconsistent_reads_total);
  shared->stop.store(true);
  stopped.wait(1);
  expect_adds_up(1000);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(last_count, shared->observed.load());
}

}  // namespace
}  // namespace gym
