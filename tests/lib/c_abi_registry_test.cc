// What the C ABI's events write, read back through the registry reader.
#include <gtest/gtest.h>

#include "gym/registry_reader.h"
#include "gym/segment_writer.h"
#include "gym_metrics.h"
#include "test_support.h"

namespace gym {
namespace {

using testing::find_series;

TEST(CAbi, EventsOfALanguageWithItsOwnSemaphoreReachTheRegistry) {
  testing::TempDir tmp;
  pid_t pid = testing::spawn([&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    gym_limit* l = nullptr;
    if (gym_limit_open("model_server", "upstream_requests", "policy", 3, 2.5, &l) != GYM_OK)
      return 1;
    gym_limit_acquired(l);
    gym_limit_wait_started(l);
    gym_limit_wait_timed_out(l);
    gym_limit_wait_started(l);
    gym_limit_wait_cancelled(l);
    gym_limit_wait_started(l);  // still waiting at exit
    gym_declare_server("policy", "model_server");
    gym_operation_queued("judge", "thread");
    gym_operation_started("judge", "thread", 0.002);
    gym_operation_finished("judge", "thread", 0.7, "ok");
    std::fflush(nullptr);
    ::_exit(0);
    return 0;
  });
  ASSERT_EQ(testing::wait_exit(pid), 0);
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  const std::vector<std::pair<std::string, std::string>> labels = {
      {"nemo_gym_concurrency_component", "model_server"},
      {"nemo_gym_concurrency_limit_name", "upstream_requests"},
      {"nemo_gym_server_name", "policy"}};
  ASSERT_NE(find_series(snap, "gym_concurrency_admission_timeouts_total", labels), nullptr);
  EXPECT_EQ(find_series(snap, "gym_concurrency_admission_timeouts_total", labels)->counter, 1u);
  EXPECT_EQ(find_series(snap, "gym_concurrency_admission_cancelled_total", labels)->counter, 1u);
  EXPECT_EQ(find_series(snap, "gym_concurrency_limit", labels), nullptr) << "writer is gone";
  const SeriesSample* d = find_series(snap, "gym_resources_operation_duration_seconds",
                                      {{"nemo_gym_resources_executor", "thread"},
                                       {"nemo_gym_resources_operation", "judge"},
                                       {"nemo_gym_resources_operation_outcome", "ok"},
                                       {"nemo_gym_server_name", "policy"}});
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->count(), 1u);
  EXPECT_EQ(d->sum, 700000000);
  EXPECT_EQ(d->cumulative_buckets[5], 0u);  // 0.5 s
  EXPECT_EQ(d->cumulative_buckets[6], 1u);  // 1 s
}

TEST(CAbi, DeclaringAServerAfterTheFirstOperationIsGymEstate) {
  testing::TempDir tmp;
  pid_t pid = testing::spawn([&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    gym_operation_queued("verify", "thread");
    gym_operation_dequeued("verify", "thread");
    if (gym_declare_server("late", "resources_server") != GYM_ESTATE) return 1;
    if (std::string(gym_last_error()).find("before the first operation") == std::string::npos)
      return 2;
    if (gym_declare_server("", "resources_server") != GYM_EINVAL) return 3;
    std::fflush(nullptr);
    ::_exit(0);
    return 0;
  });
  ASSERT_EQ(testing::wait_exit(pid), 0);
}

TEST(CAbi, EventsByKindLandInTheSeriesOfTheirOperationExecutorAndOutcome) {
  testing::TempDir tmp;
  pid_t pid = testing::spawn([&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    const int kind = gym_operation_kind("tool", "process");
    int64_t wait = 0, run = 0;
    for (int outcome : {GYM_OUTCOME_OK, GYM_OUTCOME_TIMEOUT, GYM_OUTCOME_TIMEOUT}) {
      if (gym_operation_queued_k(kind, &wait) != GYM_OK) return 1;
      if (gym_operation_started_k(kind, 3000000, wait, &run) != GYM_OK) return 2;        // 3 ms
      if (gym_operation_finished_k(kind, 1500000000, outcome, run) != GYM_OK) return 3;  // 1.5 s
    }
    // Waits that end without a slot are recorded too, by how they ended.
    if (gym_operation_queued_k(kind, &wait) != GYM_OK) return 4;
    if (gym_operation_abandoned_k(kind, 2000000000, GYM_OUTCOME_TIMEOUT, wait) != GYM_OK) return 5;
    if (gym_operation_queued_k(kind, &wait) != GYM_OK) return 6;
    if (gym_operation_abandoned_k(kind, 1, GYM_OUTCOME_OK, wait) != GYM_EINVAL) return 7;
    if (gym_operation_abandoned_k(kind, 7000000, GYM_OUTCOME_CANCELLED, wait) != GYM_OK) return 8;
    std::fflush(nullptr);
    ::_exit(0);
    return 0;
  });
  ASSERT_EQ(testing::wait_exit(pid), 0);
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  auto duration = [&](const char* outcome) {
    return find_series(snap, "gym_resources_operation_duration_seconds",
                       {{"nemo_gym_resources_executor", "process"},
                        {"nemo_gym_resources_operation", "tool"},
                        {"nemo_gym_resources_operation_outcome", outcome}});
  };
  ASSERT_NE(duration("timeout"), nullptr);
  EXPECT_EQ(duration("timeout")->count(), 2u);
  EXPECT_EQ(duration("timeout")->sum, 3000000000) << "integer nanoseconds, exactly";
  ASSERT_NE(duration("ok"), nullptr);
  EXPECT_EQ(duration("ok")->count(), 1u);
  auto queue = [&](const char* how) {
    return find_series(snap, "gym_resources_operation_queue_duration_seconds",
                       {{"nemo_gym_concurrency_wait_outcome", how},
                        {"nemo_gym_resources_executor", "process"},
                        {"nemo_gym_resources_operation", "tool"}});
  };
  ASSERT_NE(queue("admitted"), nullptr);
  EXPECT_EQ(queue("admitted")->sum, 9000000);
  ASSERT_NE(queue("timeout"), nullptr);
  EXPECT_EQ(queue("timeout")->sum, 2000000000);
  ASSERT_NE(queue("cancelled"), nullptr);
  EXPECT_EQ(queue("cancelled")->sum, 7000000);
  EXPECT_EQ(queue("cancelled")->count(), 1u) << "the refused call records nothing";
}

// The names of the string forms are whole and case-sensitive: a prefix, an
// extension, another case, an empty string and NULL are refused with a
// message; every name of each table names its own kind; outcomes that share
// a first letter (cancelled, crashed) each land in their own series.
TEST(CAbi, EachNameIsItsKindAndOnlyAWholeNameIsOne) {
  const int executors = static_cast<int>(kExecutors.size());
  for (size_t o = 0; o < kOperations.size(); ++o)
    for (size_t e = 0; e < kExecutors.size(); ++e)
      EXPECT_EQ(gym_operation_kind(std::string(kOperations[o]).c_str(),
                                   std::string(kExecutors[e]).c_str()),
                int(o) * executors + int(e))
          << kOperations[o] << " " << kExecutors[e];
  for (const char* bad : {"sub", "subprocesss", "Subprocess", "subprocess ", "", "s"}) {
    EXPECT_EQ(gym_operation_kind("verify", bad), -GYM_EINVAL) << bad;
    EXPECT_NE(std::string(gym_last_error()).find("unknown executor"), std::string::npos) << bad;
  }
  EXPECT_EQ(gym_operation_kind("verif", "inline"), -GYM_EINVAL);
  EXPECT_NE(std::string(gym_last_error()).find("unknown operation 'verif'"), std::string::npos);
  EXPECT_EQ(gym_operation_kind(nullptr, "inline"), -GYM_EINVAL);
  EXPECT_EQ(gym_operation_kind("tool", nullptr), -GYM_EINVAL);

  testing::TempDir tmp;
  pid_t pid = testing::spawn([&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    int step = 0;
    for (const char* outcome : {"cancelled", "crashed", "crashed", "crash", "Crashed"}) {
      ++step;
      int64_t wait = 0, run = 0;
      if (gym_operation_queued_t("judge", "thread", &wait) != GYM_OK) return 10 + step;
      if (gym_operation_started_t("judge", "thread", 0.001, wait, &run) != GYM_OK) return 20 + step;
      const int rc = gym_operation_finished_t("judge", "thread", 0.002, outcome, run);
      if (rc != (step <= 3 ? GYM_OK : GYM_EINVAL)) return 30 + step;
      if (rc != GYM_OK && gym_operation_finished_t("judge", "thread", 0.002, "ok", run) != GYM_OK)
        return 40 + step;  // refused outcome: the operation still runs
    }
    std::fflush(nullptr);
    ::_exit(0);
    return 0;
  });
  ASSERT_EQ(testing::wait_exit(pid), 0) << "the exit code names the step that failed";
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  auto count = [&](const char* outcome) {
    const SeriesSample* s = find_series(snap, "gym_resources_operation_duration_seconds",
                                        {{"nemo_gym_resources_executor", "thread"},
                                         {"nemo_gym_resources_operation", "judge"},
                                         {"nemo_gym_resources_operation_outcome", outcome}});
    return s == nullptr ? 0u : s->count();
  };
  EXPECT_EQ(count("cancelled"), 1u);
  EXPECT_EQ(count("crashed"), 2u);
  EXPECT_EQ(count("ok"), 2u) << "the two refused outcomes finished as ok";
}

// Each misuse returns GYM_ESTATE and leaves every count as it was, in the
// process (gym_limit_active/queued) and in the registry.
TEST(CAbi, MisuseReturnsAnErrorAndChangesNothing) {
  testing::TempDir tmp;
  pid_t pid = testing::spawn([&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    gym_limit* l = nullptr;
    if (gym_limit_open("agent_server", "tools", nullptr, 2, -1, &l) != GYM_OK) return 1;
    // Nobody waits: admitted, timed out and cancelled are refused.
    if (gym_limit_wait_admitted(l) != GYM_ESTATE) return 2;
    if (gym_limit_wait_timed_out(l) != GYM_ESTATE) return 3;
    if (gym_limit_wait_cancelled(l) != GYM_ESTATE) return 4;
    if (gym_limit_active(l) != 0 || gym_limit_queued(l) != 0) return 5;
    // Every slot held: a waiter's admission is refused and it stays queued.
    gym_limit_acquired(l);
    gym_limit_acquired(l);
    gym_limit_wait_started(l);
    if (gym_limit_wait_admitted(l) != GYM_ESTATE) return 6;
    if (gym_limit_active(l) != 2 || gym_limit_queued(l) != 1) return 7;
    // Operations: started or dequeued without queued, finished without started.
    if (gym_operation_started("tool", "inline", 0.1) != GYM_ESTATE) return 8;
    if (gym_operation_dequeued("tool", "inline") != GYM_ESTATE) return 9;
    if (gym_operation_finished("tool", "inline", 0.1, "ok") != GYM_ESTATE) return 10;
    gym_operation_queued("tool", "thread");  // another kind does not count
    if (gym_operation_started("tool", "inline", 0.1) != GYM_ESTATE) return 11;
    ReaderOptions ro;
    ro.mode = ReaderOptions::Mode::kReadOnly;
    RegistryReader reader(tmp.path(), ro);
    const Snapshot& snap = reader.snapshot();
    const std::vector<std::pair<std::string, std::string>> limit = {
        {"nemo_gym_concurrency_component", "agent_server"},
        {"nemo_gym_concurrency_limit_name", "tools"}};
    const SeriesSample* q = find_series(snap, "gym_concurrency_queue_depth", limit);
    if (q == nullptr || q->gauge != 1 || testing::free_slots(snap, limit) != 0) return 12;
    const std::vector<std::pair<std::string, std::string>> inline_tool = {
        {"nemo_gym_resources_executor", "inline"}, {"nemo_gym_resources_operation", "tool"}};
    for (const char* f : {"gym_resources_operation_queued", "gym_resources_operation_active"}) {
      const SeriesSample* s = find_series(snap, f, inline_tool);
      if (s != nullptr && s->gauge != 0) return 13;
    }
    for (const SeriesSample& qd : snap.series)
      if (qd.info->family == "gym_resources_operation_queue_duration_seconds" && qd.count() != 0)
        return 14;
    return 0;
  });
  EXPECT_EQ(testing::wait_exit(pid), 0) << "the exit code names the check that failed";
}

}  // namespace
}  // namespace gym
