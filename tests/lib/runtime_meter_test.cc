// A language runtime's event loop and process (LoopMeter, RuntimeMeter: the
// gym_python_* families) as the reader sees them: how overdue the loop's
// heartbeat is, the lag histogram, tasks, garbage collections by generation.
#include "gym/runtime_meter.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "gym/registry_reader.h"
#include "gym/server_identity.h"
#include "test_support.h"

namespace gym {
namespace {

using testing::find_series;
using testing::TempDir;
using Labels = std::vector<std::pair<std::string, std::string>>;
using namespace std::chrono_literals;

const Labels kServer = {{"nemo_gym_server_name", "judge"}};

// The blocked-now gauge as the exporter serves it; -1 when it is absent.
double blocked(const Snapshot& snap, const Labels& labels = kServer) {
  const SeriesSample* s = find_series(snap, family::kEventLoopBlocked, labels);
  return s == nullptr || !s->in_progress ? -1.0 : age_seconds(snap, *s);
}

Labels gc_labels(const char* generation) {
  return {{"nemo_gym_python_gc_generation", generation}, {"nemo_gym_server_name", "judge"}};
}

constexpr int64_t kMs = 1'000'000;

TEST(LoopMeter, BlockedIsHowOverdueTheHeartbeatIsAndZeroAgainAtTheNextBeat) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  LoopMeter loop("judge", w);
  RegistryReader reader(tmp.path());
  EXPECT_EQ(blocked(reader.snapshot()), 0) << "present from the start, 0 before any beat";
  loop.beat(0, 50 * kMs);
  EXPECT_EQ(blocked(reader.snapshot()), 0) << "not due yet";
  std::this_thread::sleep_for(350ms);  // the loop "blocked": no beat
  const double overdue = blocked(reader.snapshot());
  EXPECT_GE(overdue, 0.29);
  EXPECT_LT(overdue, 5.0);
  loop.beat(300 * kMs, 50 * kMs);
  EXPECT_EQ(blocked(reader.snapshot()), 0) << "the loop runs again";
  const Snapshot& snap = reader.snapshot();
  const SeriesSample* lag = find_series(snap, family::kEventLoopLag, kServer);
  ASSERT_NE(lag, nullptr);
  EXPECT_EQ(lag->count(), 2u);
  // Bounds 1 ms, 5, 10, 50, 100, 500 ms...: 0 in the first, 300 ms in the sixth.
  EXPECT_EQ(lag->cumulative_buckets[0], 1u);
  EXPECT_EQ(lag->cumulative_buckets[4], 1u);
  EXPECT_EQ(lag->cumulative_buckets[5], 2u);
  EXPECT_EQ(lag->sum, 300 * kMs);
}

TEST(LoopMeter, TheMostOverdueLoopOfAServerIsItsBlockedTime) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  LoopMeter on_time("judge", w), stuck("judge", w);
  stuck.beat(0, 0);  // due now, and never beats again
  std::this_thread::sleep_for(200ms);
  on_time.beat(0, 60'000 * kMs);
  RegistryReader reader(tmp.path());
  EXPECT_GE(blocked(reader.snapshot()), 0.19);
}

TEST(LoopMeter, AClosedLoopsHeartbeatAndTasksAreAbsentItsLagStays) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  RegistryReader reader(tmp.path());
  {
    LoopMeter loop("judge", w);
    loop.beat(2 * kMs, 0);
    loop.set_tasks(7);
    const Snapshot& snap = reader.snapshot();
    const SeriesSample* tasks = find_series(snap, family::kEventLoopTasks, kServer);
    ASSERT_NE(tasks, nullptr);
    EXPECT_EQ(tasks->gauge, 7);
  }
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(blocked(snap), -1);
  EXPECT_EQ(find_series(snap, family::kEventLoopTasks, kServer), nullptr);
  const SeriesSample* lag = find_series(snap, family::kEventLoopLag, kServer);
  ASSERT_NE(lag, nullptr);
  EXPECT_EQ(lag->count(), 1u);
}

TEST(LoopMeter, BeatsFromManyThreadsAreEachCountedWithOneHeartbeat) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  LoopMeter loop("judge", w);
  constexpr int kThreads = 8, kEach = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) loop.beat(i % 3 == 0 ? -5 : kMs, 60'000 * kMs);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(loop.heartbeat().count(), 1) << "one heartbeat, whoever beat last";
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  const SeriesSample* lag = find_series(snap, family::kEventLoopLag, kServer);
  ASSERT_NE(lag, nullptr);
  EXPECT_EQ(lag->count(), uint64_t(kThreads * kEach));
  EXPECT_EQ(blocked(snap), 0);
}

TEST(RuntimeMeter, CollectionsAreCountedByGenerationFromTheFirstAndOthersRefused) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  RuntimeMeter rt("judge", w);
  rt.set_threads(5);
  EXPECT_FALSE(rt.collected(3, kMs));
  EXPECT_FALSE(rt.collected(-1, kMs));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(rt.collected(0, 200'000));
  EXPECT_TRUE(rt.collected(2, 70 * kMs));
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  const SeriesSample* young = find_series(snap, family::kGcCollections, gc_labels("0"));
  const SeriesSample* full = find_series(snap, family::kGcPause, gc_labels("2"));
  ASSERT_NE(young, nullptr);
  ASSERT_NE(full, nullptr);
  EXPECT_EQ(young->counter, 4u);
  EXPECT_EQ(full->count(), 1u);
  EXPECT_EQ(full->sum, 70 * kMs);
  EXPECT_EQ(full->cumulative_buckets[4], 0u) << "above 10 ms";
  EXPECT_EQ(full->cumulative_buckets[6], 1u) << "within 100 ms";
  EXPECT_EQ(full->cumulative_buckets[5], 0u) << "above 50 ms";
  EXPECT_EQ(find_series(snap, family::kGcCollections, gc_labels("1")), nullptr)
      << "a generation never collected has no series";
  const SeriesSample* threads = find_series(snap, family::kPythonThreads, kServer);
  ASSERT_NE(threads, nullptr);
  EXPECT_EQ(threads->gauge, 5);
}

TEST(RuntimeMeter, SeriesTakeTheDeclaredServerWhenGivenNoName) {
  TempDir tmp;
  pid_t child = testing::spawn([&] {
    SegmentWriter w(tmp.path());
    declare_server("declared_judge", "resources_server", w);
    RuntimeMeter rt(std::nullopt, w);
    LoopMeter loop(std::nullopt, w);
    RuntimeMeter anonymous_before_none("", w);  // throws: an empty name
    return 0;
  });
  EXPECT_EQ(testing::wait_exit(child), 99) << "an empty server name is refused";
  pid_t named = testing::spawn([&] {
    SegmentWriter w(tmp.path());
    declare_server("declared_judge", "resources_server", w);
    RuntimeMeter rt(std::nullopt, w);
    rt.collected(1, kMs);
    LoopMeter loop(std::nullopt, w);
    loop.beat(0, 0);
    ReaderOptions read_only;
    read_only.mode = ReaderOptions::Mode::kReadOnly;
    RegistryReader reader(tmp.path(), read_only);
    const Snapshot& snap = reader.snapshot();
    const Labels mine = {{"nemo_gym_server_name", "declared_judge"}};
    const Labels gc = {{"nemo_gym_python_gc_generation", "1"},
                       {"nemo_gym_server_name", "declared_judge"}};
    if (find_series(snap, family::kEventLoopLag, mine) == nullptr) return 2;
    if (find_series(snap, family::kGcCollections, gc) == nullptr) return 3;
    return 0;
  });
  EXPECT_EQ(testing::wait_exit(named), 0);
}

}  // namespace
}  // namespace gym
