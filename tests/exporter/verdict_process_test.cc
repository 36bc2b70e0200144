// The verdict with real processes: for each cause, processes that make it
// (a limit too small for its callers, slots stranded in an idle process of
// a limit whose other process queues, an operation that waits on an
// unmetered semaphore longer than it runs, a loop that stops beating, a
// server whose sandbox burns through a real cpu cgroup's quota) write the
// registry, the test reads Views of it every 100 ms into a window, and that
// cause must come first; a quiet host has no bottleneck. Little's law holds
// for every check the windows allow.
#include <gtest/gtest.h>
#include <sys/prctl.h>

#include <csignal>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "collectors/cgroups.h"
#include "collectors/servers.h"
#include "gym/metered_semaphore.h"
#include "gym/registry_reader.h"
#include "gym/resources_operation.h"
#include "gym/runtime_meter.h"
#include "gym/server_identity.h"
#include "real_cgroup.h"
#include "server_sampler.h"
#include "servers/board.h"
#include "servers/watcher.h"
#include "snapshot/verdict.h"
#include "test_support.h"

namespace gym::exporter {
namespace {

using testing::Gate;
using testing::Ready;
using testing::TempDir;

// A child that runs `threads` workers, each doing `work` again and again,
// until the parent opens `stop`; it signals `ready` once they run.
pid_t workers(int threads, Gate& stop, Ready& ready, const std::function<void()>& setup,
              const std::function<void()>& work) {
  return testing::spawn([&]() -> int {
    setup();
    std::atomic<bool> stopping{false};
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i)
      pool.emplace_back([&] {
        while (!stopping.load()) work();
      });
    ready.signal();
    stop.wait();
    stopping = true;
    for (std::thread& t : pool) t.join();
    return 0;
  });
}

// Views of the registry (and the board's figures) every 100 ms for
// `seconds`, as one window; `each` runs before every View (a sample).
Verdict judge(const std::string& dir, double seconds, ServerBoard* board = nullptr,
              const std::function<void()>& each = {}) {
  RegistryReader reader(dir);
  ViewBuilder builder;
  WindowSampler windows(1e9);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (each) each();
    View v;
    builder.build(reader.snapshot(), dir, board ? board->read() : BoardFigures{}, v);
    windows.add(v);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return verdict(*windows.current(), {});
}

void expect_the_law_holds(const Verdict& v) {
  for (const LawCheck& c : v.checks)
    EXPECT_TRUE(c.holds()) << c.place << " " << c.subject << " " << c.quantity << ": " << c.mean
                           << " vs " << c.per_second << " (tolerance " << c.tolerance << ")";
}

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// A child with the math server's verifiers limit of `slots`, whose
// `threads` workers each hold a slot for `hold_ms`, again and again (none:
// the limit open and idle).
pid_t holders(const std::string& dir, int64_t slots, int threads, int hold_ms, Gate& stop,
              Ready& ready) {
  std::unique_ptr<SegmentWriter> w;  // the child's: made and used there only
  std::unique_ptr<MeteredSemaphore> sem;
  return workers(
      threads, stop, ready,
      [&] {
        w = std::make_unique<SegmentWriter>(dir);
        sem = std::make_unique<MeteredSemaphore>(slots, Component::kResourcesServer, "verifiers",
                                                 "math", std::nullopt, *w);
      },
      [&] {
        SemaphoreGuard hold(*sem);
        sleep_ms(hold_ms);
      });
}

// A scenario's children, held until judged: each signals `ready` once it
// runs, and all stop when `stop` opens.
struct Scene {
  TempDir tmp;
  Gate stop;
  Ready ready;
  std::vector<pid_t> children;
  // judge() while they run; then they are stopped and must exit cleanly.
  Verdict judged(double seconds, ServerBoard* board = nullptr,
                 const std::function<void()>& each = {}) {
    stop.close_read();
    ready.wait(int(children.size()));
    const Verdict v = judge(tmp.path(), seconds, board, each);
    stop.open();
    for (pid_t c : children) EXPECT_EQ(testing::wait_exit(c), 0);
    return v;
  }
};

TEST(VerdictProcesses, ALimitTooSmallForItsCallersComesFirstAndItsLawHolds) {
  Scene s;
  s.children = {holders(s.tmp.path(), 2, 6, 50, s.stop, s.ready)};
  const Verdict v = s.judged(2.5);
  ASSERT_FALSE(v.entries.empty());
  EXPECT_EQ(v.entries[0].subject, "math/resources_server/verifiers");
  EXPECT_EQ(v.entries[0].cause, "limit_too_small");
  EXPECT_GT(v.entries[0].score, 2) << "6 callers, 2 slots: about 4 wait";
  size_t limit_checks = 0;
  for (const LawCheck& c : v.checks) limit_checks += c.place == "limit" ? 1 : 0;
  EXPECT_EQ(limit_checks, 2u) << "its waiting and its held slots";
  expect_the_law_holds(v);
}

TEST(VerdictProcesses, FreeSlotsInAnIdleProcessBesideAQueueAreStranded) {
  Scene s;
  s.children = {holders(s.tmp.path(), 4, 8, 50, s.stop, s.ready),  // queues
                holders(s.tmp.path(), 4, 0, 0, s.stop, s.ready)};  // idle
  const Verdict v = s.judged(2.5);
  ASSERT_FALSE(v.entries.empty());
  EXPECT_EQ(v.entries[0].cause, "stranded_slots");
  expect_the_law_holds(v);
}

// One slot, first come first served, not metered: the operation's limit.
// (A std::counting_semaphore lets a releasing thread take its slot back at
// once, starving the waiters, slower ones the most: a sanitized build's.)
struct FairLimit {
  std::mutex mu;
  std::condition_variable turn;
  uint64_t next = 0, serving = 0;
  void acquire() {
    std::unique_lock<std::mutex> lock(mu);
    const uint64_t ticket = next++;
    turn.wait(lock, [&] { return serving == ticket; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++serving;
    }
    turn.notify_all();
  }
};

TEST(VerdictProcesses, AnOperationThatWaitsLongerThanItRunsComesFirst) {
  Scene s;
  std::unique_ptr<SegmentWriter> w;
  std::unique_ptr<OperationMetrics> metrics;
  FairLimit limit;
  s.children = {workers(
      4, s.stop, s.ready,
      [&] {
        w = std::make_unique<SegmentWriter>(s.tmp.path());
        declare_server("math", "resources_server", *w);
        metrics = std::make_unique<OperationMetrics>(*w);
      },
      [&] {
        ResourcesOperation op(limit, Operation::kVerify, Executor::kSubprocess, {}, *metrics);
        sleep_ms(30);
      })};
  const Verdict v = s.judged(2.5);
  ASSERT_FALSE(v.entries.empty());
  EXPECT_EQ(v.entries[0].subject, "math/verify/subprocess") << describe(v.entries[0]);
  EXPECT_EQ(v.entries[0].cause, "queue_dominates") << describe(v.entries[0]);
  expect_the_law_holds(v);
}

TEST(VerdictProcesses, ALoopThatStopsBeatingIsBlocked) {
  Scene s;
  s.children = {testing::spawn([&]() -> int {
    SegmentWriter w(s.tmp.path());
    declare_server("agent", "agent_server", w);
    LoopMeter loop(std::nullopt, w);
    loop.beat(0, 100'000'000);  // due again in 0.1 s: then it blocks
    s.ready.signal();
    s.stop.wait();
    return 0;
  })};
  const Verdict v = s.judged(1.6);
  ASSERT_FALSE(v.entries.empty());
  EXPECT_EQ(v.entries[0].place, "server");
  EXPECT_EQ(v.entries[0].subject, "agent");
  EXPECT_EQ(v.entries[0].cause, "blocked_event_loop");
}

TEST(VerdictProcesses, ALimitWhoseSandboxBurnsThroughItsCpuQuotaIsCpuStarved) {
  RealCpuCgroup cg(20000, 100000);  // 0.2 CPU
  if (!cg.ok()) GTEST_SKIP() << "no cpu cgroup can be made here: " << cg.why();
  Scene s;
  Ready joined;
  std::unique_ptr<SegmentWriter> w;
  std::unique_ptr<MeteredSemaphore> sem;
  s.children = {workers(
      3, s.stop, s.ready,
      [&] {
        w = std::make_unique<SegmentWriter>(s.tmp.path());
        declare_server("sandboxes", "resources_server", *w);
        sem = std::make_unique<MeteredSemaphore>(1, Component::kResourcesServer, "sandboxes",
                                                 "sandboxes", std::nullopt, *w);
        testing::spawn([&]() -> int {  // the sandbox: burns until its parent is gone
          ::prctl(PR_SET_PDEATHSIG, SIGKILL);
          s.stop.close_write();  // the gate opens when the test's end closes
          if (!cg.join()) return 2;
          joined.signal();
          volatile uint64_t spin = 0;
          for (;;) spin = spin + 1;
        });
        joined.wait(1);  // in its cgroup when the servers unit first sees it
      },
      [&] {
        SemaphoreGuard hold(*sem);
        sleep_ms(50);
      })};
  ServersConfig sc;
  sc.targets = {testing::pid_target("sandboxes", "resources_server", s.children[0])};
  // As the exporter has them: the servers unit's rows, the cgroups' figures.
  auto board = std::make_shared<ServerBoard>();
  const auto watcher = make_watcher(sc);
  ServersCollector servers(
      watcher, [](const std::string&) {}, board);
  CgroupCollector cgroups(
      watcher, [](const std::string&) {}, 5, "", {}, board);
  const Verdict v = s.judged(2.5, board.get(), [&] {
    servers.sample();
    cgroups.sample();
  });
  ASSERT_FALSE(v.entries.empty());
  EXPECT_EQ(v.entries[0].subject, "sandboxes/resources_server/sandboxes");
  EXPECT_EQ(v.entries[0].cause, "starved_cpu");
}

TEST(VerdictProcesses, AQuietHostHasNoBottleneck) {
  Scene s;
  s.children = {holders(s.tmp.path(), 4, 2, 20, s.stop, s.ready)};
  const Verdict v = s.judged(1.5);
  EXPECT_TRUE(v.entries.empty()) << describe(v.entries[0]);
  EXPECT_EQ(headline(v), "no bottleneck");
  expect_the_law_holds(v);
}

}  // namespace
}  // namespace gym::exporter
