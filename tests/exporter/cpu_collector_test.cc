// The CPU collector (collectors/cpu.h) on real process trees: a server's
// ticks counted once whoever reaps its children, its threads and open
// descriptors.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "collectors/cpu.h"
#include "server_sampler.h"
#include "test_support.h"

namespace gym::exporter {
namespace {

using namespace std::chrono_literals;

const Log kQuiet = [](const std::string&) {};

ServerTarget target_of(const std::string& name, pid_t pid) {
  return testing::pid_target(name, "resources_server", pid);
}

TEST(CpuCollector, CpuOfAChildSeenRunningThenReapedIsCountedOnce) {
  // The child's ticks are seen while it runs, then reach its parent's
  // cutime when reaped: the counter must count them once.
  testing::Ready running, spun;
  testing::Gate exit_now;
  testing::Gate reap;
  testing::Gate done;
  pid_t root = testing::spawn([&] {
    // Only the test holds the gates' write ends open: a child waits for EOF.
    for (testing::Gate* g : {&exit_now, &reap, &done}) g->close_write();
    pid_t child = testing::spawn([&] {
      running.signal();
      volatile uint64_t x = 0;  // 0.4 s of CPU (a wall-clock spin uses less on a busy machine)
      for (timespec t{}; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) == 0 &&
                         double(t.tv_sec) + double(t.tv_nsec) * 1e-9 < 0.4;)
        x = x + 1;
      spun.signal();
      exit_now.wait();
      return 0;
    });
    reap.wait();
    testing::wait_exit(child);
    done.wait();
    return 0;
  });
  running.wait(1);
  testing::SamplerConfig c;
  ServerTarget t;
  t.name = "cpu";
  t.server_type = "resources_server";
  t.pid = root;
  c.targets = {t};
  CpuCollector sampler(make_watcher(c.servers()), [](const std::string&) {});
  std::this_thread::sleep_for(200ms);
  sampler.sample();  // the child is running
  const auto first = sampler.servers().at(0);
  EXPECT_GE(first.threads, 2u) << "the root and the child";
  spun.wait(1);  // the child has spun its 400 ms
  exit_now.open();
  std::this_thread::sleep_for(100ms);
  sampler.sample();  // a zombie, not reaped
  reap.open();
  std::this_thread::sleep_for(100ms);
  sampler.sample();  // reaped: in the root's cutime
  const auto last = sampler.servers().at(0);
  std::ifstream in("/proc/" + std::to_string(root) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto st = procfs::parse_stat(text);
  ASSERT_TRUE(st.has_value());
  const uint64_t truth = st->utime_ticks + st->stime_ticks + st->cutime_ticks + st->cstime_ticks;
  EXPECT_GE(st->cutime_ticks + st->cstime_ticks, 20u) << "the child did spin";
  const uint64_t counted = last.user_ticks + last.system_ticks;
  EXPECT_GE(counted, first.user_ticks + first.system_ticks) << "never falls";
  EXPECT_NEAR(double(counted), double(truth), 2.0)
      << "the root's own ticks plus the child's, once (first sample saw "
      << first.user_ticks + first.system_ticks << ")";
  done.open();
  testing::wait_exit(root);
}

TEST(CpuCollector, ThreadsAndOpenFdsOfTheTree) {
  testing::Ready ready;
  testing::Gate gate;
  pid_t root = testing::spawn([&] {
    std::vector<int> fds;
    for (int i = 0; i < 10; ++i) fds.push_back(::open("/dev/null", O_RDONLY));
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int i = 0; i < 3; ++i)
      threads.emplace_back([&] {
        while (!stop.load()) std::this_thread::sleep_for(1ms);
      });
    // Its descriptors settled before it says so: gate.wait() would close the
    // gate's write end only after, and a sample taken in between counted it
    // (20 against 19 listed, in sanitized builds).
    gate.close_write();
    ready.signal();
    gate.wait();  // one thread waits on the gate (Gate is not thread-safe)
    stop = true;
    for (auto& th : threads) th.join();
    return 0;
  });
  ready.wait(1);
  testing::SamplerConfig c;
  ServerTarget t;
  t.name = "threads";
  t.server_type = "agent_server";
  t.pid = root;
  c.targets = {t};
  CpuCollector sampler(make_watcher(c.servers()), [](const std::string&) {});
  sampler.sample();
  const auto s = sampler.servers().at(0);
  size_t tasks = 0;  // its threads as the kernel lists them (sanitizers add their own)
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(root) + "/task"))
    ++tasks;
  EXPECT_EQ(s.threads, tasks);
  EXPECT_GE(s.threads, 4u) << "the main thread and the three it started";
  ASSERT_TRUE(s.open_fds.has_value());
  size_t listed = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(root) + "/fd"))
    ++listed;
  EXPECT_EQ(*s.open_fds, listed);
  EXPECT_GE(*s.open_fds, 10u);
  gate.open();
  testing::wait_exit(root);
}

TEST(CpuCollector, AnOrphanReapedByASubreaperRootIsCountedOnce) {
  // R (a subreaper) -> M -> G. G uses CPU; M exits, so G is R's; G exits
  // and R reaps it: R's cutime takes G's ticks, which were counted while G
  // ran.
  testing::Ready ready;
  testing::Gate m_exits, g_exits, done;
  const pid_t root = testing::spawn([&] {
    for (testing::Gate* g : {&m_exits, &g_exits, &done}) g->close_write();
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    testing::spawn([&] {
      testing::spawn([&] {
        volatile uint64_t x = 0;  // 0.5 s of CPU (a wall-clock spin uses less on a busy machine)
        for (timespec t{}; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) == 0 &&
                           double(t.tv_sec) + double(t.tv_nsec) * 1e-9 < 0.5;)
          x = x + 1;
        ready.signal();
        g_exits.wait();
        return 0;
      });
      m_exits.wait();
      return 0;
    });
    while (::waitpid(-1, nullptr, 0) > 0) {  // reaps M, then G
    }
    ready.signal();
    done.wait();
    return 0;
  });
  ready.wait(1);
  testing::SamplerConfig c;
  c.targets = {target_of("verifier", root)};
  CpuCollector sampler(make_watcher(c.servers()), kQuiet);
  sampler.sample();  // G has spun
  const auto first = sampler.servers().at(0);
  m_exits.open();
  std::this_thread::sleep_for(100ms);
  g_exits.open();
  ready.wait(1);  // R reaped both
  sampler.sample();
  const auto last = sampler.servers().at(0);
  std::string text;
  ASSERT_EQ(procfs::read_file("/proc/" + std::to_string(root) + "/stat", text),
            procfs::ReadStatus::kOk);
  const auto st = procfs::parse_stat(text);
  ASSERT_TRUE(st.has_value());
  const uint64_t truth = st->utime_ticks + st->stime_ticks + st->cutime_ticks + st->cstime_ticks;
  EXPECT_GE(st->cutime_ticks + st->cstime_ticks, 20u) << "G did spin, and R reaped it";
  const uint64_t counted = last.user_ticks + last.system_ticks;
  EXPECT_GE(counted, first.user_ticks + first.system_ticks);
  EXPECT_NEAR(double(counted), double(truth), 3.0) << "G's ticks once, not twice";
  done.open();
  testing::wait_exit(root);
}

}  // namespace
}  // namespace gym::exporter
