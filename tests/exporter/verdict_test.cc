// The verdict's rules and the Little's-law checks over windows of Views
// built here (the real-process scenarios are verdict_process_test.cc): each
// cause from the figures that make it, the ranking, the windows' means, and
// a check that drifts when a gauge and its durations disagree.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "snapshot/verdict.h"
#include "snapshot/window.h"

namespace gym::exporter {
namespace {

LimitView limit(std::string server, int64_t slots, int64_t active, int64_t queue) {
  LimitView l;
  l.component = "resources_server";
  l.limit_name = "verifiers";
  l.server_name = std::move(server);
  l.limit = slots;
  l.active = active;
  l.available = slots - active;
  l.queue_depth = queue;
  l.processes = 1;
  return l;
}

ServerView server(std::string name) {
  ServerView s;
  s.server_name = std::move(name);
  s.server_type = "resources_server";
  return s;
}

// A window of `n` Views a second apart, each made by `at(i, view)`.
Window window(int n, const std::function<void(int, View&)>& at) {
  WindowSampler w(1e9);
  for (int i = 0; i < n; ++i) {
    View v;
    v.time_seconds = 1000 + i;
    at(i, v);
    w.add(v);
  }
  return w.open();
}

const VerdictEntry* first(const Verdict& v) {
  return v.entries.empty() ? nullptr : &v.entries.front();
}

double evidence(const VerdictEntry& e, const std::string& name) {
  for (const auto& [k, v] : e.evidence)
    if (k == name) return v;
  return NAN;
}

TEST(Verdict, AQuietHostHasNoBottleneck) {
  const Verdict v = verdict(window(5,
                                   [](int, View& view) {
                                     view.limits = {limit("math", 4, 1, 0)};
                                     view.servers = {server("math")};
                                   }),
                            {});
  EXPECT_TRUE(v.entries.empty());
  EXPECT_EQ(headline(v), "no bottleneck");
}

TEST(Verdict, AFullLimitWithAQueueIsTooSmallWithItsWaitsAndTimeoutsAsEvidence) {
  const Verdict v = verdict(window(11,
                                   [](int i, View& view) {
                                     LimitView l = limit("math", 4, 4, 5);
                                     l.admission_timeouts_total = uint64_t(2 * i);
                                     l.admissions_total = uint64_t(10 * i);
                                     view.limits = {l, limit("code", 8, 8, 1)};
                                   }),
                            {});
  ASSERT_EQ(v.entries.size(), 2u);
  const VerdictEntry& e = v.entries[0];
  EXPECT_EQ(e.subject, "math/resources_server/verifiers") << "5 waiting rank above 1";
  EXPECT_EQ(e.cause, "limit_too_small");
  EXPECT_DOUBLE_EQ(e.score, 5);
  EXPECT_DOUBLE_EQ(evidence(e, "saturation"), 1);
  EXPECT_DOUBLE_EQ(evidence(e, "timeouts_per_second"), 2);
  EXPECT_DOUBLE_EQ(evidence(e, "admissions_per_second"), 10);
  EXPECT_NE(headline(v).find("bottleneck: limit math/resources_server/verifiers: limit too small"),
            std::string::npos)
      << headline(v);
}

TEST(Verdict, ALimitWithFreeSlotsBesideAQueueIsStrandedNotTooSmall) {
  const Verdict v = verdict(window(5,
                                   [](int, View& view) {
                                     LimitView l = limit("math", 8, 5, 3);
                                     l.processes = 2;
                                     l.stranded_slots = 3;
                                     view.limits = {l};
                                   }),
                            {});
  ASSERT_NE(first(v), nullptr);
  EXPECT_EQ(first(v)->cause, "stranded_slots");
}

// Servers' CFS periods `periods` a second, `throttled` of them throttled.
void throttled(View& view, int i, uint64_t throttled) {
  ServerView s = server("math");
  s.cpu_periods = uint64_t(10 * i);
  s.cpu_throttled_periods = throttled * uint64_t(i);
  view.servers = {s};
}

TEST(Verdict, AFullLimitOfAThrottledServerIsCpuStarvedAndAThrottledServerAloneIsAnEntry) {
  Verdict v = verdict(window(5,
                             [](int i, View& view) {
                               view.limits = {limit("math", 4, 4, 2)};
                               throttled(view, i, 6);
                             }),
                      {});
  ASSERT_EQ(v.entries.size(), 1u) << "the server's trouble is the limit's cause, not an entry";
  EXPECT_EQ(v.entries[0].cause, "starved_cpu");
  EXPECT_DOUBLE_EQ(evidence(v.entries[0], "cpu_throttled_share"), 0.6);
  v = verdict(window(5, [](int i, View& view) { throttled(view, i, 6); }), {});
  ASSERT_EQ(v.entries.size(), 1u);
  EXPECT_EQ(v.entries[0].place, "server");
  EXPECT_EQ(v.entries[0].cause, "starved_cpu");
  EXPECT_DOUBLE_EQ(v.entries[0].score, 0.06) << "a tenth of its share";
  v = verdict(window(5, [](int i, View& view) { throttled(view, i, 1); }), {});
  EXPECT_TRUE(v.entries.empty()) << "10% throttled is under the rule's 25%";
}

TEST(Verdict, ABlockedLoopOrOomKillsMakeTheirCausesAndMemoryComesFirst) {
  Verdict v = verdict(window(5,
                             [](int i, View& view) {
                               ServerView s = server("agent");
                               s.loop_blocked_seconds = 0.5 * i;
                               view.servers = {s};
                             }),
                      {});
  ASSERT_NE(first(v), nullptr);
  EXPECT_EQ(first(v)->cause, "blocked_event_loop");
  EXPECT_DOUBLE_EQ(evidence(*first(v), "event_loop_blocked_seconds"), 2);
  v = verdict(window(5,
                     [](int i, View& view) {
                       ServerView s = server("agent");
                       s.loop_blocked_seconds = 5;
                       s.oom_kills = uint64_t(i / 2);
                       view.servers = {s};
                     }),
              {});
  ASSERT_NE(first(v), nullptr);
  EXPECT_EQ(first(v)->cause, "memory");
  EXPECT_DOUBLE_EQ(evidence(*first(v), "oom_kills"), 2);
  EXPECT_FALSE(std::isnan(evidence(*first(v), "event_loop_blocked_seconds")))
      << "every condition met is evidence";
}

OperationView operation(int64_t queued, int64_t active, double queued_s, double ran_s,
                        uint64_t ran) {
  OperationView o;
  o.operation = "verify";
  o.executor = "subprocess";
  o.server_name = "math";
  o.queued = queued;
  o.active = active;
  o.queue_duration.count = ran;
  o.queue_duration.sum = queued_s;
  HistogramView& d = o.duration["ok"];
  d.count = ran;
  d.sum = ran_s;
  return o;
}

TEST(Verdict, AnOperationThatWaitsLongerThanItRunsIsAnEntryUnlessItsServerHasAFullLimit) {
  auto ops = [](int i, View& view) {
    view.operations = {operation(3, 1, 3.0 * i, 1.0 * i, uint64_t(2 * i))};
  };
  Verdict v = verdict(window(5, ops), {});
  ASSERT_EQ(v.entries.size(), 1u);
  EXPECT_EQ(v.entries[0].place, "operation");
  EXPECT_EQ(v.entries[0].cause, "queue_dominates");
  EXPECT_DOUBLE_EQ(evidence(v.entries[0], "queue_over_run"), 3);
  EXPECT_DOUBLE_EQ(evidence(v.entries[0], "run_mean_seconds"), 0.5);
  v = verdict(window(5,
                     [&](int i, View& view) {
                       ops(i, view);
                       view.limits = {limit("math", 4, 4, 3)};
                     }),
              {});
  ASSERT_EQ(v.entries.size(), 1u) << "it waits behind its server's full limit";
  EXPECT_EQ(v.entries[0].place, "limit");
  v = verdict(window(5,
                     [](int i, View& view) {
                       view.operations = {operation(3, 3, 1.0 * i, 3.0 * i, uint64_t(i))};
                     }),
              {});
  EXPECT_TRUE(v.entries.empty()) << "it waits a third of its run time";
}

TEST(Verdict, AnOperationAndALimitFirstSeenInTheWindowAreJudgedOnAllTheirCounts) {
  // Absent from the first View (its process started after it): everything
  // its histograms and counters hold was counted in the window.
  const Verdict v =
      verdict(window(11,
                     [](int i, View& view) {
                       if (i == 0) return;
                       view.operations = {operation(3, 1, 3.0 * i, 1.0 * i, uint64_t(2 * i))};
                       view.limits = {limit("code", 2, 2, 2)};
                       view.limits[0].admissions_total = uint64_t(4 * i);
                     }),
              {});
  ASSERT_EQ(v.entries.size(), 2u);
  const VerdictEntry& op = v.entries[0].place == "operation" ? v.entries[0] : v.entries[1];
  EXPECT_EQ(op.cause, "queue_dominates");
  EXPECT_DOUBLE_EQ(evidence(op, "queue_over_run"), 3);
  EXPECT_DOUBLE_EQ(evidence(op, "finished_per_second"), 2);
  const VerdictEntry& lim = v.entries[0].place == "limit" ? v.entries[0] : v.entries[1];
  EXPECT_DOUBLE_EQ(evidence(lim, "admissions_per_second"), 4);
}

TEST(Verdict, OneViewJudgesByItsGaugesAlone) {
  View now;
  now.limits = {limit("math", 4, 4, 6)};
  now.operations = {operation(6, 2, 0, 0, 0)};
  ServerView s = server("math");
  s.cpu_periods = 100;
  s.cpu_throttled_periods = 90;
  now.servers = {s};
  const Verdict v = verdict(window_of(now), {});
  ASSERT_EQ(v.entries.size(), 1u);
  EXPECT_EQ(v.entries[0].cause, "limit_too_small") << "throttling needs a window";
  EXPECT_TRUE(std::isnan(evidence(v.entries[0], "admissions_per_second"))) << "no rates";
  EXPECT_TRUE(v.checks.empty()) << "no law without a window";
}

TEST(Window, MeansAreOverTimeAndARowThatAppearsLateCountsZeroBefore) {
  WindowSampler s(10);
  for (int i = 0; i <= 10; ++i) {
    View v;
    v.time_seconds = 100 + i;
    v.limits = {limit("math", 4, 4, i < 5 ? 0 : 4)};
    if (i >= 6) v.operations = {operation(2, 0, 0, 0, 0)};
    s.add(v);
  }
  ASSERT_EQ(s.closed(), 1u);
  const Window& w = *s.current();
  EXPECT_DOUBLE_EQ(w.seconds(), 10);
  const RowTraces& l = w.limits.at(w.last.limits[0].key());
  // 0 for 4 s, a ramp to 4 over the fifth second, then 4 for 5 s.
  EXPECT_DOUBLE_EQ(w.mean(l.queue), (2.0 + 20.0) / 10);
  const RowTraces& o = w.operations.at(w.last.operations[0].key());
  EXPECT_DOUBLE_EQ(w.mean(o.queue), (1.0 + 8.0) / 10);
  EXPECT_DOUBLE_EQ(s.open().seconds(), 0) << "the next window starts where this one ended";
}

// A limit whose queue gauge says `waiting` while its waits accumulate
// `per_second` seconds a second, over 30 one-second Views.
Verdict law(double waiting, double per_second) {
  return verdict(window(31,
                        [&](int i, View& view) {
                          LimitView l = limit("math", 4, 1, int64_t(waiting));
                          l.wait_duration.count = uint64_t(i);
                          l.wait_duration.sum = per_second * i;
                          view.limits = {l};
                        }),
                 {});
}

TEST(LittlesLaw, AWindowOfManyChecksAllowsMoreStandardErrorsEachSoThatNoneDriftsByChance) {
  // Three at least; then as many that all of a window's checks together
  // drift by noise alone with a chance of 1% (Bonferroni).
  EXPECT_DOUBLE_EQ(law_sigmas(1), 3);
  EXPECT_DOUBLE_EQ(law_sigmas(2), 3);
  EXPECT_NEAR(law_sigmas(10), 3.2905, 1e-3);
  EXPECT_NEAR(law_sigmas(70), 3.8032, 1e-3);
  EXPECT_NEAR(law_sigmas(200), 4.0556, 1e-3);
  const Verdict v = law(2, 2);
  ASSERT_EQ(v.checks.size(), 1u);
  EXPECT_GT(v.checks[0].spread, 0);
  EXPECT_GE(v.checks[0].tolerance, 3 * v.checks[0].spread);
}

TEST(LittlesLaw, AQueueThatMatchesItsWaitTimeHoldsAndOneThatDoesNotDrifts) {
  Verdict v = law(3, 3);
  ASSERT_EQ(v.checks.size(), 1u);
  EXPECT_EQ(v.checks[0].quantity, "waiting");
  EXPECT_TRUE(v.checks[0].holds());
  EXPECT_DOUBLE_EQ(v.checks[0].ratio(), 1);
  v = law(3, 1.5);  // half the waits missing from the histogram: a counting bug
  ASSERT_EQ(v.checks.size(), 1u);
  EXPECT_FALSE(v.checks[0].holds()) << v.checks[0].tolerance;
  EXPECT_DOUBLE_EQ(v.checks[0].ratio(), 2);
  EXPECT_TRUE(law(0, 0.01).checks.empty()) << "too little traffic to tell";
}

}  // namespace
}  // namespace gym::exporter
