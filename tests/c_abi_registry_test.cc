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

}  // namespace
}  // namespace gym
