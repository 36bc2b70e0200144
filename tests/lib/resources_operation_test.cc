#include "gym/resources_operation.h"

#include <gtest/gtest.h>

#include <semaphore>
#include <thread>

#include "gym/metered_semaphore.h"
#include "gym/registry_reader.h"
#include "gym/server_identity.h"
#include "test_support.h"

namespace gym {
namespace {

using namespace std::chrono_literals;
using testing::find_series;
using testing::TempDir;
using Labels = std::vector<std::pair<std::string, std::string>>;

Labels op_labels(std::string op, std::string ex) {
  return {{"nemo_gym_resources_executor", ex}, {"nemo_gym_resources_operation", op}};
}
Labels wait_labels(std::string op, std::string ex, std::string how) {
  return {{"nemo_gym_concurrency_wait_outcome", how},
          {"nemo_gym_resources_executor", ex},
          {"nemo_gym_resources_operation", op}};
}
Labels outcome_labels(std::string op, std::string ex, std::string outcome) {
  return {{"nemo_gym_resources_executor", ex},
          {"nemo_gym_resources_operation", op},
          {"nemo_gym_resources_operation_outcome", outcome}};
}
uint64_t outcome_count(const Snapshot& snap, const Labels& labels) {
  const SeriesSample* s = find_series(snap, "gym_resources_operation_duration_seconds", labels);
  return s == nullptr ? 0 : s->count();
}

struct Fixture {
  TempDir tmp;
  SegmentWriter writer{tmp.path()};
  OperationMetrics metrics{writer};
  RegistryReader reader{tmp.path()};
};

TEST(ResourcesOperation, RecordsQueueTimeActiveAndDurationWithOutcomeOk) {
  Fixture f;
  std::counting_semaphore<4> limit(1);
  {
    ResourcesOperation op(limit, Operation::kVerify, Executor::kSubprocess, {}, f.metrics);
    const Snapshot& snap = f.reader.snapshot();
    const auto labels = op_labels("verify", "subprocess");
    ASSERT_NE(find_series(snap, "gym_resources_operation_active", labels), nullptr);
    EXPECT_EQ(find_series(snap, "gym_resources_operation_active", labels)->gauge, 1);
    EXPECT_EQ(find_series(snap, "gym_resources_operation_queued", labels)->gauge, 0);
    const SeriesSample* queue = find_series(snap, "gym_resources_operation_queue_duration_seconds",
                                            wait_labels("verify", "subprocess", "admitted"));
    ASSERT_NE(queue, nullptr);
    EXPECT_EQ(queue->count(), 1u);
    std::this_thread::sleep_for(12ms);
  }
  const Snapshot& snap = f.reader.snapshot();
  const SeriesSample* ok = find_series(snap, "gym_resources_operation_duration_seconds",
                                       outcome_labels("verify", "subprocess", "ok"));
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(ok->count(), 1u);
  EXPECT_EQ(ok->cumulative_buckets[1], 0u) << "12 ms is above the 5 ms bucket";
  EXPECT_GE(ok->sum, 12000000);
  // In the bucket of its value (one observation: the sum), however long the
  // sleep really took on a loaded machine.
  for (size_t b = 0; b < ok->info->bounds.size(); ++b)
    EXPECT_EQ(ok->cumulative_buckets[b], ok->sum <= ok->info->bounds[b] ? 1u : 0u)
        << "bound " << ok->info->bounds[b] << " ns, observed " << ok->sum << " ns";
  EXPECT_EQ(ok->info->bounds.size(), 13u);
  EXPECT_DOUBLE_EQ(ok->info->unit_divisor, 1e9);
  EXPECT_EQ(
      find_series(snap, "gym_resources_operation_active", op_labels("verify", "subprocess"))->gauge,
      0);
  EXPECT_TRUE(limit.try_acquire()) << "the slot was released";
}

TEST(ResourcesOperation, AnOutcomesSeriesAppearsWithItsFirstOperationAndIsExactFromThen) {
  Fixture f;
  std::counting_semaphore<64> limit(64);
  {
    ResourcesOperation op(limit, Operation::kTool, Executor::kThread, {}, f.metrics);
    const Snapshot& snap = f.reader.snapshot();
    for (const char* outcome : {"ok", "error", "timeout", "cancelled", "crashed"})
      EXPECT_EQ(find_series(snap, "gym_resources_operation_duration_seconds",
                            outcome_labels("tool", "thread", outcome)),
                nullptr)
          << outcome << ": no operation has ended yet";
  }
  // Eight threads end their first operations at once, all with outcome
  // error: one series, which counts each of them.
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        ResourcesOperation op(limit, Operation::kTool, Executor::kThread, {}, f.metrics);
        op.set_outcome(Outcome::kError);
      }
    });
  for (auto& t : threads) t.join();
  const Snapshot& snap = f.reader.snapshot();
  EXPECT_EQ(outcome_count(snap, outcome_labels("tool", "thread", "ok")), 1u);
  EXPECT_EQ(outcome_count(snap, outcome_labels("tool", "thread", "error")), 800u);
  for (const char* outcome : {"timeout", "cancelled", "crashed"})
    EXPECT_EQ(find_series(snap, "gym_resources_operation_duration_seconds",
                          outcome_labels("tool", "thread", outcome)),
              nullptr)
        << outcome << " never happened";
}

TEST(ResourcesOperation, OutcomeRulesExplicitWinsThenCancelledThenErrorThenOk) {
  Fixture f;
  std::counting_semaphore<4> limit(1);
  auto run = [&](std::optional<Outcome> set, bool throw_it, bool stop) {
    std::stop_source source;
    if (stop) source.request_stop();
    try {
      ResourcesOperation op(limit, Operation::kJudge, Executor::kThread, source.get_token(),
                            f.metrics);
      if (set) op.set_outcome(*set);
      if (throw_it) throw std::runtime_error("boom");
    } catch (const std::runtime_error&) {
    }
  };
  run(Outcome::kTimeout, true, false);  // explicit outcome wins over an exception
  run(std::nullopt, true, false);       // error
  run(std::nullopt, true, true);        // cancelled
  run(std::nullopt, false, false);      // ok
  run(Outcome::kCrashed, false, false);
  run(std::nullopt, false, true);  // stop requested but no exception: ok
  const Snapshot& snap = f.reader.snapshot();
  EXPECT_EQ(outcome_count(snap, outcome_labels("judge", "thread", "timeout")), 1u);
  EXPECT_EQ(outcome_count(snap, outcome_labels("judge", "thread", "error")), 1u);
  EXPECT_EQ(outcome_count(snap, outcome_labels("judge", "thread", "cancelled")), 1u);
  EXPECT_EQ(outcome_count(snap, outcome_labels("judge", "thread", "ok")), 2u);
  EXPECT_EQ(outcome_count(snap, outcome_labels("judge", "thread", "crashed")), 1u);
}

TEST(ResourcesOperation, CountsAsQueuedWhileWaitingForTheLimit) {
  Fixture f;
  MeteredSemaphore sem(1, Component::kResourcesServer, "verifiers", {}, {}, f.writer);
  sem.acquire();
  std::stop_source cancel;
  std::thread waiter([&] {
    try {
      ResourcesOperation op(sem, Operation::kTool, Executor::kInline, cancel.get_token(),
                            f.metrics);
    } catch (const AdmissionCancelled&) {
    }
  });
  const auto labels = op_labels("tool", "inline");
  bool queued = false;
  for (int i = 0; i < 2000 && !queued; ++i) {
    const SeriesSample* q =
        find_series(f.reader.snapshot(), "gym_resources_operation_queued", labels);
    queued = q != nullptr && q->gauge == 1;
    if (!queued) std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(queued);
  cancel.request_stop();  // cancelled while queued: the wait's exception propagates
  waiter.join();
  const Snapshot& snap = f.reader.snapshot();
  EXPECT_EQ(find_series(snap, "gym_resources_operation_queued", labels)->gauge, 0);
  const auto how = [&](std::string outcome) {
    return find_series(snap, "gym_resources_operation_queue_duration_seconds",
                       {{"nemo_gym_concurrency_wait_outcome", outcome}, labels[0], labels[1]});
  };
  EXPECT_EQ(how("admitted"), nullptr) << "an operation that never started was not admitted";
  ASSERT_NE(how("cancelled"), nullptr) << "its wait is recorded, as cancelled";
  EXPECT_EQ(how("cancelled")->count(), 1u);
  EXPECT_GT(how("cancelled")->sum, 0) << "with the time it waited";
  sem.release();
}

// A wait that ran out of the limit's admission timeout is recorded with its
// length as a timeout: the queue time adds up to the time operations spent
// queued (Little's law), failed waits included.
TEST(ResourcesOperation, AWaitThatTimesOutIsRecordedAsATimeoutWithItsLength) {
  Fixture f;
  MeteredSemaphore sem(1, Component::kResourcesServer, "judges", {}, 20ms, f.writer);
  sem.acquire();
  EXPECT_THROW(ResourcesOperation(sem, Operation::kJudge, Executor::kThread, {}, f.metrics),
               AdmissionTimeout);
  sem.release();
  const SeriesSample* s =
      find_series(f.reader.snapshot(), "gym_resources_operation_queue_duration_seconds",
                  wait_labels("judge", "thread", "timeout"));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->count(), 1u);
  EXPECT_GE(s->sum, 20000000);
}

TEST(ResourcesOperation, ADeclaredServerLabelsTheOperationSeries) {
  TempDir tmp;
  pid_t pid = testing::spawn([&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    declare_server("math_verifier", "resources_server");
    std::counting_semaphore<2> limit(2);
    { ResourcesOperation op(limit, Operation::kVerify, Executor::kProcess); }
    std::fflush(nullptr);
    ::_exit(0);
    return 0;
  });
  ASSERT_EQ(testing::wait_exit(pid), 0);
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  const SeriesSample* s = find_series(snap, "gym_resources_operation_duration_seconds",
                                      {{"nemo_gym_resources_executor", "process"},
                                       {"nemo_gym_resources_operation", "verify"},
                                       {"nemo_gym_resources_operation_outcome", "ok"},
                                       {"nemo_gym_server_name", "math_verifier"}});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->count(), 1u);
}

TEST(ResourcesOperation, WithoutARegistryTheScopeStillEntersAndLeavesTheLimit) {
  TempDir tmp;
  SegmentWriter writer(tmp.sub("missing/parent"));
  OperationMetrics metrics(writer);
  std::counting_semaphore<1> limit(1);
  {
    ResourcesOperation op(limit, Operation::kOther, Executor::kOther, {}, metrics);
    EXPECT_FALSE(limit.try_acquire());
  }
  EXPECT_TRUE(limit.try_acquire());
}

}  // namespace
}  // namespace gym
