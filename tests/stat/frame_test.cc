// gym-stat's lines: rates over the window between two views, the saturation
// sort and the filter, and label values that cannot reach the terminal raw.
#include <gtest/gtest.h>

#include "frame.h"

namespace gym::stat {
namespace {

using exporter::LimitView;
using exporter::View;

LimitView limit(std::string server, std::string name, int64_t lim, int64_t available,
                uint64_t cancelled) {
  LimitView l;
  l.component = "agent_server";
  l.limit_name = std::move(name);
  l.server_name = std::move(server);
  l.limit = lim;
  l.available = available;
  l.active = lim - available;
  l.admission_cancelled_total = cancelled;
  return l;
}

TEST(Frame, RatesComeFromTheWindowBetweenTwoViewsAndTheFullestLimitComesFirst) {
  View before, now;
  before.time_seconds = 100;
  now.time_seconds = 102;
  before.limits = {limit("a", "tools", 4, 3, 10), limit("b", "rollouts", 2, 0, 0)};
  now.limits = {limit("a", "tools", 4, 3, 16), limit("b", "rollouts", 2, 0, 1)};
  const std::string text = plain(frame(now, &before, {}));
  const size_t a = text.find("\na "), b = text.find("\nb ");
  ASSERT_NE(a, std::string::npos) << text;
  ASSERT_NE(b, std::string::npos) << text;
  EXPECT_LT(b, a) << "b is saturated (2/2), a is not (1/4)";
  EXPECT_NE(text.find("1/4"), std::string::npos);
  // 6 cancellations in 2 s.
  EXPECT_NE(text.substr(a, text.find('\n', a + 1) - a).find("3.0"), std::string::npos) << text;
  const std::string first = plain(frame(now, nullptr, {}));
  EXPECT_EQ(first.find("3.0"), std::string::npos) << "no window yet: no rates";
}

TEST(Frame, TheFilterKeepsMatchingRowsOnly) {
  View now;
  now.limits = {limit("math", "verifiers", 4, 0, 0), limit("code", "verifiers", 8, 8, 0)};
  FrameOptions o;
  o.filter = "math";
  const std::string text = plain(frame(now, nullptr, o));
  EXPECT_NE(text.find("\nmath "), std::string::npos) << text;
  EXPECT_EQ(text.find("\ncode "), std::string::npos) << text;
}

TEST(Frame, ALimitShowsItsProcessesAndStrandedSlots) {
  View now;
  LimitView l = limit("math", "verifiers", 8, 3, 0);
  l.queue_depth = 1;
  l.processes = 2;
  l.stranded_slots = 3;
  now.limits = {l};
  const std::string text = plain(frame(now, nullptr, {}));
  EXPECT_NE(text.find("PROCS STRANDED"), std::string::npos) << text;
  const size_t row = text.find("\nmath ");
  ASSERT_NE(row, std::string::npos) << text;
  const std::string line = text.substr(row + 1, text.find('\n', row + 1) - row - 1);
  EXPECT_NE(line.find("5/8       1      2     3"), std::string::npos) << line;
}

// THROTTLED is the share of CFS periods throttled over the window (over all
// of them without one); OOM the kills of the server's cgroups; a server
// without a CPU account or a cgroup shows dashes.
TEST(Frame, AServersThrottledShareIsOverTheWindowAndItsOomKillsAreShown) {
  auto server = [](std::string name, uint64_t periods, uint64_t throttled) {
    exporter::ServerView s;
    s.server_name = std::move(name);
    s.server_type = "resources_server";
    s.pid = 42;
    s.cpu_periods = periods;
    s.cpu_throttled_periods = throttled;
    s.oom_kills = 3;
    return s;
  };
  View before, now;
  before.servers = {server("sandboxes", 100, 10)};
  now.servers = {server("sandboxes", 300, 160), exporter::ServerView{}};
  now.servers[1].server_name = "plain";
  now.servers[1].server_type = "agent";
  auto row = [](const std::string& text, const std::string& name) {
    const size_t at = text.find("\n" + name + " ");
    return at == std::string::npos ? std::string()
                                   : text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  };
  const std::string text = plain(frame(now, &before, {}));
  EXPECT_NE(text.find("THROTTLED"), std::string::npos) << text;
  const std::string r = row(text, "sandboxes");
  EXPECT_NE(r.find(" 75% "), std::string::npos) << "150 of 200 periods in the window: " << r;
  EXPECT_TRUE(r.ends_with(" 3")) << r;
  EXPECT_NE(row(plain(frame(now, nullptr, {})), "sandboxes").find(" 53% "), std::string::npos)
      << "160 of 300 without a window";
  EXPECT_TRUE(row(text, "plain").ends_with("-          -")) << row(text, "plain");
}

TEST(Frame, TheDeathsPaneListsTheLastMinutesNewestFirstWithCodeOrSignal) {
  View now;
  now.time_seconds = 1000;
  exporter::ProcessDeath crashed, killed;
  crashed.time = 990;
  crashed.server = "math_verifier";
  crashed.pid = 4242;
  crashed.command = "python3";
  crashed.reason = "signal";
  crashed.signal = 11;
  crashed.lifetime_seconds = 0.004;
  killed = crashed;
  killed.time = 998;
  killed.pid = 4343;
  killed.reason = "oom_kill";
  killed.signal = 9;
  killed.lifetime_seconds = 0.3;
  now.deaths = {crashed, killed};
  EXPECT_EQ(plain(frame(now, nullptr, {})).find("DEATHS"), std::string::npos)
      << "no pane where process events are not followed";
  now.deaths_followed = true;
  const std::string text = plain(frame(now, nullptr, {}));
  const size_t pane = text.find("DEATHS (last minute: 2)");
  ASSERT_NE(pane, std::string::npos) << text;
  const size_t oom = text.find("4343", pane), segv = text.find("4242", pane);
  ASSERT_NE(oom, std::string::npos) << text;
  EXPECT_LT(oom, segv) << "newest first";
  const size_t start = text.rfind('\n', oom) + 1;
  const std::string row = text.substr(start, text.find('\n', oom) - start);
  EXPECT_NE(row.find("oom_kill"), std::string::npos) << row;
  EXPECT_NE(row.find("signal 9"), std::string::npos) << row;
  EXPECT_NE(row.find("2s"), std::string::npos) << "2 s ago: " << row;
  EXPECT_NE(text.find("4ms", segv), std::string::npos) << "lived 4 ms";
}

TEST(Frame, ControlCharactersInLabelValuesNeverReachTheTerminal) {
  View now;
  now.registry_dir = "/dev/shm/\x1b[2J";
  now.limits = {limit("evil\x1b]0;title\x07", "tools", 1, 0, 0)};
  const std::string text = plain(frame(now, nullptr, {}));
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_EQ(text.find('\x07'), std::string::npos);
  EXPECT_NE(text.find("evil?]0;title?"), std::string::npos) << text;
}

TEST(Frame, TheVerdictIsTheFirstLineAndADriftIsMarkedWithNoRawControlCharacter) {
  View now;
  now.limits = {limit("math", "verifiers", 4, 0, 0)};
  exporter::Verdict v;
  v.start_seconds = 100;
  v.end_seconds = 130;
  v.entries = {{"limit",
                "math/resources_server/verifiers",
                "math",
                "limit_too_small",
                5.5,
                {{"slots", 4}, {"waiting_mean", 5.5}},
                ""}};
  exporter::LawCheck drift{"limit", "evil\x1b[2J/x/y", "waiting", 3, 1.5, 0.5};
  exporter::LawCheck fine{"limit", "math/resources_server/verifiers", "held", 4, 4, 0.1};
  v.checks = {drift, fine};
  const std::vector<Line> lines = frame(now, nullptr, {}, &v);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0].text,
            "bottleneck: limit math/resources_server/verifiers: limit too small — slots=4, "
            "waiting_mean=5.5");
  const std::string text = plain(lines);
  EXPECT_NE(text.find("VERDICT (window 30s, 1 entries; Little's law: 1 of 2 checks drift)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("! limit evil?[2J/x/y waiting: mean 3 vs 1.5/s (tolerance 0.5)"),
            std::string::npos)
      << text;
  for (const Line& l : lines) EXPECT_EQ(l.text.find('\x1b'), std::string::npos) << l.text;
}

}  // namespace
}  // namespace gym::stat
