// The memory sampler on real process trees.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fcntl.h>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "collectors/memory.h"
#include "gym/server_identity.h"
#include "server_sampler.h"
#include "test_support.h"

namespace gym::exporter {
namespace {

using namespace std::chrono_literals;

const Log kQuiet = [](const std::string&) {};

testing::ServerSampler::Server sample_pid(pid_t pid, bool pss = true, double pss_interval = 0) {
  testing::SamplerConfig c;
  ServerTarget t;
  t.name = "server";
  t.server_type = "resources_server";
  t.pid = pid;
  t.pss = pss;
  c.targets = {t};
  c.pss_interval_seconds = pss_interval;
  testing::ServerSampler sampler(c, nullptr, [](const std::string&) {});
  sampler.sample();
  return sampler.servers().at(0);
}

TEST(MemoryCollector, ThreeLevelTreeWithAChildForkedFromANonMainThread) {
  testing::Gate gate;
  testing::Ready ready;
  pid_t root = testing::spawn([&] {
    // Root: a second thread forks the child; the child forks the grandchild.
    std::thread t([&] {
      pid_t child = testing::spawn([&] {
        pid_t grandchild = testing::spawn([&] {
          ready.signal();
          gate.wait();
          return 0;
        });
        gate.wait();
        testing::wait_exit(grandchild);
        return 0;
      });
      gate.wait();
      testing::wait_exit(child);
    });
    t.join();
    return 0;
  });
  ready.wait(1);
  const auto s = sample_pid(root);
  EXPECT_EQ(s.root_pid, root);
  EXPECT_EQ(s.processes, 3u) << "threads are not processes";
  EXPECT_GT(s.rss, 0u);
  ASSERT_TRUE(s.pss.has_value());
  EXPECT_GT(*s.pss, 0u);
  EXPECT_LE(*s.pss, s.rss);
  gate.open();
  EXPECT_EQ(testing::wait_exit(root), 0);
}

// R -> M -> L; M exits. Without a subreaper L goes to init and leaves the
// tree; with R as subreaper L stays.
void middle_exits(bool subreaper, uint64_t expected) {
  testing::Gate gate;
  testing::Ready ready;
  pid_t root = testing::spawn([&] {
    if (subreaper) ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    pid_t middle = testing::spawn([&] {
      testing::spawn([&] {  // the leaf outlives its parent
        gate.wait();
        return 0;
      });
      return 0;
    });
    testing::wait_exit(middle);
    ready.signal();
    gate.wait();
    return 0;
  });
  ready.wait(1);
  const auto s = sample_pid(root);
  EXPECT_EQ(s.processes, expected) << (subreaper ? "with" : "without") << " a subreaper";
  gate.open();
  testing::wait_exit(root);
}

TEST(MemoryCollector, AnOrphanNeverSeenInTheTreeIsNotTheServers) {
  middle_exits(false, 1);
}
TEST(MemoryCollector, UnderASubreaperOrphansStayInTheTree) {
  middle_exits(true, 2);
}

// R -> M -> L; M exits after a sample saw L: L (handed to init) stays R's
// by lineage, and so does the child L forks after.
TEST(MemoryCollector, AnOrphanSeenBeforeStaysInItsServerByLineageWithItsNewChildren) {
  testing::Gate middle_exits, leaf_forks, end;
  testing::Ready ready;
  pid_t root = testing::spawn([&] {
    pid_t middle = testing::spawn([&] {
      testing::spawn([&] {  // the leaf
        middle_exits.close_write();
        leaf_forks.wait();
        pid_t grandchild = testing::spawn([&] {
          ready.signal();
          end.wait();
          return 0;
        });
        ready.signal();
        end.wait();
        testing::wait_exit(grandchild);
        return 0;
      });
      leaf_forks.close_write();
      ready.signal();
      middle_exits.wait();
      return 0;
    });
    middle_exits.close_write();
    leaf_forks.close_write();
    testing::wait_exit(middle);
    ready.signal();
    end.wait();
    return 0;
  });
  ready.wait(1);
  testing::SamplerConfig c;
  ServerTarget t;
  t.name = "server";
  t.server_type = "agent";
  t.pid = root;
  c.targets = {t};
  testing::ServerSampler sampler(c, nullptr, [](const std::string&) {});
  sampler.sample();
  EXPECT_EQ(sampler.servers().at(0).processes, 3u);
  EXPECT_EQ(sampler.servers().at(0).escaped, 0u);
  middle_exits.open();
  ready.wait(1);  // the root reaped the middle process
  sampler.sample();
  EXPECT_EQ(sampler.servers().at(0).processes, 2u) << "the root and the orphaned leaf";
  EXPECT_EQ(sampler.servers().at(0).escaped, 1u);
  leaf_forks.open();
  ready.wait(2);
  sampler.sample();
  EXPECT_EQ(sampler.servers().at(0).processes, 3u) << "the leaf's new child is the server's too";
  EXPECT_EQ(sampler.servers().at(0).escaped, 2u);
  end.open();
  EXPECT_EQ(testing::wait_exit(root), 0);
  sampler.sample();
  EXPECT_EQ(sampler.servers().at(0).processes, 0u) << "the root is gone: the server is down";
  EXPECT_EQ(sampler.servers().at(0).escaped, 0u);
}

TEST(MemoryCollector, SharedMappingCountsTwiceInRssAndOnceInPss) {
  constexpr size_t kMiB = 1 << 20;
  constexpr size_t kShared = 64 * kMiB;
  testing::Gate gate;
  testing::Ready ready;
  pid_t root = testing::spawn([&] {
    void* p = ::mmap(nullptr, kShared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    std::memset(p, 1, kShared);
    pid_t child = testing::spawn([&] {
      volatile char sum = 0;  // touch every page in the child too
      for (size_t i = 0; i < kShared; i += 4096) sum = char(sum + static_cast<char*>(p)[i]);
      ready.signal();
      gate.wait();
      return 0;
    });
    gate.wait();
    testing::wait_exit(child);
    return 0;
  });
  ready.wait(1);
  const auto s = sample_pid(root);
  EXPECT_EQ(s.processes, 2u);
  EXPECT_GE(s.rss, 2 * kShared) << "each process has the mapping resident";
  ASSERT_TRUE(s.pss.has_value());
  EXPECT_GE(*s.pss, kShared);
  // RSS = 2N + private, PSS = N + private: the shared N counts once less in
  // PSS. (Private memory, a sanitizer's shadow included, cancels out.)
  ASSERT_GT(s.rss, *s.pss);
  EXPECT_GE(s.rss - *s.pss, kShared * 9 / 10) << "PSS splits the shared pages";
  gate.open();
  testing::wait_exit(root);
}

TEST(MemoryCollector, AZombieAddsNothing) {
  testing::Gate gate;
  testing::Ready ready;
  pid_t root = testing::spawn([&] {
    testing::spawn([] { return 0; });  // exits at once, never reaped: a zombie
    std::this_thread::sleep_for(100ms);
    ready.signal();
    gate.wait();
    return 0;
  });
  ready.wait(1);
  const auto s = sample_pid(root);
  EXPECT_EQ(s.processes, 1u);
  gate.open();
  testing::wait_exit(root);
}

TEST(MemoryCollector, ARootPidNowHeldByAnotherProcessCountsAsGone) {
  testing::SamplerConfig c;
  testing::Gate first_gate;
  pid_t first = testing::spawn([&] {
    first_gate.wait();
    return 0;
  });
  ServerTarget t;
  t.name = "server";
  t.server_type = "model_server";
  t.pid = first;
  c.targets = {t};
  testing::ServerSampler sampler(c, nullptr, [](const std::string&) {});
  sampler.sample();
  ASSERT_EQ(sampler.servers().at(0).processes, 1u);
  first_gate.open();
  testing::wait_exit(first);
  std::this_thread::sleep_for(30ms);  // a later clock tick

  testing::Gate gate;
  const pid_t reused = testing::spawn_with_pid(first, gate);
  if (reused != first) GTEST_SKIP() << "cannot steer pid allocation here (needs root)";
  sampler.sample();
  const auto s = sampler.servers().at(0);
  EXPECT_FALSE(s.root_pid.has_value());
  EXPECT_EQ(s.processes, 0u);
  EXPECT_EQ(s.rss, 0u);
  gate.open();
  testing::wait_exit(reused);
}

TEST(MemoryCollector, ADeclaredServerIsSampledWithNoConfiguration) {
  testing::TempDir tmp;
  testing::Gate gate;
  testing::Ready ready;
  pid_t server = testing::spawn([&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    declare_server("math_verifier", "resources_server");
    // A verifier it forks inherits the declaration; the server is the oldest.
    pid_t verifier = testing::spawn([&] {
      SegmentWriter::process().counter("x_total", {}).add();  // its own segment
      ready.signal();
      gate.wait();
      return 0;
    });
    gate.wait();
    testing::wait_exit(verifier);
    return 0;
  });
  ready.wait(1);
  auto registry = std::make_shared<SharedRegistry>(tmp.path());
  testing::ServerSampler sampler(testing::SamplerConfig{}, registry, [](const std::string&) {});
  sampler.sample();
  const auto servers = sampler.servers();
  ASSERT_EQ(servers.size(), 1u);
  EXPECT_EQ(servers[0].name, "math_verifier");
  EXPECT_EQ(servers[0].server_type, "resources_server");
  EXPECT_EQ(servers[0].root_pid, server);
  EXPECT_EQ(servers[0].processes, 2u);
  gate.open();
  testing::wait_exit(server);
}

TEST(MemoryCollector, BetweenPssReadsTheLastValueStandsUntilTheTreeChanges) {
  testing::Gate gate;
  testing::Gate grow;
  testing::Ready ready;
  pid_t root = testing::spawn([&] {
    ready.signal();
    grow.wait();
    pid_t child = testing::spawn([&] {
      ready.signal();
      gate.wait();
      return 0;
    });
    gate.wait();
    testing::wait_exit(child);
    return 0;
  });
  ready.wait(1);
  testing::SamplerConfig c;
  ServerTarget t;
  t.name = "server";
  t.server_type = "agent_server";
  t.pid = root;
  c.targets = {t};
  c.pss_interval_seconds = 3600;
  testing::ServerSampler sampler(c, nullptr, [](const std::string&) {});
  sampler.sample();
  const auto first = sampler.servers().at(0);
  ASSERT_TRUE(first.pss.has_value()) << "the first sample reads PSS";
  sampler.sample();
  EXPECT_EQ(sampler.servers().at(0).pss, first.pss) << "not due: the last value stands";
  grow.open();
  ready.wait(1);
  sampler.sample();
  EXPECT_EQ(sampler.servers().at(0).processes, 2u);
  EXPECT_FALSE(sampler.servers().at(0).pss.has_value()) << "the tree changed: RSS only";
  gate.open();
  testing::wait_exit(root);
}

TEST(MemoryCollector, StartSamplesAtOnceAndStopTakesAFinalSample) {
  testing::SamplerConfig c;
  c.interval_seconds = 3600;
  ServerTarget t;
  t.name = "self";
  t.server_type = "other";
  t.pid = ::getpid();
  c.targets = {t};
  testing::ServerSampler sampler(c, nullptr, [](const std::string&) {});
  EXPECT_TRUE(sampler.servers().empty());
  sampler.start();
  EXPECT_EQ(sampler.servers().size(), 1u) << "a sample at start";
  sampler.stop();  // returns at once despite the hour-long interval
  EXPECT_EQ(sampler.servers().at(0).processes, 1u);
}

// Sums a field ("Rss", "Pss") of the smaps_rollup of each pid, in bytes.
uint64_t rollup_sum(const std::vector<pid_t>& pids, const std::string& field) {
  uint64_t sum = 0;
  for (pid_t pid : pids) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
    std::string line;
    while (std::getline(in, line))
      if (line.starts_with(field + ":")) sum += std::stoull(line.substr(field.size() + 1)) * 1024;
  }
  return sum;
}

TEST(MemoryCollector, PssNeverExceedsRssWhileTheTreeGrowsAndShrinks) {
  // RSS from stat at scan time and PSS later from smaps_rollup let PSS pass
  // RSS in 16 of 40 samples of a growing process; with both from one read it
  // cannot.
  testing::Gate gate;
  testing::Ready ready;
  pid_t root = testing::spawn([&] {
    pid_t child = testing::spawn([&] {
      ready.signal();
      gate.wait();
      return 0;
    });
    const size_t chunk = 256 << 10;
    std::vector<void*> chunks;
    ready.signal();
    for (;;) {  // grow to 64 MiB a chunk at a time, then give it all back
      void* p = ::mmap(nullptr, chunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) break;
      std::memset(p, 1, chunk);
      chunks.push_back(p);
      if (chunks.size() == 256) {
        for (void* c : chunks) ::munmap(c, chunk);
        chunks.clear();
      }
      if (::getppid() == 1) break;  // the test is gone
    }
    testing::wait_exit(child);
    return 0;
  });
  ready.wait(2);
  testing::SamplerConfig c;
  // Every sample reads PSS: the stall budget (its own tests) would skip
  // reads as its measured stalls grow on a loaded machine (5 of 40 seen).
  c.budget.max_stall_seconds = 10;
  c.budget.max_stall_fraction = 1;
  c.budget.max_cpu_fraction = 1;
  ServerTarget t;
  t.name = "growing";
  t.server_type = "resources_server";
  t.pid = root;
  c.targets = {t};
  testing::ServerSampler sampler(c, nullptr, [](const std::string&) {});
  int with_pss = 0;
  for (int i = 0; i < 40; ++i) {
    sampler.sample();
    const auto s = sampler.servers().at(0);
    if (!s.pss) continue;
    ++with_pss;
    EXPECT_LE(*s.pss, s.rss) << "sample " << i;
    ASSERT_TRUE(s.uss.has_value());
    EXPECT_LE(*s.uss, *s.pss) << "sample " << i;
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_GE(with_pss, 30) << "PSS is read for a tree of the test's own user";
  ::kill(root, SIGKILL);
  gate.open();
  testing::wait_exit(root);
}

TEST(MemoryCollector, RssOfAStoppedTreeEqualsItsSummedSmapsRollup) {
  testing::Gate gate;
  testing::Ready ready;
  pid_t root = testing::spawn([&] {
    std::vector<char> mine(8 << 20, 1);  // something of its own
    testing::spawn([&] {
      std::vector<char> its(4 << 20, 2);
      ready.signal();
      gate.wait();
      return int(its[1] - 2);
    });
    ready.signal();
    gate.wait();
    return int(mine[1] - 1);
  });
  ready.wait(2);
  // Freeze the tree: nothing changes between the sampler's read and ours.
  testing::SamplerConfig c;
  ServerTarget t;
  t.name = "stopped";
  t.server_type = "model_server";
  t.pid = root;
  c.targets = {t};
  procfs::ProcessTable table("/proc");
  ASSERT_TRUE(table.scan());
  std::vector<pid_t> pids;
  for (const procfs::ProcStat* p : table.tree(*table.find(root))) pids.push_back(p->pid);
  ASSERT_EQ(pids.size(), 2u);
  for (pid_t p : pids) ::kill(p, SIGSTOP);
  std::this_thread::sleep_for(50ms);
  testing::ServerSampler sampler(c, nullptr, [](const std::string&) {});
  sampler.sample();
  const auto s = sampler.servers().at(0);
  EXPECT_EQ(s.rss, rollup_sum(pids, "Rss")) << "exact: smaps_rollup's RSS, not stat's";
  // PSS moves whenever any process sharing a page maps or unmaps it (this
  // test's process shares the tree's copy-on-write pages, and under
  // ThreadSanitizer touches them): not comparable, but never above RSS.
  ASSERT_TRUE(s.pss.has_value());
  EXPECT_GT(*s.pss, 0u);
  EXPECT_LE(*s.pss, s.rss);
  EXPECT_GT(s.rss, uint64_t(12 << 20));
  for (pid_t p : pids) ::kill(p, SIGCONT);
  gate.open();
  EXPECT_EQ(testing::wait_exit(root), 0);
}

// Without PSS, RSS is status's VmRSS (statm's where there is no status),
// which Linux 6.x sums exactly (as smaps_rollup); stat's field 24 reads the
// per-CPU counters unsummed (a 4-process tree of 133,464,064 B read
// 132,440,064 B). Its anon, file and shmem parts add up to it.
TEST(MemoryCollector, RssOnlyTreesReadStatmNotTheApproximateStatCounter) {
  testing::Gate gate;
  testing::Ready ready;
  pid_t root = testing::spawn([&] {
    for (int i = 0; i < 3; ++i)
      testing::spawn([&] {
        std::vector<char> its(24 << 20, 2);
        ready.signal();
        gate.wait();
        return int(its[1] - 2);
      });
    std::vector<char> mine(24 << 20, 1);
    ready.signal();
    gate.wait();
    return int(mine[1] - 1);
  });
  ready.wait(4);
  procfs::ProcessTable table("/proc");
  ASSERT_TRUE(table.scan());
  std::vector<pid_t> pids;
  for (const procfs::ProcStat* p : table.tree(*table.find(root))) pids.push_back(p->pid);
  ASSERT_EQ(pids.size(), 4u);
  for (pid_t p : pids) ::kill(p, SIGSTOP);
  std::this_thread::sleep_for(50ms);
  const auto s = sample_pid(root, /*pss=*/false);
  EXPECT_FALSE(s.pss.has_value());
  EXPECT_EQ(s.rss, rollup_sum(pids, "Rss")) << "exact: status's RSS, not stat's";
  EXPECT_GT(s.rss, uint64_t(96) << 20);
  ASSERT_TRUE(s.rss_anon && s.rss_file && s.rss_shmem);
  EXPECT_EQ(*s.rss_anon + *s.rss_file + *s.rss_shmem, s.rss);
  EXPECT_GE(*s.rss_anon, uint64_t(96) << 20) << "the four vectors are anonymous memory";
  for (pid_t p : pids) ::kill(p, SIGCONT);
  gate.open();
  EXPECT_EQ(testing::wait_exit(root), 0);
}

TEST(MemoryCollector, ADeclaredServerThatExitsReportsZerosThenGoesWithItsPeaks) {
  testing::TempDir tmp;
  testing::Gate gate;
  testing::Ready ready;
  pid_t server = testing::spawn([&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    declare_server("math_verifier", "resources_server");
    ready.signal();
    gate.wait();
    return 0;
  });
  ready.wait(1);
  auto registry = std::make_shared<SharedRegistry>(tmp.path());
  testing::SamplerConfig c;
  c.gone_server_ttl_seconds = 0.5;
  testing::ServerSampler sampler(c, registry, [](const std::string&) {});
  auto series = [&] {
    std::map<std::string, double> out;  // family{memory_type} -> value, for math_verifier
    sampler.collect([&](const prometheus::MetricFamily& f) {
      for (const auto& m : f.metric) {
        std::string key = f.name, server;
        for (const auto& l : m.label) {
          if (l.name == "nemo_gym_server_name") server = l.value;
          if (l.name == "memory_type") key += "{" + l.value + "}";
        }
        if (server == "math_verifier") out[key] = m.gauge.value;
      }
    });
    return out;
  };
  sampler.sample();
  auto up = series();
  EXPECT_EQ(up["gym_server_up"], 1);
  EXPECT_GT(up["gym_server_memory_usage_bytes{rss}"], 0);
  EXPECT_GT(up["gym_server_memory_sampled_peak_bytes{rss}"], 0);
  ::kill(server, SIGKILL);
  testing::wait_exit(server);
  sampler.sample();
  auto gone = series();
  EXPECT_EQ(gone["gym_server_up"], 0) << "gone: reported as down, not dropped";
  EXPECT_EQ(gone["gym_server_processes"], 0);
  EXPECT_EQ(gone.at("gym_server_memory_usage_bytes{rss}"), 0);
  EXPECT_EQ(gone.at("gym_server_memory_usage_bytes{pss}"), 0);
  EXPECT_EQ(gone.count("gym_server_info"), 0u) << "no root pid";
  EXPECT_EQ(gone["gym_server_memory_sampled_peak_bytes{rss}"],
            up["gym_server_memory_sampled_peak_bytes{rss}"]);
  std::this_thread::sleep_for(600ms);  // past the TTL
  sampler.sample();
  EXPECT_TRUE(series().empty()) << "every series of the server went, its peaks too";
  EXPECT_TRUE(sampler.servers().empty());
}

TEST(MemoryCollector, ChildrenExitingDuringSamplesAreNeitherErrorsNorCounted) {
  // A server that keeps forking short-lived children and reaps each a little
  // later: between the scan and the smaps_rollup read a child may exit, and
  // as a zombie its smaps_rollup is gone while its stat is still there.
  testing::Ready ready;
  pid_t root = testing::spawn([&] {
    ready.signal();
    while (::getppid() != 1) {
      pid_t child = ::fork();
      if (child == 0) {
        std::vector<char> mem(1 << 20, 1);  // some memory to read
        std::this_thread::sleep_for(std::chrono::microseconds(200 + mem[7]));
        ::_exit(0);
      }
      std::this_thread::sleep_for(1ms);  // a zombie for a while
      if (child > 0) ::waitpid(child, nullptr, 0);
    }
    return 0;
  });
  ready.wait(1);
  testing::SamplerConfig c;
  ServerTarget t;
  t.name = "churn";
  t.server_type = "resources_server";
  t.pid = root;
  t.pss = true;  // PSS at every sample, however often (this test samples flat out)
  c.targets = {t};
  c.pss_interval_seconds = 0;
  std::vector<std::string> logged;
  testing::ServerSampler sampler(c, nullptr, [&](const std::string& m) { logged.push_back(m); });
  int with_pss = 0;
  for (int i = 0; i < 300; ++i) {
    sampler.sample();
    with_pss += sampler.servers().at(0).pss.has_value();
  }
  EXPECT_TRUE(logged.empty()) << logged.size() << " lines, the first: " << logged.front();
  EXPECT_EQ(with_pss, 300) << "an exiting child makes no sample RSS-only";
  ::kill(root, SIGKILL);
  testing::wait_exit(root);
}

ServerTarget target_of(const std::string& name, pid_t pid) {
  ServerTarget t;
  t.name = name;
  t.server_type = "resources_server";
  t.pid = pid;
  return t;
}

// An agent server whose root a pidfile names.
testing::SamplerConfig pidfile_config(const std::string& pidfile) {
  testing::SamplerConfig c;
  ServerTarget t;
  t.name = "agent";
  t.server_type = "agent_server";
  t.pidfile = pidfile;
  c.targets = {t};
  return c;
}

// Waits until `pid` (a child not yet reaped) is a zombie.
void wait_zombie(pid_t pid) {
  for (int i = 0; i < 1000; ++i) {
    std::string text;
    if (procfs::read_file("/proc/" + std::to_string(pid) + "/stat", text) ==
        procfs::ReadStatus::kOk)
      if (auto st = procfs::parse_stat(text); st && st->zombie()) return;
    std::this_thread::sleep_for(5ms);
  }
  FAIL() << pid << " never became a zombie";
}

TEST(MemoryCollector, AKilledRootThatIsNotReapedYetIsDownNotUp) {
  testing::TempDir tmp;
  testing::Ready ready;
  const pid_t declared = testing::spawn([&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    declare_server("math_verifier", "resources_server");
    ready.signal();
    for (;;) ::pause();
    return 0;
  });
  const pid_t configured = testing::spawn([&] {
    ready.signal();
    for (;;) ::pause();
    return 0;
  });
  ready.wait(2);
  testing::SamplerConfig c;
  c.targets = {target_of("agent", configured)};
  testing::ServerSampler sampler(c, std::make_shared<SharedRegistry>(tmp.path()), kQuiet);
  sampler.sample();
  ASSERT_EQ(sampler.servers().size(), 2u);
  for (const auto& s : sampler.servers()) EXPECT_TRUE(s.root_pid.has_value()) << s.name;
  // Killed; its launcher has not reaped it (yet): a zombie is no server.
  ::kill(declared, SIGKILL);
  ::kill(configured, SIGKILL);
  wait_zombie(declared);
  wait_zombie(configured);
  sampler.sample();
  const auto servers = sampler.servers();
  ASSERT_EQ(servers.size(), 2u);
  for (const auto& s : servers) {
    EXPECT_FALSE(s.root_pid.has_value()) << s.name << ": down (gym_server_up 0)";
    EXPECT_TRUE(s.root_pids.empty()) << s.name << ": no gym_server_info";
    EXPECT_EQ(s.processes, 0u) << s.name;
    EXPECT_EQ(s.exits, 1u) << s.name;
  }
  testing::wait_exit(declared);
  testing::wait_exit(configured);
  sampler.sample();
  for (const auto& s : sampler.servers()) EXPECT_EQ(s.exits, 1u) << s.name << ": counted once";
}

TEST(MemoryCollector, ANewRootFromAPidfileStartsWithoutTheOldRootsLineage) {
  testing::TempDir tmp;
  testing::Gate gate;
  testing::Ready ready;
  // The old server, with a worker that leaves its tree when its middle
  // process exits (kept by lineage while the old root is the root).
  testing::Gate middle_exits;
  const pid_t old_root = testing::spawn([&] {
    middle_exits.close_write();
    const pid_t middle = testing::spawn([&] {
      testing::spawn([&] {
        std::vector<char> held(24 << 20);
        for (size_t i = 0; i < held.size(); i += 4096) held[i] = 1;
        ready.signal();
        gate.wait();
        return int(held[0]) - 1;
      });
      middle_exits.wait();
      return 0;
    });
    testing::wait_exit(middle);
    gate.wait();
    return 0;
  });
  const pid_t new_root = testing::spawn([&] {
    middle_exits.close_write();
    ready.signal();
    gate.wait();
    return 0;
  });
  ready.wait(2);
  const std::string pidfile = tmp.path() + "/server.pid";
  std::ofstream(pidfile) << old_root << "\n";
  testing::ServerSampler sampler(pidfile_config(pidfile), nullptr, kQuiet);
  sampler.sample();
  EXPECT_EQ(sampler.servers().at(0).processes, 3u);
  middle_exits.open();
  std::this_thread::sleep_for(100ms);
  sampler.sample();
  EXPECT_EQ(sampler.servers().at(0).processes, 2u) << "the old root and its worker, by lineage";
  EXPECT_EQ(sampler.servers().at(0).escaped, 1u);
  // A restart that drains: the pidfile names the new root while the old one
  // still runs.
  std::this_thread::sleep_for(20ms);
  std::ofstream(pidfile) << new_root << "\n";
  sampler.sample();
  const auto s = sampler.servers().at(0);
  EXPECT_EQ(s.root_pid, new_root);
  EXPECT_EQ(s.processes, 1u) << "the new root's tree only";
  EXPECT_EQ(s.escaped, 0u);
  std::string statm;  // the new root's own RSS, not the old worker's 24 MB
  ASSERT_EQ(procfs::read_file("/proc/" + std::to_string(new_root) + "/statm", statm),
            procfs::ReadStatus::kOk);
  const uint64_t own =
      procfs::parse_statm(statm)->resident_pages * uint64_t(::sysconf(_SC_PAGESIZE));
  EXPECT_LT(s.rss, own + (uint64_t(12) << 20));
  gate.open();
  testing::wait_exit(old_root);
  testing::wait_exit(new_root);
}

// A pidfile names a pid that a process started 0.2 s after the file was
// written now holds: the server that wrote it is gone. Its start time is
// read against this kernel's exact boot instant, not /proc/stat's btime
// (truncated to the second: with a one-second slack beside it, such a
// process was taken for the server, whatever the boot's fraction).
TEST(MemoryCollector, AProcessStartedAFifthOfASecondAfterItsPidfileIsNotTheServer) {
  testing::TempDir tmp;
  const std::string pidfile = tmp.path() + "/server.pid";
  std::ofstream(pidfile) << "1\n";
  struct stat written {};
  ASSERT_EQ(::stat(pidfile.c_str(), &written), 0);
  std::this_thread::sleep_for(200ms);
  testing::Gate gate;
  testing::Ready ready;
  const pid_t younger = testing::spawn([&] {
    ready.signal();
    gate.wait();
    return 0;
  });
  ready.wait(1);
  std::ofstream(pidfile) << younger << "\n";  // as if the pid had been reused
  const timespec times[2] = {written.st_atim, written.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, pidfile.c_str(), times, 0), 0);
  testing::ServerSampler sampler(pidfile_config(pidfile), nullptr, kQuiet);
  sampler.sample();
  EXPECT_FALSE(sampler.servers().at(0).root_pid.has_value()) << "stale: it started after";
  ASSERT_EQ(::utimensat(AT_FDCWD, pidfile.c_str(), nullptr, 0), 0);  // written by it now
  sampler.sample();
  EXPECT_EQ(sampler.servers().at(0).root_pid, younger);
  gate.open();
  EXPECT_EQ(testing::wait_exit(younger), 0);
}

TEST(MemoryCollector, AProcRootThatCannotBeReadLeavesEveryServerAbsentAndCountsProc) {
  testing::SamplerConfig c;
  c.proc_root = "/nonexistent-proc-root";
  c.targets = {target_of("agent", ::getpid())};
  std::vector<std::string> logged;
  testing::ServerSampler sampler(c, nullptr, [&](const std::string& l) { logged.push_back(l); });
  sampler.sample();
  sampler.sample();
  EXPECT_TRUE(sampler.servers().empty());
  std::map<std::string, double> got;
  sampler.collect([&](const prometheus::MetricFamily& f) {
    if (f.name.starts_with("gym_server_")) got[f.name] = 1;
    if (f.name == "gym_exporter_memory_sample_errors_total")
      for (const auto& m : f.metric) got[m.label.at(0).value] = m.counter.value;
  });
  EXPECT_EQ(got.count("gym_server_up"), 0u) << "absent, not up 0";
  EXPECT_EQ(got.count("gym_server_memory_usage_bytes"), 0u);
  EXPECT_EQ(got["proc"], 2) << "counted at each sample";
  EXPECT_EQ(std::count_if(logged.begin(), logged.end(),
                          [](const std::string& l) {
                            return l.find("cannot list /nonexistent-proc-root") !=
                                   std::string::npos;
                          }),
            1);
}

}  // namespace
}  // namespace gym::exporter
