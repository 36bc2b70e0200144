// Created times: since when a counter or histogram counts, through live
// writers, a forked child that exits (folded), the totals file, and a totals
// file of an older exporter that did not keep them.
#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "gym/registry_reader.h"
#include "gym/segment_writer.h"
#include "test_support.h"

namespace gym {
namespace {

using namespace std::chrono_literals;
using testing::find_series;
using testing::TempDir;

int64_t unix_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

TEST(Created, TheEarliestStartOfTheWritersAndFoldedTotalsAValueAddsUpSurvivesTheTotalsFile) {
  TempDir tmp;
  const int64_t bounds[] = {10};
  int64_t parent_start = 0, child_start = 0, child_end = 0;
  {
    const int64_t before = unix_ns();
    SegmentWriter writer(tmp.path());
    Counter shared = writer.counter("shared_total", {});
    Histogram h = writer.histogram("sizes", {}, bounds, 1.0);
    const int64_t after = unix_ns();
    shared.add(1);
    h.observe(1);
    std::this_thread::sleep_for(20ms);
    RegistryReader reader(tmp.path());
    {
      const Snapshot& snap = reader.snapshot();
      parent_start = find_series(snap, "shared_total")->created_unix_ns;
      EXPECT_GE(parent_start, before);
      EXPECT_LE(parent_start, after);
      EXPECT_EQ(find_series(snap, "sizes")->created_unix_ns, parent_start);
    }
    // A child counts too, in a segment it starts later, then exits.
    const int64_t fork_at = unix_ns();
    pid_t child = testing::spawn([&] {
      shared.add(2);
      writer.counter("child_only_total", {}).add(1);
      return 0;
    });
    EXPECT_EQ(testing::wait_exit(child), 0);
    child_end = unix_ns();
    const Snapshot& snap = reader.snapshot();
    EXPECT_EQ(snap.stats.retired_segments_total, 1u);
    EXPECT_EQ(find_series(snap, "shared_total")->counter, 3u);
    EXPECT_EQ(find_series(snap, "shared_total")->created_unix_ns, parent_start)
        << "the earliest start of what it adds up: the parent's";
    child_start = find_series(snap, "child_only_total")->created_unix_ns;
    EXPECT_GT(child_start, fork_at);
    EXPECT_LT(child_start, child_end);
    EXPECT_EQ(find_series(snap, "sizes")->created_unix_ns, parent_start);
  }
  // Every writer gone: a new reader has it all from the totals file.
  {
    RegistryReader reader(tmp.path());
    const Snapshot& snap = reader.snapshot();
    EXPECT_EQ(find_series(snap, "shared_total")->created_unix_ns, parent_start);
    EXPECT_EQ(find_series(snap, "child_only_total")->created_unix_ns, child_start);
    EXPECT_EQ(find_series(snap, "sizes")->created_unix_ns, parent_start);
  }
  // A totals file of an older exporter: series lines without the two last
  // fields (native buckets, created). What they hold has no known start, so
  // neither has a value that adds them up, also with a live writer.
  const std::string totals = tmp.sub(RegistryReader::kTotalsFile);
  std::ifstream in(totals);
  std::ostringstream old;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("series", 0) == 0)
      for (int i = 0; i < 2; ++i) line.erase(line.rfind(' '));
    old << line << '\n';
  }
  in.close();
  std::ofstream(totals) << old.str();
  {
    SegmentWriter writer(tmp.path());
    writer.counter("shared_total", {}).add(1);
    writer.counter("new_total", {}).add(1);
    RegistryReader reader(tmp.path());
    const Snapshot& snap = reader.snapshot();
    EXPECT_TRUE(snap.problems.empty()) << snap.problems.front();
    EXPECT_EQ(find_series(snap, "shared_total")->counter, 4u) << "the old totals were read";
    EXPECT_EQ(find_series(snap, "shared_total")->created_unix_ns, 0)
        << "absent, not the live writer's start";
    EXPECT_GT(find_series(snap, "new_total")->created_unix_ns, child_end);
  }
}

}  // namespace
}  // namespace gym
