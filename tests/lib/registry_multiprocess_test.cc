// The registry across real processes: exact sums over forked writers, and
// writers killed with SIGKILL at random moments while the reader keeps
// taking snapshots.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <thread>

#include "gym/metered_semaphore.h"
#include "gym/registry_reader.h"
#include "gym/segment_writer.h"
#include "test_support.h"

namespace gym {
namespace {

using testing::find_series;
using testing::TempDir;
using namespace std::chrono_literals;
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
        const int n = std::stoi(std::string(s.info->labels[1].second));
        EXPECT_EQ(s.info->labels[0].second, std::to_string(n * 3));
        uint64_t& last = last_registered[std::string(s.info->labels[1].second)];
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

// A limit's spread over the processes holding it, as a snapshot has it.
const LimitRow* spread_of(const Snapshot& snap, const Labels& labels) {
  for (const LimitRow& l : snap.limits)
    if (l.present() && snap.series[l.series].info->family == "gym_concurrency_limit" &&
        snap.series[l.series].info->labels == labels)
      return &l;
  return nullptr;
}

// The labels of hold_and_queue()'s limit.
const Labels kSlotsLabels = {{"nemo_gym_concurrency_component", "resources_server"},
                             {"nemo_gym_concurrency_limit_name", "slots"},
                             {"nemo_gym_server_name", "math"}};

// A process with `holds` slots of the limit "slots" (4 a process) and
// `queued` threads waiting for one, until the gate opens. With `fork_child`,
// a forked child that writes a series of its own (its segment has the
// limit's records inherited, not its own limit).
int hold_and_queue(const std::string& dir, int holds, int queued, bool fork_child,
                   testing::Ready& ready, testing::Gate& gate) {
  SegmentWriter w(dir);
  MeteredSemaphore sem(4, Component::kResourcesServer, "slots", "math", std::nullopt, w);
  for (int i = 0; i < holds; ++i) sem.acquire();
  std::vector<std::jthread> waiters;
  for (int i = 0; i < queued; ++i) waiters.emplace_back([&sem] { sem.acquire(); });
  while (sem.queued() != queued) std::this_thread::sleep_for(1ms);
  pid_t child = -1;
  if (fork_child) {
    child = testing::spawn([&] {
      w.counter("child_total", {}).add(1);
      ready.signal();
      gate.wait();
      return 0;
    });
  }
  ready.signal();
  gate.wait();
  for (int i = 0; i < holds; ++i) sem.release();
  waiters.clear();  // joined: each waiter got a slot
  for (int i = 0; i < queued; ++i) sem.release();
  return child < 0 ? 0 : testing::wait_exit(child);
}

TEST(RegistryMultiprocess, FreeSlotsBesideAnotherProcesssQueueAreStranded) {
  TempDir tmp;
  const Labels& labels = kSlotsLabels;
  testing::Gate gate;
  testing::Ready ready;
  // A: all 4 held, 3 queued. B: 1 held, and a forked child. C: none held.
  const pid_t a =
      testing::spawn([&] { return hold_and_queue(tmp.path(), 4, 3, false, ready, gate); });
  const pid_t b =
      testing::spawn([&] { return hold_and_queue(tmp.path(), 1, 0, true, ready, gate); });
  const pid_t c =
      testing::spawn([&] { return hold_and_queue(tmp.path(), 0, 0, false, ready, gate); });
  ready.wait(4);
  RegistryReader reader(tmp.path());
  {
    const Snapshot& snap = reader.snapshot();
    EXPECT_EQ(snap.stats.live_segments, 4u) << "three holders and B's child";
    EXPECT_EQ(find_series(snap, "gym_concurrency_limit", labels)->gauge, 12);
    EXPECT_EQ(find_series(snap, "gym_concurrency_queue_depth", labels)->gauge, 3);
    EXPECT_EQ(testing::free_slots(snap, labels), 7);
    const LimitRow* l = spread_of(snap, labels);
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->processes, 3u) << "B's child inherited the limit's records; it holds no limit";
    EXPECT_EQ(l->stranded_slots, 7) << "B's 3 and C's 4 free slots, while A's callers queue";
  }
  ::kill(a, SIGKILL);
  EXPECT_EQ(testing::wait_exit(a), 128 + SIGKILL);
  {
    const Snapshot& snap = reader.snapshot();
    const LimitRow* l = spread_of(snap, labels);
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->processes, 2u);
    EXPECT_EQ(l->stranded_slots, 0) << "no caller queues: free slots are only free";
  }
  gate.open();
  EXPECT_EQ(testing::wait_exit(b), 0);
  EXPECT_EQ(testing::wait_exit(c), 0);
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(spread_of(snap, labels), nullptr) << "no live holder";
  EXPECT_EQ(find_series(snap, "gym_concurrency_limit", labels), nullptr);
}

TEST(RegistryMultiprocess, ALimitsRowJoinsItsPartsAndKeepsItsCountersWhenItsWritersGo) {
  TempDir tmp;
  const Labels& labels = kSlotsLabels;
  testing::Gate gate;
  testing::Ready ready;
  const pid_t a = testing::spawn([&] {
    SegmentWriter w(tmp.path());
    MeteredSemaphore sem(2, Component::kResourcesServer, "slots", "math",
                         std::chrono::milliseconds(1), w);
    sem.acquire();
    sem.acquire();
    EXPECT_THROW(sem.acquire(), AdmissionTimeout);
    sem.release();  // one of two held
    ready.signal();
    gate.wait();
    return 0;
  });
  ready.wait(1);
  RegistryReader reader(tmp.path());
  {
    const Snapshot& snap = reader.snapshot();
    ASSERT_EQ(snap.limits.size(), 1u);
    const LimitRow& row = snap.limits[0];
    ASSERT_TRUE(row.present());
    EXPECT_EQ(snap.series[row.series].info->labels, labels);
    for (size_t part : {row.available, row.queue_depth, row.holds, row.timeouts, row.cancelled}) {
      ASSERT_NE(part, LimitRow::kNone);
      EXPECT_EQ(snap.series[part].info->labels, labels) << snap.series[part].info->family;
    }
    EXPECT_EQ(row.limit, 2);
    EXPECT_EQ(row.active, 1);
    EXPECT_EQ(row.free, 1);
    EXPECT_EQ(row.holds_now, 1);
    EXPECT_EQ(row.queued, 0);
    EXPECT_GT(row.oldest_hold_seconds, 0.0);
    EXPECT_EQ(row.processes, 1u);
    EXPECT_EQ(snap.series[row.timeouts].counter, 1u);
    EXPECT_EQ(snap.series[row.holds].counter, 2u) << "two holds begun";
  }
  gate.open();
  EXPECT_EQ(testing::wait_exit(a), 0);
  const Snapshot& snap = reader.snapshot();
  ASSERT_EQ(snap.limits.size(), 1u) << "its counters remain, and with them its row";
  const LimitRow& row = snap.limits[0];
  EXPECT_FALSE(row.present()) << "no writer: not a limit now";
  EXPECT_EQ(row.limit, 0);
  EXPECT_EQ(row.processes, 0u);
  ASSERT_NE(row.timeouts, LimitRow::kNone);
  EXPECT_EQ(snap.series[row.timeouts].counter, 1u);
  ASSERT_NE(row.holds, LimitRow::kNone);
  EXPECT_EQ(snap.series[row.holds].counter, 2u) << "admissions never go down";
}

TEST(RegistryMultiprocess, OneProcesssQueueStrandsNothing) {
  TempDir tmp;
  const Labels& labels = kSlotsLabels;
  testing::Gate gate;
  testing::Ready ready;
  const pid_t a =
      testing::spawn([&] { return hold_and_queue(tmp.path(), 4, 2, false, ready, gate); });
  ready.wait(1);
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  const LimitRow* l = spread_of(snap, labels);
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->processes, 1u);
  EXPECT_EQ(l->stranded_slots, 0);
  gate.open();
  EXPECT_EQ(testing::wait_exit(a), 0);
}

}  // namespace
}  // namespace gym
