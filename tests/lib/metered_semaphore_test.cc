#include "gym/metered_semaphore.h"

#include <gtest/gtest.h>

#include <atomic>
#include <semaphore>
#include <thread>

#include "gym/registry_reader.h"
#include "test_support.h"

namespace gym {
namespace {

using namespace std::chrono_literals;
using testing::find_series;
using testing::free_slots;
using testing::TempDir;
using Labels = std::vector<std::pair<std::string, std::string>>;

const Labels kAgentRollouts = {{"nemo_gym_concurrency_component", "agent_server"},
                               {"nemo_gym_concurrency_limit_name", "rollouts"}};

int64_t gauge_of(const Snapshot& snap, std::string_view family, const Labels& labels) {
  const SeriesSample* s = find_series(snap, family, labels);
  return s == nullptr ? -1 : s->gauge;
}
int64_t counter_of(const Snapshot& snap, std::string_view family, const Labels& labels) {
  const SeriesSample* s = find_series(snap, family, labels);
  return s == nullptr ? -1 : static_cast<int64_t>(s->counter);
}

// Waits (bounded) until `pred` holds.
template <class Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 2000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return pred();
}

TEST(MeteredSemaphore, ReportsLimitFreeSlotsAndActiveThroughTheRegistry) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  MeteredSemaphore sem(3, Component::kAgentServer, "rollouts", std::nullopt, std::nullopt, writer);
  sem.acquire();
  sem.acquire();
  EXPECT_EQ(sem.active(), 2);
  EXPECT_EQ(sem.limit(), 3);
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(gauge_of(snap, "gym_concurrency_limit", kAgentRollouts), 3);
  EXPECT_EQ(free_slots(snap, kAgentRollouts), 1);
  EXPECT_EQ(gauge_of(snap, "gym_concurrency_queue_depth", kAgentRollouts), 0);
  EXPECT_EQ(counter_of(snap, "gym_concurrency_admission_cancelled_total", kAgentRollouts), 0);
  EXPECT_EQ(find_series(snap, "gym_concurrency_admission_timeouts_total", kAgentRollouts), nullptr)
      << "no timeouts series for a limit without an admission timeout";
  EXPECT_EQ(sem.labels(), kAgentRollouts);
  sem.release();
  sem.release();
}

TEST(MeteredSemaphore, LimitsWithTheSameLabelsAreSummedAndADestroyedOneStopsReporting) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  RegistryReader reader(tmp.path());
  auto timeout = std::optional<MeteredSemaphore::Duration>(1ms);
  MeteredSemaphore a(2, Component::kAgentServer, "rollouts", std::nullopt, timeout, writer);
  {
    MeteredSemaphore b(5, Component::kAgentServer, "rollouts", std::nullopt, timeout, writer);
    b.acquire();
    a.acquire();
    a.acquire();
    EXPECT_THROW(a.acquire(), AdmissionTimeout);
    const Snapshot& snap = reader.snapshot();
    EXPECT_EQ(gauge_of(snap, "gym_concurrency_limit", kAgentRollouts), 7);
    EXPECT_EQ(free_slots(snap, kAgentRollouts), 4);
    EXPECT_EQ(counter_of(snap, "gym_concurrency_admission_timeouts_total", kAgentRollouts), 1);
    b.release();
  }
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(gauge_of(snap, "gym_concurrency_limit", kAgentRollouts), 2);
  EXPECT_EQ(free_slots(snap, kAgentRollouts), 0);
  EXPECT_EQ(counter_of(snap, "gym_concurrency_admission_timeouts_total", kAgentRollouts), 1)
      << "counters stay";
  a.release();
  a.release();
}

TEST(MeteredSemaphore, AComponentWithNoLimitReportsNoSeries) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  { MeteredSemaphore s(1, Component::kModelServer, "upstream_requests", {}, {}, writer); }
  RegistryReader reader(tmp.path());
  for (const SeriesSample& s : reader.snapshot().series)
    EXPECT_NE(s.info->kind, segment::SeriesKind::kGauge) << s.info->family;
}

TEST(MeteredSemaphore, AdmissionTimeoutThrowsAndCountsAfterWaiting) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  MeteredSemaphore sem(1, Component::kResourcesServer, "verifiers", "math", 20ms, writer);
  ASSERT_TRUE(sem.admission_timeout().has_value());
  sem.acquire();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(sem.acquire(), AdmissionTimeout);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
  EXPECT_EQ(sem.queued(), 0);
  RegistryReader reader(tmp.path());
  Labels labels = {{"nemo_gym_concurrency_component", "resources_server"},
                   {"nemo_gym_concurrency_limit_name", "verifiers"},
                   {"nemo_gym_server_name", "math"}};
  EXPECT_EQ(counter_of(reader.snapshot(), "gym_concurrency_admission_timeouts_total", labels), 1);
  EXPECT_EQ(counter_of(reader.snapshot(), "gym_concurrency_admission_cancelled_total", labels), 0);
  sem.release();
}

TEST(MeteredSemaphore, QueueDepthCountsWaitersAndACancelledWaitIsCountedNotTimedOut) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  MeteredSemaphore sem(1, Component::kAgentServer, "rollouts", {}, std::chrono::hours(1), writer);
  RegistryReader reader(tmp.path());
  sem.acquire();
  std::stop_source cancel;
  std::atomic<int> admitted{0};
  std::atomic<int> cancelled{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&, i] {
      try {
        sem.acquire(i == 0 ? cancel.get_token() : std::stop_token());
        ++admitted;
        sem.release();
      } catch (const AdmissionCancelled&) {
        ++cancelled;
      }
    });
  }
  ASSERT_TRUE(eventually([&] { return sem.queued() == 3; }));
  EXPECT_EQ(gauge_of(reader.snapshot(), "gym_concurrency_queue_depth", kAgentRollouts), 3);
  cancel.request_stop();
  ASSERT_TRUE(eventually([&] { return cancelled.load() == 1; }));
  EXPECT_EQ(sem.queued(), 2);
  sem.release();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(admitted.load(), 2);
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(gauge_of(snap, "gym_concurrency_queue_depth", kAgentRollouts), 0);
  EXPECT_EQ(counter_of(snap, "gym_concurrency_admission_cancelled_total", kAgentRollouts), 1);
  EXPECT_EQ(counter_of(snap, "gym_concurrency_admission_timeouts_total", kAgentRollouts), 0);
}

TEST(MeteredSemaphore, OverReleaseThrowsLogicErrorAndChangesNoNumber) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  MeteredSemaphore sem(2, Component::kOther, "jobs", {}, {}, writer);
  EXPECT_THROW(sem.release(), std::logic_error);
  sem.acquire();
  sem.release();
  EXPECT_THROW(sem.release(), std::logic_error);
  EXPECT_EQ(sem.active(), 0);
  RegistryReader reader(tmp.path());
  Labels labels = {{"nemo_gym_concurrency_component", "other"},
                   {"nemo_gym_concurrency_limit_name", "jobs"}};
  EXPECT_EQ(free_slots(reader.snapshot(), labels), 2);
}

TEST(MeteredSemaphore, InvalidArgumentsAreRejectedNamingTheValue) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  auto message_of = [&](auto make) -> std::string {
    try {
      make();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message_of([&] {
              MeteredSemaphore(0, Component::kAgentServer, "x", {}, {}, writer);
            }).find("0"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              MeteredSemaphore(1, Component::kAgentServer, "Bad", {}, {}, writer);
            }).find("'Bad'"),
            std::string::npos);
  const std::string long_name(65, 'a');
  EXPECT_NE(message_of([&] {
              MeteredSemaphore(1, Component::kAgentServer, long_name, {}, {}, writer);
            }).find(long_name),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              MeteredSemaphore(1, static_cast<Component>(17), "x", {}, {}, writer);
            }).find("17"),
            std::string::npos);
  const std::string long_server(129, 's');
  EXPECT_NE(message_of([&] {
              MeteredSemaphore(1, Component::kAgentServer, "x", long_server, {}, writer);
            }).find(long_server),
            std::string::npos);
  EXPECT_FALSE(message_of([&] {
                 MeteredSemaphore(1, Component::kAgentServer, "x", "", {}, writer);
               }).empty());
  EXPECT_FALSE(message_of([&] {
                 MeteredSemaphore(1, Component::kAgentServer, "x", {}, -1ms, writer);
               }).empty());
  RegistryReader reader(tmp.path());
  EXPECT_TRUE(reader.snapshot().series.empty()) << "a rejected limit reports nothing";
}

TEST(MeteredSemaphore, ContendingThreadsNeverExceedTheLimit) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  MeteredSemaphore sem(2, Component::kAgentServer, "rollouts", {}, {}, writer);
  std::atomic<int> inside{0};
  std::atomic<int> most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5000; ++i) {
        SemaphoreGuard guard(sem);
        int now = ++inside;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        --inside;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(most.load(), 2);
  EXPECT_EQ(sem.active(), 0);
  EXPECT_EQ(sem.queued(), 0);
}

// A caller that finds no slot gives back what its subtract took (and wakes a
// waiter that looked meanwhile): waiters racing callers that probe with
// try_acquire() are each admitted, never more than the limit at once, and
// the count ends where it began.
TEST(MeteredSemaphore, CallersFindingNoSlotGiveItBackAndEveryWaiterIsAdmitted) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  MeteredSemaphore sem(1, Component::kAgentServer, "rollouts", {}, 2s, writer);
  std::atomic<bool> done{false};
  std::atomic<int> timeouts{0};
  std::atomic<int> inside{0};
  std::atomic<int> most{0};
  auto hold = [&] {
    const int now = ++inside;
    for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
    }
    --inside;
  };
  std::vector<std::thread> probers;
  for (int t = 0; t < 2; ++t)
    probers.emplace_back([&] {
      while (!done.load())
        if (sem.try_acquire()) {
          hold();
          sem.release();
        }
    });
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < 50000 && timeouts.load() == 0; ++i) {
        try {
          SemaphoreGuard guard(sem);
          hold();
        } catch (const AdmissionTimeout&) {
          ++timeouts;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  done = true;
  for (auto& p : probers) p.join();
  EXPECT_EQ(timeouts.load(), 0) << "a waiter was not admitted within 2 s";
  EXPECT_EQ(most.load(), 1);
  EXPECT_EQ(sem.active(), 0);
  EXPECT_EQ(sem.queued(), 0);
  EXPECT_TRUE(sem.try_acquire());
  EXPECT_FALSE(sem.try_acquire());
  sem.release();
}

TEST(MeteredSemaphore, WithoutARegistryItIsAPlainSemaphore) {
  TempDir tmp;
  SegmentWriter writer(tmp.sub("missing/parent"));
  MeteredSemaphore sem(1, Component::kAgentServer, "rollouts", {}, 5ms, writer);
  sem.acquire();
  EXPECT_EQ(sem.active(), 1);
  EXPECT_THROW(sem.acquire(), AdmissionTimeout);
  sem.release();
  EXPECT_TRUE(sem.try_acquire());
  EXPECT_FALSE(sem.try_acquire());
  sem.release();
  EXPECT_FALSE(writer.has_segment());
}

TEST(MeteredSemaphore, ProcessesWithTheSameLimitAreSummedByTheReader) {
  TempDir tmp;
  testing::Gate gate;
  testing::Ready ready;
  std::vector<pid_t> children;
  for (int c = 0; c < 3; ++c) {
    children.push_back(testing::spawn([&] {
      SegmentWriter writer(tmp.path());
      MeteredSemaphore sem(4, Component::kAgentServer, "rollouts", {}, {}, writer);
      sem.acquire();
      ready.signal();
      gate.wait();
      sem.release();
      return 0;
    }));
  }
  ready.wait(3);
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(gauge_of(snap, "gym_concurrency_limit", kAgentRollouts), 12);
  EXPECT_EQ(free_slots(snap, kAgentRollouts), 9);
  gate.open();
  for (pid_t p : children) EXPECT_EQ(testing::wait_exit(p), 0);
  EXPECT_EQ(find_series(reader.snapshot(), "gym_concurrency_limit", kAgentRollouts), nullptr);
}

}  // namespace
}  // namespace gym
