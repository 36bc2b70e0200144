// procfs parsers and the sampler against a fixture tree (tests/fixtures/proc):
//   1 systemd
//   100 "gym server"  (root; cmdline "python3 -m gym.server --name math")
//   ├── 101 "we(ird) )name"  ── 102 verifier
//   ├── 103 kworker (kernel thread), 104 (zombie)
//   ├── 105 worker  (its smaps_rollup cannot be read)
//   └── 200 claims parent 100 but started earlier: a reused pid, not a child
//   300 other
#include <gtest/gtest.h>
#include <unistd.h>

#include "collectors/memory.h"
#include "procfs.h"

namespace gym::exporter {
namespace {

const std::string kFixture = std::string(GYM_TEST_FIXTURES) + "/proc";
const uint64_t kPage = uint64_t(::sysconf(_SC_PAGESIZE));

TEST(Procfs, StatCommMayHoldSpacesAndParentheses) {
  auto st = procfs::parse_stat(
      "101 (we(ird) )name) S 100 101 101 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 600 1000000 300 "
      "18446744073709551615 0 0");
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->pid, 101);
  EXPECT_EQ(st->comm, "we(ird) )name");
  EXPECT_EQ(st->state, 'S');
  EXPECT_EQ(st->ppid, 100);
  EXPECT_EQ(st->start_ticks, 600u);
  EXPECT_EQ(st->rss_pages, 300u);
  EXPECT_FALSE(st->kernel_thread());
  EXPECT_FALSE(procfs::parse_stat("101 (x) S 1 2").has_value()) << "too few fields";
  EXPECT_FALSE(procfs::parse_stat("garbage").has_value());
  // Found by fuzzing: a pid beyond pid_t used to wrap to a negative number.
  EXPECT_FALSE(procfs::parse_stat("1000000000000000002 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 "
                                  "600 1000 30 0")
                   .has_value());
  EXPECT_FALSE(procfs::parse_stat("5 (x) S 99999999999 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 600 "
                                  "1000 30 0")
                   .has_value());
  EXPECT_FALSE(procfs::parse_stat("").has_value());
}

TEST(Procfs, MeminfoToleratesOddLines) {
  auto m = procfs::parse_meminfo(
      "MemTotal:1024 kB\n\nUnknownKey: 7 kB\nMemAvailable:   512 kB\nHugePages_Total: 0\n");
  EXPECT_EQ(m.total, 1024u * 1024);
  EXPECT_EQ(m.available, 512u * 1024);
  auto zero = procfs::parse_meminfo("MemTotal: 1024 kB\nMemAvailable: 0 kB\n");
  EXPECT_EQ(zero.available, 0u);
  auto old_kernel =
      procfs::parse_meminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 30 kB\n");
  EXPECT_EQ(old_kernel.available, 150u * 1024) << "MemFree + Buffers + Cached without MemAvailable";
  auto nothing = procfs::parse_meminfo("");
  EXPECT_FALSE(nothing.total.has_value());
  EXPECT_FALSE(nothing.available.has_value());
}

TEST(Procfs, SmapsRollupPss) {
  EXPECT_EQ(procfs::parse_smaps_rollup_pss("Rss: 10 kB\nPss:   4 kB\n"), 4096u);
  EXPECT_EQ(procfs::parse_smaps_rollup_pss("Rss: 10 kB\n"), std::nullopt);
}

TEST(Procfs, FixtureTreeLinksChildrenNotOlderThanTheirParent) {
  procfs::ProcessTable table(kFixture);
  ASSERT_TRUE(table.scan());
  EXPECT_EQ(table.processes().size(), 9u);
  const procfs::ProcStat* root = table.find(100);
  ASSERT_NE(root, nullptr);
  std::vector<pid_t> pids;
  for (const auto* p : table.tree(*root)) pids.push_back(p->pid);
  std::sort(pids.begin(), pids.end());
  EXPECT_EQ(pids, (std::vector<pid_t>{100, 101, 102, 103, 104, 105}));
  EXPECT_EQ(table.find(100, 999), nullptr) << "same pid, other start time";
  EXPECT_TRUE(table.find(103)->kernel_thread());
  EXPECT_TRUE(table.find(104)->zombie());
}

ServerTarget target(std::string name) {
  ServerTarget t;
  t.name = std::move(name);
  t.server_type = "resources_server";
  return t;
}

const MemoryCollector::ServerMemory* find(const std::vector<MemoryCollector::ServerMemory>& v,
                                          const std::string& name) {
  for (const auto& s : v)
    if (s.name == name) return &s;
  return nullptr;
}

TEST(MemoryCollectorFixture, TargetsByPidPidfileCommAndCmdline) {
  MemoryConfig c;
  c.proc_root = kFixture;
  auto by_pid = target("by_pid");
  by_pid.pid = 100;
  auto by_pidfile = target("by_pidfile");
  by_pidfile.pidfile = std::string(GYM_TEST_FIXTURES) + "/server.pid";
  auto by_comm = target("by_comm");
  by_comm.match_comm = "we(ird) )name";
  auto by_cmdline = target("by_cmdline");
  by_cmdline.match_cmdline = "gym\\.server --name math";
  auto gone = target("gone");
  gone.pid = 4242;
  auto no_pss = target("no_pss");
  no_pss.pid = 101;
  no_pss.pss = false;
  c.targets = {by_pid, by_pidfile, by_comm, by_cmdline, gone, no_pss};
  std::vector<std::string> logged;
  MemoryCollector sampler(c, nullptr, [&](const std::string& m) { logged.push_back(m); });
  sampler.sample();
  const auto servers = sampler.servers();
  ASSERT_EQ(servers.size(), 6u);

  // 100, 101, 102, 105: kernel threads, zombies and the imposter add nothing.
  const uint64_t tree_rss = (2000 + 300 + 50 + 40) * kPage;
  for (const char* name : {"by_pid", "by_pidfile", "by_cmdline"}) {
    const auto* s = find(servers, name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_EQ(s->root_pid, 100) << name;
    EXPECT_EQ(s->processes, 4u) << name;
    EXPECT_EQ(s->rss, tree_rss) << name;
    EXPECT_FALSE(s->pss.has_value()) << name << ": 105's smaps_rollup is unreadable, RSS only";
  }
  const auto* comm = find(servers, "by_comm");
  EXPECT_EQ(comm->root_pid, 101);
  EXPECT_EQ(comm->processes, 2u);
  EXPECT_EQ(comm->rss, (300 + 50) * kPage);
  EXPECT_EQ(comm->pss, (600 + 100) * 1024u);
  const auto* g = find(servers, "gone");
  EXPECT_FALSE(g->root_pid.has_value());
  EXPECT_EQ(g->processes, 0u);
  EXPECT_EQ(g->rss, 0u);
  EXPECT_EQ(g->pss, 0u);
  EXPECT_FALSE(find(servers, "no_pss")->pss.has_value());

  std::string text;
  sampler.collect([&](const prometheus::MetricFamily& f) {
    for (const auto& m : f.metric)
      if (f.name == "gym_exporter_memory_sample_errors_total" && m.label[0].value == "read")
        text = std::to_string(m.counter.value);
  });
  EXPECT_EQ(text, "3.000000") << "105's smaps_rollup, once for each of three targets";
  EXPECT_FALSE(logged.empty());
}

TEST(MemoryCollectorFixture, HostMemoryFromMeminfo) {
  MemoryConfig c;
  c.proc_root = kFixture;
  MemoryCollector sampler(c, nullptr, [](const std::string&) {});
  sampler.sample();
  std::map<std::string, double> values;
  sampler.collect([&](const prometheus::MetricFamily& f) {
    if (f.name.starts_with("gym_host_")) values[f.name] = f.metric.at(0).gauge.value;
  });
  EXPECT_EQ(values["gym_host_memory_total_bytes"], 16384000.0 * 1024);
  EXPECT_EQ(values["gym_host_memory_available_bytes"], 4096000.0 * 1024);
  EXPECT_EQ(values["gym_host_memory_usage_bytes"], (16384000.0 - 4096000.0) * 1024);
  EXPECT_EQ(values["gym_host_memory_sampled_peak_bytes"], (16384000.0 - 4096000.0) * 1024);
}

TEST(MemoryCollectorFixture, MissingProcRootIsCountedNotFatal) {
  MemoryConfig c;
  c.proc_root = "/nonexistent/proc";
  auto t = target("x");
  t.pid = 1;
  c.targets = {t};
  MemoryCollector sampler(c, nullptr, [](const std::string&) {});
  sampler.sample();
  EXPECT_EQ(sampler.servers().at(0).processes, 0u);
}

}  // namespace
}  // namespace gym::exporter
