// The registry across real processes: exact sums over forked writers, and
// writers killed with SIGKILL at random moments while the reader keeps
// taking snapshots.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "gym/registry_reader.h"
#include "gym/segment_writer.h"
#include "test_support.h"

namespace gym {
namespace {

using testing::find_series;
using testing::TempDir;
using Labels = std::vector<std::pair<std::string, std::string>>;

const int64_t kBounds[] = {1, 5, 10, 50, 100};

TEST(RegistryMultiprocess, ProcessesUpdatingTheSameSeriesSumExactly) {
  TempDir tmp;
  constexpr int kChildren = 6;
  constexpr int kAdds = 20000;
  testing::Gate gate;
  testing::Ready ready;
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; ++c) {
    children.push_back(testing::spawn([&] {
      SegmentWriter writer(tmp.path());
      Counter counter = writer.counter("work_total", {});
      Histogram hist = writer.histogram("work_size", {}, kBounds, 1.0);
      Gauge gauge = writer.gauge("workers", {});
      gauge.add(1);
      for (int i = 0; i < kAdds; ++i) {
        counter.add();
        hist.observe(i % 120);
      }
      ready.signal();
      gate.wait();
      return 0;
    }));
  }
  ready.wait(kChildren);
  RegistryReader reader(tmp.path());
  {
    const Snapshot& snap = reader.snapshot();
    EXPECT_EQ(snap.stats.live_segments, uint64_t{kChildren});
    ASSERT_NE(find_series(snap, "work_total"), nullptr);
    EXPECT_EQ(find_series(snap, "work_total")->counter, uint64_t{kChildren} * kAdds);
    EXPECT_EQ(find_series(snap, "work_size")->count(), uint64_t{kChildren} * kAdds);
    EXPECT_EQ(find_series(snap, "workers")->gauge, kChildren);
  }
  gate.open();
  for (pid_t p : children) EXPECT_EQ(testing::wait_exit(p), 0);
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(snap.stats.live_segments, 0u);
  EXPECT_EQ(snap.stats.retired_segments_total, uint64_t{kChildren});
  EXPECT_EQ(find_series(snap, "work_total")->counter, uint64_t{kChildren} * kAdds);
  const SeriesSample* hist = find_series(snap, "work_size");
  EXPECT_EQ(hist->count(), uint64_t{kChildren} * kAdds);
  // i % 120 over 20000 adds: 166 full cycles of 0..119 and then 0..79.
  uint64_t le10 = 0;
  for (int i = 0; i < kAdds; ++i) le10 += (i % 120) <= 10;
  EXPECT_EQ(hist->cumulative_buckets[2], le10 * kChildren);
  EXPECT_EQ(find_series(snap, "workers"), nullptr);
  EXPECT_TRUE(tmp.files().empty());
}

// Writers register series of every kind and update them in a loop; the parent
// kills them with SIGKILL at random moments and starts new ones, many times,
// while it keeps taking snapshots.
TEST(RegistryMultiprocess, WritersKilledAtRandomMomentsNeverBreakASnapshot) {
  TempDir tmp;
  constexpr int kLive = 4;
  constexpr int kKills = 60;
  std::mt19937 rng(2024);

  auto start_writer = [&](int serial) {
    return testing::spawn([&tmp, serial] {
      SegmentWriter writer(tmp.path());
      std::string me = std::to_string(serial);
      Label mine[] = {{"writer", me}};
      Counter shared = writer.counter("kill_total", {});
      Histogram hist = writer.histogram("kill_latency", {}, kBounds, 1.0);
      Gauge alive = writer.gauge("kill_alive", mine);
      alive.set(1);
      for (uint64_t i = 0;; ++i) {
        shared.add();
        hist.observe(static_cast<int64_t>(i % 150));
        if (i % 64 == 0) {
          // Register series while being killed, too.
          std::string n = std::to_string(i % 512);
          std::string check = std::to_string((i % 512) * 3);
          Label labels[] = {{"n", n}, {"check", check}};
          writer.counter("kill_registered_total", labels).add();
        }
      }
      return 0;
    });
  };

  std::map<pid_t, int> writers;
  int serial = 0;
  for (int i = 0; i < kLive; ++i) {
    writers[start_writer(serial)] = serial;
    ++serial;
  }

  RegistryReader reader(tmp.path());
  uint64_t last_total = 0;
  std::vector<uint64_t> last_buckets;
  std::map<std::string, uint64_t> last_registered;
  std::vector<int> dead_serials;
  uint64_t snapshots = 0;

  auto check_snapshot = [&](const Snapshot& snap) {
    ++snapshots;
    EXPECT_EQ(snap.stats.rejected_files_total, 0u);
    EXPECT_EQ(snap.stats.invalid_records_total, 0u);
    if (const SeriesSample* total = find_series(snap, "kill_total")) {
      EXPECT_GE(total->counter, last_total) << "counters never decrease";
      last_total = total->counter;
    }
    if (const SeriesSample* hist = find_series(snap, "kill_latency")) {
      EXPECT_EQ(hist->cumulative_buckets.back(), hist->count());
      if (!last_buckets.empty()) {
        for (size_t b = 0; b < last_buckets.size(); ++b)
          EXPECT_GE(hist->cumulative_buckets[b], last_buckets[b]) << "bucket " << b;
      }
      last_buckets = hist->cumulative_buckets;
    }
    for (const SeriesSample& s : snap.series) {
      if (s.info->family == "kill_registered_total") {
        ASSERT_EQ(s.info->labels.size(), 2u) << "never half-registered";
        const int n = std::stoi(s.info->labels[1].second);
        EXPECT_EQ(s.info->labels[0].second, std::to_string(n * 3));
        uint64_t& last = last_registered[s.info->labels[1].second];
        EXPECT_GE(s.counter, last);
        last = s.counter;
      }
    }
    for (int dead : dead_serials) {
      EXPECT_EQ(find_series(snap, "kill_alive", Labels{{"writer", std::to_string(dead)}}), nullptr)
          << "gauges of a dead writer are gone after the next snapshot";
    }
  };

  for (int kill = 0; kill < kKills; ++kill) {
    // Let the writers run (and register) for a random while, reading all along.
    const int reads = 1 + static_cast<int>(rng() % 5);
    for (int r = 0; r < reads; ++r) {
      check_snapshot(reader.snapshot());
      ::usleep(static_cast<useconds_t>(rng() % 3000));
    }
    auto victim = writers.begin();
    std::advance(victim, static_cast<long>(rng() % writers.size()));
    ::kill(victim->first, SIGKILL);
    EXPECT_EQ(testing::wait_exit(victim->first), 128 + SIGKILL);
    dead_serials.push_back(victim->second);
    writers.erase(victim);
    writers[start_writer(serial)] = serial;
    ++serial;
  }
  for (auto& [pid, s] : writers) {
    ::kill(pid, SIGKILL);
    testing::wait_exit(pid);
    dead_serials.push_back(s);
  }
  const Snapshot& final_snap = reader.snapshot();
  check_snapshot(final_snap);
  EXPECT_EQ(final_snap.stats.live_segments, 0u);
  // A writer killed before its first registration never made a segment.
  EXPECT_LE(final_snap.stats.retired_segments_total, uint64_t(serial));
  EXPECT_GE(final_snap.stats.retired_segments_total, uint64_t(serial) / 2);
  EXPECT_GT(last_total, 0u);
  EXPECT_TRUE(tmp.files().empty()) << "no segment file is left behind";
  EXPECT_GT(snapshots, uint64_t{kKills});
}

}  // namespace
}  // namespace gym
