// Ages: the oldest waiter's and holder's age per limit (gym_concurrency_
// oldest_*_seconds), from the ages records writers keep (AgeSlots) and the
// reader's oldest start, with real threads and real processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gym/limit_meter.h"
#include "gym/metered_semaphore.h"
#include "gym/registry_reader.h"
#include "gym/segment_writer.h"
#include "test_support.h"

namespace gym {
namespace {

using testing::find_series;
using testing::TempDir;
using Labels = std::vector<std::pair<std::string, std::string>>;
using namespace std::chrono_literals;

const Labels kStuck = {{"nemo_gym_concurrency_component", "resources_server"},
                       {"nemo_gym_concurrency_limit_name", "stuck"}};

double oldest_hold(const Snapshot& snap, const Labels& labels) {
  const SeriesSample* s = find_series(snap, "gym_concurrency_oldest_hold_seconds", labels);
  return s == nullptr ? -1.0 : age_seconds(snap, *s);
}

// gym_concurrency_admissions_total: the holds begun, as the holds' ages
// records count them.
uint64_t admissions(const Snapshot& snap, const Labels& labels) {
  const SeriesSample* s = find_series(snap, "gym_concurrency_oldest_hold_seconds", labels);
  return s == nullptr ? 0 : s->counter;
}

TEST(AgeSlots, CountsEveryStartAndKeepsTheOldestBeyondItsSlots) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  AgeSlots a = w.ages("test_ages", {});
  ASSERT_TRUE(a.registered());
  std::vector<int64_t> tickets;
  for (int64_t i = 0; i < 40; ++i) tickets.push_back(a.begin(1'000'000 + i * 1000));
  EXPECT_EQ(a.count(), 40) << "31 slots and 9 counted without one";
  EXPECT_EQ(a.begun(), 40);
  EXPECT_EQ(a.oldest_start(), segment::ticket_start(1'000'000));
  a.end(tickets[0]);
  EXPECT_EQ(a.count(), 39);
  EXPECT_EQ(a.oldest_start(), segment::ticket_start(1'001'000)) << "the next oldest";
  a.end(tickets[0]);  // a ticket already ended: ends another, never two
  EXPECT_EQ(a.count(), 38);
  const int64_t moved = a.restart(tickets[5], 9'000'000);
  EXPECT_EQ(a.count(), 38) << "a hand-off keeps the count";
  EXPECT_EQ(a.begun(), 41) << "and counts the one it starts";
  EXPECT_EQ(segment::ticket_start(moved), segment::ticket_start(9'000'000));
  for (int i = 0; i < 50; ++i) a.end(0);
  EXPECT_EQ(a.count(), 0) << "ends without a ticket stop at zero";
  EXPECT_EQ(a.begun(), 41) << "ends do not change what was begun";
  EXPECT_EQ(a.oldest_start(), 0);
}

TEST(AgeSlots, EveryBeginIsCountedWhicheverLaneItsThreadWrites) {
  // 40 threads at once: 31 lanes of their own (spread over the record's
  // lane lines), the rest sharing lane 0; the writer's sum and the reader's
  // admissions must both be every begin.
  TempDir tmp;
  SegmentWriter w(tmp.path());
  AgeSlots a = w.ages("test_ages", {});
  ASSERT_TRUE(a.registered());
  constexpr int kThreads = 40, kEach = 2000;
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      started.fetch_add(1);
      while (started.load() < kThreads) std::this_thread::yield();  // all alive together
      for (int i = 0; i < kEach; ++i) a.end(a.begin(segment::stamp_now_ns()));
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(a.begun(), int64_t{kThreads} * kEach);
  EXPECT_EQ(a.count(), 0);
  RegistryReader reader(tmp.path());
  const SeriesSample* s = find_series(reader.snapshot(), "test_ages", {});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->counter, uint64_t{kThreads} * kEach);
}

TEST(AgeSlots, TheReaderTakesTheOldestAcrossInstancesAndDropsAReleasedOne) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  AgeSlots young = w.ages("test_ages", {});
  auto old = std::make_unique<AgeSlots>(w.ages("test_ages", {}));
  young.begin(5'000'000'000);
  old->begin(2'000'000'000);
  RegistryReader reader(tmp.path());
  const SeriesSample* s = find_series(reader.snapshot(), "test_ages");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->gauge, 2);
  EXPECT_EQ(s->oldest_start, segment::ticket_start(2'000'000'000));
  old.reset();
  s = find_series(reader.snapshot(), "test_ages");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->gauge, 1);
  EXPECT_EQ(s->oldest_start, segment::ticket_start(5'000'000'000));
}

TEST(Ages, AHolderThatNeverReleasesAgesAcrossScrapesAndReadsZeroOnceKilled) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  // The parent has the same limit, holding nothing: the series stays.
  MeteredSemaphore idle(2, Component::kResourcesServer, "stuck", std::nullopt, std::nullopt, w);
  testing::Ready ready;
  pid_t child = testing::spawn([&] {
    MeteredSemaphore sem(2, Component::kResourcesServer, "stuck", std::nullopt, std::nullopt, w);
    sem.acquire();
    ready.signal();
    for (;;) ::pause();
    return 0;
  });
  ready.wait(1);
  RegistryReader reader(tmp.path());
  const double first = oldest_hold(reader.snapshot(), kStuck);
  EXPECT_GE(first, 0.0);
  std::this_thread::sleep_for(1200ms);
  const double later = oldest_hold(reader.snapshot(), kStuck);
  EXPECT_GE(later, first + 1.1) << "the stuck hold keeps ageing";
  EXPECT_EQ(testing::free_slots(reader.snapshot(), kStuck), 3) << "4 slots, 1 held";
  ::kill(child, SIGKILL);
  testing::wait_exit(child);
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(oldest_hold(snap, kStuck), 0.0) << "a dead holder holds nothing";
  EXPECT_EQ(testing::free_slots(snap, kStuck), 2);
}

TEST(Ages, AThousandShortHoldersNeverShowAnAgeAboveTheirHoldTime) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  MeteredSemaphore sem(2, Component::kResourcesServer, "stuck", std::nullopt, std::nullopt, w);
  std::atomic<bool> done{false};
  std::atomic<int64_t> longest_hold_ns{0};
  std::vector<std::thread> holders;
  for (int t = 0; t < 4; ++t) {
    holders.emplace_back([&] {
      for (int i = 0; i < 250; ++i) {
        const auto before = std::chrono::steady_clock::now();
        {
          SemaphoreGuard hold(sem);
          std::this_thread::sleep_for(1ms);
        }
        // An upper bound of this hold: from before the acquire to after the
        // release.
        const int64_t held = (std::chrono::steady_clock::now() - before).count();
        int64_t seen = longest_hold_ns.load();
        while (held > seen && !longest_hold_ns.compare_exchange_weak(seen, held)) {
        }
      }
    });
  }
  RegistryReader reader(tmp.path());
  double oldest_seen = 0;
  int scrapes = 0;
  std::thread scraper([&] {
    while (!done.load()) {
      oldest_seen = std::max(oldest_seen, oldest_hold(reader.snapshot(), kStuck));
      ++scrapes;
    }
  });
  for (auto& t : holders) t.join();
  done = true;
  scraper.join();
  const double bound = double(longest_hold_ns.load() + segment::stamp_resolution_ns()) / 1e9;
  EXPECT_GT(scrapes, 10);
  EXPECT_GT(oldest_seen, 0.0) << "holds were seen";
  EXPECT_LE(oldest_seen, bound) << "an age above the longest hold (+ one clock tick)";
  EXPECT_EQ(oldest_hold(reader.snapshot(), kStuck), 0.0);
}

TEST(Ages, AWaiterAgesWhileBlockedAndEveryWaitIsInTheHistogramByOutcome) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  MeteredSemaphore sem(1, Component::kResourcesServer, "stuck", std::nullopt,
                       std::chrono::milliseconds(400), w);
  sem.acquire();  // admitted at once
  std::thread waiter([&] {
    try {
      sem.acquire();
    } catch (const AdmissionTimeout&) {
    }
  });
  RegistryReader reader(tmp.path());
  double waited = 0;
  for (int i = 0; i < 100 && waited < 0.2; ++i) {
    std::this_thread::sleep_for(10ms);
    const Snapshot& snap = reader.snapshot();
    const SeriesSample* s = find_series(snap, "gym_concurrency_oldest_wait_seconds", kStuck);
    ASSERT_NE(s, nullptr);
    waited = age_seconds(snap, *s);
  }
  EXPECT_GE(waited, 0.2);
  waiter.join();  // timed out
  std::thread second([&] { sem.acquire(); });
  // Released once the second caller is seen waiting, not after a fixed
  // time (on a busy machine it may not have reached its wait in 50 ms).
  for (int i = 0; i < 500; ++i) {
    const SeriesSample* s =
        find_series(reader.snapshot(), "gym_concurrency_oldest_wait_seconds", kStuck);
    if (s != nullptr && s->gauge > 0) break;
    std::this_thread::sleep_for(10ms);
  }
  sem.release();
  second.join();  // admitted after a wait
  const Snapshot& snap = reader.snapshot();
  auto waits = [&](const char* outcome) {
    Labels l = kStuck;
    l.emplace_back("nemo_gym_concurrency_wait_outcome", outcome);
    std::sort(l.begin(), l.end());
    const SeriesSample* s = find_series(snap, "gym_concurrency_wait_duration_seconds", l);
    return s == nullptr ? uint64_t{999} : s->count();
  };
  EXPECT_EQ(waits("admitted"), 1u) << "the one after a wait (the one at once did not wait)";
  EXPECT_EQ(waits("timeout"), 1u);
  EXPECT_EQ(waits("cancelled"), 999u) << "no wait was cancelled: the series does not exist";
  EXPECT_EQ(admissions(snap, kStuck), 2u) << "the one at once and the one after a wait";
  const SeriesSample* w0 = find_series(snap, "gym_concurrency_oldest_wait_seconds", kStuck);
  ASSERT_NE(w0, nullptr);
  EXPECT_EQ(age_seconds(snap, *w0), 0.0) << "nobody waits now";
  sem.release();
}

TEST(Ages, AReleaseOnAnotherThreadKeepsTheCountRight) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  MeteredSemaphore sem(3, Component::kResourcesServer, "stuck", std::nullopt, std::nullopt, w);
  sem.acquire();
  sem.acquire();
  std::thread([&] { sem.release(); }).join();
  RegistryReader reader(tmp.path());
  EXPECT_EQ(testing::free_slots(reader.snapshot(), kStuck), 2);
  sem.release();
  EXPECT_EQ(testing::free_slots(reader.snapshot(), kStuck), 3);
  EXPECT_EQ(oldest_hold(reader.snapshot(), kStuck), 0.0);
}

TEST(Ages, AdmissionsNeverFallWhenASemaphoreIsDestroyedOrItsProcessExits) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  RegistryReader reader(tmp.path());
  {
    MeteredSemaphore sem(2, Component::kResourcesServer, "stuck", std::nullopt, std::nullopt, w);
    for (int i = 0; i < 5; ++i) SemaphoreGuard hold(sem);
    EXPECT_EQ(admissions(reader.snapshot(), kStuck), 5u);
  }
  EXPECT_EQ(admissions(reader.snapshot(), kStuck), 5u) << "a destroyed semaphore's count stays";
  // A forked child counts its own admissions from zero, also on the copy of a
  // semaphore it inherited, and they stay when it exits.
  MeteredSemaphore sem(2, Component::kResourcesServer, "stuck", std::nullopt, std::nullopt, w);
  for (int i = 0; i < 3; ++i) SemaphoreGuard hold(sem);
  pid_t child = testing::spawn([&] {
    for (int i = 0; i < 7; ++i) SemaphoreGuard hold(sem);
    return 0;
  });
  EXPECT_EQ(testing::wait_exit(child), 0);
  EXPECT_EQ(admissions(reader.snapshot(), kStuck), 15u) << "5 + 3 + the child's 7, each once";
  for (int i = 0; i < 2; ++i) SemaphoreGuard hold(sem);
  EXPECT_EQ(admissions(reader.snapshot(), kStuck), 17u);
  EXPECT_EQ(reader.snapshot().stats.counter_resets_total, 0u);
}

TEST(Ages, AdmissionsNoReaderSawBeforeTheSemaphoreWentAreStillCounted) {
  TempDir tmp;
  // A writer alone: admits, destroys its semaphore, makes it again (the
  // released record reused), admits more, destroys it and exits; no reader
  // ran meanwhile, so its exit hook folds the segment itself.
  pid_t writer = testing::spawn([&] {
    SegmentWriter w(tmp.path());
    for (int round = 0; round < 2; ++round) {
      MeteredSemaphore sem(2, Component::kResourcesServer, "stuck", std::nullopt, std::nullopt, w);
      for (int i = 0; i < 5 + round; ++i) SemaphoreGuard hold(sem);
    }
    return 0;
  });
  EXPECT_EQ(testing::wait_exit(writer), 0);
  RegistryReader reader(tmp.path());
  EXPECT_EQ(admissions(reader.snapshot(), kStuck), 11u) << "5 + 6, from the folded totals";
  // In a live process: read only after the semaphore went, then again
  // once its record counts on in a new one.
  SegmentWriter w(tmp.path());
  {
    MeteredSemaphore sem(2, Component::kResourcesServer, "stuck", std::nullopt, std::nullopt, w);
    for (int i = 0; i < 4; ++i) SemaphoreGuard hold(sem);
  }
  EXPECT_EQ(admissions(reader.snapshot(), kStuck), 15u);
  MeteredSemaphore sem(2, Component::kResourcesServer, "stuck", std::nullopt, std::nullopt, w);
  for (int i = 0; i < 2; ++i) SemaphoreGuard hold(sem);
  EXPECT_EQ(admissions(reader.snapshot(), kStuck), 17u);
  EXPECT_EQ(reader.snapshot().stats.counter_resets_total, 0u);
}

// gym_concurrency_hold_seconds_total, in seconds (the writer counts
// nanoseconds and the series' divisor says so).
double held_seconds(const Snapshot& snap, const Labels& labels) {
  const SeriesSample* s = find_series(snap, "gym_concurrency_hold_seconds_total", labels);
  return s == nullptr ? -1.0 : double(s->counter) / s->info->unit_divisor;
}

TEST(HoldTime, EveryEndedHoldAddsItsTimeWhetherReleasedHandedOnOrEndedWithoutATicket) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  LimitMeter meter(2, Component::kResourcesServer, "stuck", std::nullopt, false, w);
  RegistryReader reader(tmp.path());
  EXPECT_EQ(held_seconds(reader.snapshot(), kStuck), 0.0) << "the series exists from the start";
  // The stamps' clock is coarse (a tick of a few ms): each hold may read up
  // to one tick short, never longer than it lasted plus one.
  const int64_t a = meter.admitted_at_once();
  std::this_thread::sleep_for(60ms);
  const double before_release = held_seconds(reader.snapshot(), kStuck);
  meter.released(a);
  const double one = held_seconds(reader.snapshot(), kStuck);
  EXPECT_EQ(before_release, 0.0) << "a hold in progress adds nothing yet";
  EXPECT_GE(one, 0.05);
  EXPECT_LT(one, 5.0);
  // Handed on: the first hold ends at the hand-off, the next one starts.
  const int64_t b = meter.admitted_at_once();
  const int64_t wait = meter.wait_started();
  std::this_thread::sleep_for(40ms);
  const std::optional<int64_t> c = meter.handed_off(b, wait);
  ASSERT_TRUE(c.has_value());
  const double two = held_seconds(reader.snapshot(), kStuck);
  EXPECT_GE(two - one, 0.035);
  std::this_thread::sleep_for(30ms);
  meter.released(0);  // no ticket: the oldest hold (c) ends, its time known from its slot
  const double three = held_seconds(reader.snapshot(), kStuck);
  EXPECT_GE(three - two, 0.025);
  EXPECT_EQ(admissions(reader.snapshot(), kStuck), 3u) << "a, b and the waiter b handed on to";
  EXPECT_EQ(meter.holds().count(), 0);
}

}  // namespace
}  // namespace gym
