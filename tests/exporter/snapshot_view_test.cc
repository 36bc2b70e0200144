// The snapshot view behind gym-stat and /api/v1/snapshot: quantiles over
// histogram windows, and JSON that stays valid whatever the label values.
#include <gtest/gtest.h>

#include <cmath>

#include "gym/resources_operation.h"
#include "gym/segment_writer.h"
#include "host/procfs.h"
#include "snapshot/view.h"
#include "test_support.h"

namespace gym::exporter {
namespace {

HistogramView buckets(std::vector<std::pair<double, uint64_t>> b) {
  HistogramView h;
  h.buckets = std::move(b);
  h.count = h.buckets.back().second;
  return h;
}

TEST(SnapshotView, QuantilesInterpolateWithinTheirBucketLikePromql) {
  // 10 observations: 4 up to 0.1 s, 4 more up to 0.5 s, 2 above 1 s.
  HistogramView h = buckets({{0.1, 4}, {0.5, 8}, {1, 8}, {INFINITY, 10}});
  EXPECT_DOUBLE_EQ(*h.quantile(0.2), 0.05);  // rank 2 of 4 in [0, 0.1]
  EXPECT_DOUBLE_EQ(*h.quantile(0.6), 0.3);   // rank 6: 2 of 4 into [0.1, 0.5]
  EXPECT_DOUBLE_EQ(*h.quantile(0.99), 1.0);  // in +Inf: the highest finite bound
  EXPECT_FALSE(buckets({{0.1, 0}, {INFINITY, 0}}).quantile(0.5));
}

TEST(SnapshotView, AWindowIsTheDifferenceOfTwoViewsAndAResetStartsAfresh) {
  HistogramView later = buckets({{0.1, 5}, {INFINITY, 9}});
  HistogramView earlier = buckets({{0.1, 4}, {INFINITY, 6}});
  HistogramView d = later.minus(earlier);
  EXPECT_EQ(d.count, 3u);
  EXPECT_EQ(d.buckets[0].second, 1u);
  EXPECT_EQ(earlier.minus(later).count, earlier.count) << "a counter that fell: no window";
}

TEST(SnapshotView, JsonEscapesQuotesBackslashesAndControlCharacters) {
  View v;
  v.registry_dir = "/a\"b\\c\n\x01";
  ServerView s;
  s.server_name = "x";
  s.server_type = "y";
  s.pid = 1;
  v.servers.push_back(s);
  const std::string j = to_json(v);
  EXPECT_NE(j.find(R"("registry_dir":"/a\"b\\c\u000a\u0001")"), std::string::npos) << j;
  EXPECT_NE(j.find(R"("rss_bytes":null,"processes":null)"), std::string::npos) << j;
  EXPECT_NE(j.find(R"("limits":[],"operations":[])"), std::string::npos) << j;
}

TEST(SnapshotView, ARegistryBecomesLimitsOperationsAndWriters) {
  testing::TempDir tmp;
  SegmentWriter w(tmp.path());
  const Label l[] = {{"nemo_gym_concurrency_component", "agent_server"},
                     {"nemo_gym_concurrency_limit_name", "tools"}};
  Gauge limit = w.gauge("gym_concurrency_limit", l);
  Gauge available = w.gauge("gym_concurrency_available", l);
  limit.set(4);
  available.set(1);
  OperationMetrics ops(w);
  std::counting_semaphore<4> sem(4);
  { ResourcesOperation op(sem, Operation::kTool, Executor::kThread, {}, ops); }
  ReaderOptions ro;
  ro.mode = ReaderOptions::Mode::kReadOnly;
  RegistryReader reader(tmp.path(), ro);
  const View v = make_view(reader.snapshot(), tmp.path());
  ASSERT_EQ(v.limits.size(), 1u);
  EXPECT_EQ(v.limits[0].limit, 4);
  EXPECT_EQ(v.limits[0].active, 3);
  EXPECT_FALSE(v.limits[0].admission_timeouts_total);
  ASSERT_EQ(v.operations.size(), 1u);
  EXPECT_EQ(v.operations[0].operation, "tool");
  EXPECT_EQ(v.operations[0].finished(), 1u);
  EXPECT_EQ(v.operations[0].duration.at("ok").count, 1u);
  ASSERT_EQ(v.writers.size(), 1u);
  EXPECT_EQ(v.writers[0].pid, ::getpid());
}

TEST(SnapshotView, AWritersStartComesFromTheServersUnitsBootTimeAndIsAbsentWithoutIt) {
  testing::TempDir tmp;
  SegmentWriter w(tmp.path());
  w.counter("gym_test_total", {}).add();
  ReaderOptions ro;
  ro.mode = ReaderOptions::Mode::kReadOnly;
  RegistryReader reader(tmp.path(), ro);
  const Snapshot snap = reader.snapshot();
  EXPECT_EQ(make_view(snap, tmp.path()).writers.at(0).start_time_seconds, 0)
      << "no boot time known: no start time";

  auto servers = std::make_shared<ServerFigures>();
  servers->boot_seconds = double(procfs::read_boot_time("/proc").value());
  const View v = make_view(snap, tmp.path(), {{"servers", servers}});
  const double age = v.time_seconds - v.writers.at(0).start_time_seconds;
  EXPECT_GT(age, 0) << "this process started before its view";
  EXPECT_LT(age, 3600) << "and not an hour before: the start ticks are since boot";
  servers->boot_seconds += 100;
  EXPECT_DOUBLE_EQ(
      make_view(snap, tmp.path(), {{"servers", servers}}).writers.at(0).start_time_seconds,
      v.writers.at(0).start_time_seconds + 100)
      << "the boot time the servers unit posted is the one used";
}

}  // namespace
}  // namespace gym::exporter
