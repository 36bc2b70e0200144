#include "gym/segment_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <random>
#include <thread>

#include "gym/registry_reader.h"
#include "test_support.h"

namespace gym {
namespace {

using testing::find_series;
using testing::TempDir;
using Labels = std::vector<std::pair<std::string, std::string>>;

TEST(SegmentWriter, CreatesDirectory0700AndSegment0600OnFirstUse) {
  TempDir tmp;
  const std::string dir = tmp.sub("registry");
  SegmentWriter writer(dir);
  EXPECT_FALSE(std::filesystem::exists(dir)) << "nothing is created before first use";
  writer.counter("requests_total", {}).add();
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_TRUE(writer.has_segment()) << writer.error();
  ASSERT_EQ(::stat(writer.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), segment::kTotalBytes);
}

TEST(SegmentWriter, CounterIsGetOrCreateByFamilyAndLabelsInAnyOrder) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  Label ab[] = {{"a", "1"}, {"b", "2"}};
  Label ba[] = {{"b", "2"}, {"a", "1"}};
  writer.counter("ops_total", ab).add(2);
  writer.counter("ops_total", ba).add(3);
  Label other[] = {{"a", "1"}, {"b", "3"}};
  writer.counter("ops_total", other).add(7);

  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  const SeriesSample* s = find_series(snap, "ops_total", Labels{{"a", "1"}, {"b", "2"}});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->counter, 5u);
  const SeriesSample* o = find_series(snap, "ops_total", Labels{{"a", "1"}, {"b", "3"}});
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->counter, 7u);
  EXPECT_EQ(snap.stats.live_segments, 1u);
}

TEST(SegmentWriter, ThreadsUpdatingSameAndDifferentSeriesGiveExactTotals) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  constexpr int kThreads = 4;
  constexpr int kIterations = 50000;
  const int64_t bounds[] = {10, 100};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string mine = std::to_string(t);
      Label own[] = {{"thread", mine}};
      Counter shared = writer.counter("shared_total", {});
      Counter own_counter = writer.counter("own_total", own);
      Histogram hist = writer.histogram("latency", {}, bounds, 1.0);
      Gauge gauge = writer.gauge("in_flight", {});
      for (int i = 0; i < kIterations; ++i) {
        shared.add();
        own_counter.add(2);
        hist.observe(i % 200);  // 11 of every 200 land <= 10, 90 more <= 100
        gauge.add(1);
        gauge.add(-1);
      }
      gauge.add(t);
    });
  }
  // Snapshots while the threads run: the +Inf bucket always equals the count.
  RegistryReader reader(tmp.path());
  for (int i = 0; i < 50; ++i) {
    const Snapshot& snap = reader.snapshot();
    if (const SeriesSample* h = find_series(snap, "latency")) {
      EXPECT_EQ(h->cumulative_buckets.back(), h->count());
      EXPECT_LE(h->cumulative_buckets[0], h->cumulative_buckets[1]);
    }
  }
  for (auto& th : threads) th.join();

  const Snapshot& snap = reader.snapshot();
  ASSERT_NE(find_series(snap, "shared_total"), nullptr);
  EXPECT_EQ(find_series(snap, "shared_total")->counter, uint64_t{kThreads} * kIterations);
  for (int t = 0; t < kThreads; ++t) {
    const SeriesSample* own = find_series(snap, "own_total", Labels{{"thread", std::to_string(t)}});
    ASSERT_NE(own, nullptr);
    EXPECT_EQ(own->counter, 2u * kIterations);
  }
  const SeriesSample* h = find_series(snap, "latency");
  ASSERT_NE(h, nullptr);
  const uint64_t total = uint64_t{kThreads} * kIterations;
  EXPECT_EQ(h->count(), total);
  EXPECT_EQ(h->cumulative_buckets[0], uint64_t{kThreads} * (kIterations / 200) * 11);
  EXPECT_EQ(h->cumulative_buckets[1], uint64_t{kThreads} * (kIterations / 200) * 101);
  int64_t per_cycle = 0;
  for (int i = 0; i < 200; ++i) per_cycle += i;
  EXPECT_EQ(h->sum, int64_t{kThreads} * (kIterations / 200) * per_cycle);
  // The gauges went out of scope with their threads: their slots are released.
  EXPECT_EQ(find_series(snap, "in_flight"), nullptr);
}

TEST(SegmentWriter, GaugeSlotsOfOneFamilyAndLabelsAreSummedAndReleasedWithTheInstance) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  RegistryReader reader(tmp.path());
  Label labels[] = {{"limit_name", "rollouts"}};
  auto a = std::make_unique<Gauge>(writer.gauge("limit", labels));
  Gauge b = writer.gauge("limit", labels);
  a->set(10);
  b.set(5);
  ASSERT_NE(find_series(reader.snapshot(), "limit", Labels{{"limit_name", "rollouts"}}), nullptr);
  EXPECT_EQ(find_series(reader.snapshot(), "limit", Labels{{"limit_name", "rollouts"}})->gauge, 15);
  a.reset();
  EXPECT_EQ(find_series(reader.snapshot(), "limit", Labels{{"limit_name", "rollouts"}})->gauge, 5);
  // A new instance reuses the released slot and starts from zero.
  Gauge c = writer.gauge("limit", labels);
  EXPECT_EQ(c.value(), 0);
  c.set(1);
  EXPECT_EQ(find_series(reader.snapshot(), "limit", Labels{{"limit_name", "rollouts"}})->gauge, 6);
  {
    Gauge moved = std::move(c);
    moved.add(1);
  }
  b = Gauge();
  EXPECT_EQ(find_series(reader.snapshot(), "limit", Labels{{"limit_name", "rollouts"}}), nullptr)
      << "a family with no live instance reports nothing";
}

// Format 7: a record is 32 bytes and its text takes its length in the
// string area (it took a 1 KiB record before); histograms of the same
// bounds keep them there once. 300 counters and 21 histograms: 64 KiB of
// /dev/shm at most (1 KiB a series, 325 KiB, in format 6), each read back
// with its own labels and bounds.
TEST(SegmentWriter, ARecordTakes32BytesAndItsTextItsLengthInTheStringArea) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  for (int i = 0; i < 300; ++i) {
    const std::string server = "s" + std::to_string(i), op = "op" + std::to_string(i);
    const Label l[] = {{"server", server}, {"operation", op}};
    writer.counter("ops_total", l).add(uint64_t(i) + 1);
  }
  const int64_t shared[] = {1000, 2000, 3000}, other[] = {7, 8};
  for (int i = 0; i < 20; ++i) {
    const std::string op = "op" + std::to_string(i);
    const Label l[] = {{"operation", op}};
    writer.histogram("op_seconds", l, shared, 1e3).observe(1500);
  }
  writer.histogram("other_seconds", {}, other, 1.0).observe(7);
  struct stat st {};
  ASSERT_EQ(::stat(writer.path().c_str(), &st), 0);
  EXPECT_LE(uint64_t(st.st_blocks) * 512, 64u * 1024);

  std::string area(64 * 1024, '\0');
  const int fd = ::open(writer.path().c_str(), O_RDONLY);
  ASSERT_EQ(::pread(fd, area.data(), area.size(), off_t(segment::kStringsOffset)),
            ssize_t(area.size()));
  ::close(fd);
  auto times = [&](std::string_view pattern) {
    size_t n = 0;
    for (size_t at = area.find(pattern); at != std::string::npos; at = area.find(pattern, at + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(times({reinterpret_cast<const char*>(shared), sizeof shared}), 1u);
  EXPECT_EQ(times({reinterpret_cast<const char*>(other), sizeof other}), 1u);

  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(snap.stats.invalid_records_total, 0u);
  for (int i = 0; i < 300; ++i) {
    const std::string v = std::to_string(i);
    const SeriesSample* s =
        find_series(snap, "ops_total", Labels{{"operation", "op" + v}, {"server", "s" + v}});
    ASSERT_NE(s, nullptr) << i;
    EXPECT_EQ(s->counter, uint64_t(i) + 1);
  }
  for (int i = 0; i < 20; ++i) {
    const SeriesSample* s =
        find_series(snap, "op_seconds", Labels{{"operation", "op" + std::to_string(i)}});
    ASSERT_NE(s, nullptr) << i;
    EXPECT_EQ(s->info->bounds, (std::vector<int64_t>{1000, 2000, 3000}));
    EXPECT_EQ(s->cumulative_buckets, (std::vector<uint64_t>{0, 1, 1, 1}));
  }
  ASSERT_NE(find_series(snap, "other_seconds"), nullptr);
  EXPECT_EQ(find_series(snap, "other_seconds")->info->bounds, (std::vector<int64_t>{7, 8}));
}

TEST(SegmentWriter, HistogramCountsIntoBucketsByUpperBoundInclusive) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  const int64_t bounds[] = {1000, 5000};
  Histogram h = writer.histogram("op_seconds", {}, bounds, 1e6);
  for (int64_t v : {0, 1000, 1001, 5000, 5001, 999999}) h.observe(v);
  RegistryReader reader(tmp.path());
  const SeriesSample* s = find_series(reader.snapshot(), "op_seconds");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->cumulative_buckets, (std::vector<uint64_t>{2, 4, 6}));
  EXPECT_EQ(s->sum, 0 + 1000 + 1001 + 5000 + 5001 + 999999);
  EXPECT_EQ(s->info->bounds, (std::vector<int64_t>{1000, 5000}));
  EXPECT_DOUBLE_EQ(s->info->unit_divisor, 1e6);
}

TEST(SegmentWriter, HistogramBucketIsTheFirstBoundAtOrAboveTheValueForEveryBoundCount) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  RegistryReader reader(tmp.path());
  std::mt19937_64 rng(5);
  for (uint32_t n = 0; n <= segment::kMaxBounds; ++n) {
    std::vector<int64_t> bounds;
    for (uint32_t i = 0; i < n; ++i) bounds.push_back(int64_t(i) * 10 - 20);
    if (n == segment::kMaxBounds) bounds.back() = INT64_MAX;  // an extreme bound
    std::string family = "h" + std::to_string(n);
    Histogram h = writer.histogram(family, {}, bounds, 1.0);
    ASSERT_TRUE(h.registered());
    std::vector<uint64_t> expected(n + 1, 0);
    for (int k = 0; k < 2000; ++k) {
      int64_t v = int64_t(rng() % 200) - 40;
      if (k == 0) v = INT64_MIN;
      if (k == 1) v = INT64_MAX;
      h.observe(v);
      size_t b = 0;
      while (b < n && v > bounds[b]) ++b;
      ++expected[b];
    }
    const SeriesSample* s = find_series(reader.snapshot(), family);
    ASSERT_NE(s, nullptr);
    uint64_t running = 0;
    for (size_t b = 0; b <= n; ++b) {
      running += expected[b];
      EXPECT_EQ(s->cumulative_buckets[b], running) << "bounds " << n << " bucket " << b;
    }
  }
}

// Each thread's histogram shard, once all of `n` threads hold theirs (they
// stay alive until every one has reported).
std::vector<uint32_t> shards_of_live_threads(int n) {
  std::vector<uint32_t> shards(size_t(n), 99);
  std::atomic<int> reported{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      shards[size_t(i)] = detail::thread_shard();
      ++reported;
      while (reported.load() < n) std::this_thread::yield();
    });
  for (auto& t : threads) t.join();
  return shards;
}

TEST(SegmentWriter, LiveThreadsUpToTheShardCountNeverShareAHistogramShard) {
  // In a child: this process's threads may hold shards already.
  pid_t pid = testing::spawn([] {
    for (int round = 0; round < 50; ++round) {  // threads come and go
      std::vector<uint32_t> shards = shards_of_live_threads(segment::kHistogramShards - 1);
      std::sort(shards.begin(), shards.end());
      if (std::adjacent_find(shards.begin(), shards.end()) != shards.end()) return 1;
      if (shards.back() >= segment::kHistogramShards) return 2;
    }
    // The calling thread holds one too: with it, every shard is held once.
    const uint32_t mine = detail::thread_shard();
    std::vector<uint32_t> shards = shards_of_live_threads(segment::kHistogramShards - 1);
    shards.push_back(mine);
    std::sort(shards.begin(), shards.end());
    for (uint32_t i = 0; i < segment::kHistogramShards; ++i)
      if (shards[i] != i) return 3;
    // Beyond the shard count threads share, and still count right.
    shards = shards_of_live_threads(2 * segment::kHistogramShards);
    for (uint32_t s : shards)
      if (s >= segment::kHistogramShards) return 4;
    return 0;
  });
  EXPECT_EQ(testing::wait_exit(pid), 0);
}

TEST(SegmentWriter, FullSegmentKeepsWorkingAndCountsDroppedSeries) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  std::vector<Counter> counters;
  for (uint32_t i = 0; i < segment::kMaxRecords + 5; ++i) {
    std::string v = std::to_string(i);
    Label l[] = {{"i", v}};
    counters.push_back(writer.counter("many_total", l));
  }
  for (const Counter& c : counters) c.add();  // no crash, the last 5 are no-ops
  EXPECT_FALSE(counters.back().registered());
  EXPECT_TRUE(counters.front().registered());
  // A gauge that cannot be registered still holds its value in process memory.
  Gauge g = writer.gauge("late_gauge", {});
  EXPECT_FALSE(g.registered());
  g.add(4);
  EXPECT_EQ(g.value(), 4);
  EXPECT_EQ(writer.dropped_series(), 6u);
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(snap.stats.dropped_series_total, 6u);
  EXPECT_EQ(testing::count_family(snap, "many_total"), segment::kMaxRecords);
}

TEST(SegmentWriter, ValueCacheLinesRunningOutCountsDroppedSeries) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  std::vector<int64_t> bounds(segment::kMaxBounds);
  for (size_t i = 0; i < bounds.size(); ++i) bounds[i] = int64_t(i);
  const uint32_t lines =
      segment::value_lines_for(segment::SeriesKind::kHistogram, segment::kMaxBounds,
                               segment::kHistogramShards, native::kWords);
  const uint32_t fit = segment::kValueLines / lines;
  ASSERT_LT(fit, segment::kMaxRecords) << "lines run out before records do";
  uint32_t made = 0;
  for (uint32_t i = 0; i < fit + 10; ++i) {
    std::string v = std::to_string(i);
    Label l[] = {{"i", v}};
    made += writer.histogram("wide", l, bounds, 1.0, /*native=*/true).registered();
  }
  EXPECT_EQ(made, fit);
  EXPECT_EQ(writer.dropped_series(), 10u);
  // What lines remain still take one-line series, and then no more.
  const uint32_t left = segment::kValueLines - fit * lines;
  for (uint32_t i = 0; i < left; ++i) {
    std::string v = std::to_string(i);
    Label l[] = {{"i", v}};
    EXPECT_TRUE(writer.counter("narrow_total", l).registered());
  }
  EXPECT_FALSE(writer.counter("one_more_total", {}).registered());
}

TEST(SegmentWriter, InvalidNamesAndLabelsAreDroppedNotFatal) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  Label bad_name[] = {{"0bad", "x"}};
  Label reserved[] = {{"__name__", "x"}};
  Label duplicate[] = {{"a", "1"}, {"a", "2"}};
  std::string long_value(segment::kMaxValueBytes + 1, 'v');
  Label too_long[] = {{"a", long_value}};
  Label with_nul[] = {{"a", std::string_view("x\0y", 3)}};
  std::vector<Label> too_many;
  std::vector<std::string> names;
  for (uint32_t i = 0; i <= segment::kMaxLabels; ++i) names.push_back("l" + std::to_string(i));
  for (auto& n : names) too_many.push_back({n, "v"});
  const int64_t unsorted[] = {5, 1};

  EXPECT_FALSE(writer.counter("bad-family", {}).registered());
  EXPECT_FALSE(writer.counter("ok_total", bad_name).registered());
  EXPECT_FALSE(writer.counter("ok_total", reserved).registered());
  EXPECT_FALSE(writer.counter("ok_total", duplicate).registered());
  EXPECT_FALSE(writer.counter("ok_total", too_long).registered());
  EXPECT_FALSE(writer.counter("ok_total", with_nul).registered());
  EXPECT_FALSE(writer.counter("ok_total", too_many).registered());
  EXPECT_FALSE(writer.histogram("h", {}, unsorted, 1.0).registered());
  EXPECT_FALSE(writer.histogram("h", {}, {}, 0.0).registered());
  EXPECT_EQ(writer.dropped_series(), 9u);
  // Values with quotes, backslashes and newlines are fine: escaping is the
  // exposition's business.
  Label odd[] = {{"a", "q\"b\\n\nx"}};
  EXPECT_TRUE(writer.counter("ok_total", odd).registered());
}

TEST(SegmentWriter, MissingOrUnusableDirectoryMakesUpdatesNoOps) {
  TempDir tmp;
  {
    SegmentWriter writer(tmp.sub("no/such/parent"));
    Counter c = writer.counter("x_total", {});
    c.add(5);
    EXPECT_FALSE(c.registered());
    EXPECT_FALSE(writer.has_segment());
    EXPECT_NE(writer.error().find("cannot create registry directory"), std::string::npos);
    Gauge g = writer.gauge("g", {});
    g.add(3);
    EXPECT_EQ(g.value(), 3);
    EXPECT_EQ(writer.dropped_series(), 2u);
  }
  {
    // A regular file where the directory should be.
    std::ofstream(tmp.sub("file")) << "x";
    SegmentWriter writer(tmp.sub("file"));
    writer.histogram("h", {}, {}, 1.0).observe(1);
    EXPECT_FALSE(writer.has_segment());
    EXPECT_FALSE(writer.error().empty());
  }
}

TEST(SegmentWriter, ProcessWriterUsesTheEnvironmentDirectory) {
  TempDir tmp;
  pid_t pid = testing::spawn([&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    SegmentWriter::process().counter("from_env_total", {}).add(3);
    return SegmentWriter::process().path().starts_with(tmp.path() + "/gym-") ? 0 : 1;
  });
  EXPECT_EQ(testing::wait_exit(pid), 0);
  RegistryReader reader(tmp.path());
  const SeriesSample* s = find_series(reader.snapshot(), "from_env_total");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->counter, 3u);
}

// A child inherits the records its parent had published at the fork, with
// their text, values and string area: not those another thread of the
// parent publishes while the child makes its own segment (the shared
// header's count has them already; their text and value lines are past
// what the child copied and will use for its own). Twenty children forked
// while a thread of the parent registers flat out: every record of every
// segment is valid.
TEST(SegmentWriter, AChildInheritsWhatItsParentHadAtTheForkNotWhatItRegistersSince) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  writer.counter("before_total", {}).add(1);
  std::atomic<bool> stop{false};
  // The thread runs until every child is forked: a thread that had ended
  // unjoined before a fork is, to ThreadSanitizer, one the child leaked.
  // Past 900 label values it looks up series it has (the segment's room).
  std::thread registrar([&] {
    for (int i = 0; !stop.load(); i = (i + 1) % 900) {
      const std::string v = std::to_string(i);
      const Label l[] = {{"i", v}};
      writer.counter("during_total", l).add(1);
    }
  });
  testing::Gate gate;
  testing::Ready ready;
  std::vector<pid_t> children;
  for (int k = 0; k < 20; ++k) {
    children.push_back(testing::spawn([&] {
      writer.counter("child_total", {}).add(1);  // a record of the child's own
      ready.signal();
      gate.wait();
      return 0;
    }));
  }
  ready.wait(20);
  stop = true;
  registrar.join();
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(snap.stats.live_segments, 21u);
  EXPECT_EQ(snap.stats.invalid_records_total, 0u);
  for (const std::string& p : snap.problems) ADD_FAILURE() << p;
  ASSERT_NE(find_series(snap, "child_total"), nullptr);
  EXPECT_EQ(find_series(snap, "child_total")->counter, 20u);
  gate.open();
  for (pid_t c : children) EXPECT_EQ(testing::wait_exit(c), 0);
}

TEST(SegmentWriter, ForkedChildWritesIntoItsOwnSegmentThroughHandlesMadeBeforeFork) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  Counter c = writer.counter("forked_total", {});
  Gauge g = writer.gauge("held", {});
  const int64_t bounds[] = {10};
  Histogram h = writer.histogram("sizes", {}, bounds, 1.0);
  c.add(5);
  g.set(2);
  h.observe(1);
  const std::string parent_path = writer.path();

  testing::Gate gate;
  testing::Ready ready;
  pid_t child = testing::spawn([&] {
    if (writer.path() == parent_path || !writer.has_segment()) return 2;
    c.add(3);
    g.add(1);  // the child's copy of the object held 2, now 3: not exported
    if (g.value() != 3) return 3;
    h.observe(100);
    writer.counter("child_only_total", {}).add(1);
    Gauge own = writer.gauge("held", {});  // a gauge the child made: exported
    own.set(7);
    ready.signal();
    gate.wait();
    return 0;
  });
  ready.wait(1);
  RegistryReader reader(tmp.path());
  {
    const Snapshot& snap = reader.snapshot();
    EXPECT_EQ(snap.stats.live_segments, 2u);
    ASSERT_NE(find_series(snap, "forked_total"), nullptr);
    EXPECT_EQ(find_series(snap, "forked_total")->counter, 8u);
    EXPECT_EQ(find_series(snap, "held")->gauge, 9)
        << "the parent's 2 and the child's own 7; the child's inherited copy is not counted";
    EXPECT_EQ(find_series(snap, "sizes")->cumulative_buckets, (std::vector<uint64_t>{1, 2}));
    EXPECT_EQ(find_series(snap, "child_only_total")->counter, 1u);
  }
  EXPECT_EQ(c.value(), 5u) << "the child never wrote into the parent's segment";
  EXPECT_EQ(g.value(), 2);
  gate.open();
  EXPECT_EQ(testing::wait_exit(child), 0);
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(snap.stats.live_segments, 1u);
  EXPECT_EQ(snap.stats.retired_segments_total, 1u);
  EXPECT_EQ(find_series(snap, "forked_total")->counter, 8u) << "the child's count is kept";
  EXPECT_EQ(find_series(snap, "held")->gauge, 2) << "the dead child's gauge is gone";
  EXPECT_EQ(tmp.files().size(), 1u) << "the child's segment file was removed";
}

}  // namespace
}  // namespace gym
