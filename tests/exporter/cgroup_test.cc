// Cgroups: the parsers on the kernel's formats, the cgroup collector on
// fixture trees (v2 and v1), and a real OOM kill in a real memory cgroup.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "app.h"
#include "collectors/cgroup_totals.h"
#include "collectors/cgroups.h"
#include "collectors/memory.h"
#include "collectors/servers.h"
#include "config.h"
#include "contract/families.h"
#include "host/cgroup.h"
#include "real_cgroup.h"
#include "server_sampler.h"
#include "test_support.h"

namespace gym::exporter {
namespace {

using namespace std::chrono_literals;
using testing::TempDir;

void put(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

// What this machine's mountinfo looked like (a hybrid host: memory on v1).
const char* const kHybridMountinfo =
    "24 1 0:21 / / rw,relatime - ext4 /dev/vda rw\n"
    "30 24 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
    "31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
    "35 30 0:31 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "36 30 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";

TEST(CgroupParse, MountinfoFindsTheUnifiedAndTheV1MemoryHierarchies) {
  const cgroup::Mounts m = cgroup::parse_mountinfo(kHybridMountinfo);
  EXPECT_EQ(m.v2, "/sys/fs/cgroup/unified");
  EXPECT_EQ(m.v2_root, "/");
  EXPECT_EQ(m.v1_memory, "/sys/fs/cgroup/memory");
  EXPECT_EQ(m.v1_cpu, "/sys/fs/cgroup/cpu");
  EXPECT_EQ(cgroup::parse_mountinfo("35 30 0:31 / /c rw - cgroup cgroup rw,cpu,cpuacct\n"
                                    "36 30 0:32 / /s rw - cgroup cgroup rw,cpuset\n")
                .v1_cpu,
            "/c")
      << "cpu shares a hierarchy with cpuacct; cpuset is another controller";
  // Pure v2, a mount point with an escaped space, and a namespace's root.
  const cgroup::Mounts v2 = cgroup::parse_mountinfo(
      "29 23 0:26 /ns /my\\040cgroups rw shared:4 - cgroup2 cgroup2 rw\n"
      "garbage line\n"
      "1 2 3 4 5 6 - cgroup\n");
  EXPECT_EQ(v2.v2, "/my cgroups");
  EXPECT_EQ(v2.v2_root, "/ns");
  EXPECT_EQ(v2.v1_memory, "");
}

TEST(CgroupParse, MembershipTakesTheV2PathAndTheV1MemoryPath) {
  const cgroup::Membership who = cgroup::parse_membership(
      "9:name=systemd:/\n4:memory,kmem:/gym/a:b\n3:cpuset:/x\n0::/system.slice/gym.service\n"
      "junk\n5:pids\n");
  EXPECT_EQ(who.v2, "/system.slice/gym.service");
  EXPECT_EQ(who.v1_memory, "/gym/a:b") << "a path may hold a colon";
  EXPECT_FALSE(cgroup::parse_membership("1:cpu:/x\n").v2.has_value());
  EXPECT_EQ(cgroup::parse_membership("1:cpu:/x\n").v1_cpu, "/x");
  EXPECT_EQ(cgroup::parse_membership("2:cpu,cpuacct:/sandbox/7\n").v1_cpu, "/sandbox/7");
  EXPECT_FALSE(who.v1_cpu.has_value()) << "cpuset is not cpu";
}

TEST(CgroupParse, CpuMaxIsQuotaOverPeriodAndMaxIsNoLimit) {
  EXPECT_DOUBLE_EQ(*cgroup::parse_cpu_max("20000 100000\n"), 0.2);
  EXPECT_DOUBLE_EQ(*cgroup::parse_cpu_max("250000 50000\n"), 5.0);
  EXPECT_FALSE(cgroup::parse_cpu_max("max 100000\n"));
  EXPECT_FALSE(cgroup::parse_cpu_max("20000 0\n"));
  EXPECT_FALSE(cgroup::parse_cpu_max("garbage"));
}

TEST(CgroupParse, PressureReadsSomeAndFullAndSkipsLinesItDoesNotKnow) {
  const cgroup::PressureFile p = cgroup::parse_pressure(
      "some avg10=1.50 avg60=0.25 avg300=0.00 total=123456\n"
      "full avg10=0.50 avg60=0.10 avg300=0.00 total=7890\n");
  ASSERT_TRUE(p.some && p.full);
  EXPECT_DOUBLE_EQ(p.some->avg10, 1.5);
  EXPECT_DOUBLE_EQ(p.some->avg60, 0.25);
  EXPECT_EQ(p.some->total_us, 123456u);
  EXPECT_EQ(p.full->total_us, 7890u);
  const cgroup::PressureFile bad =
      cgroup::parse_pressure("some avg10=x avg60=0 avg300=0 total=1\nfull total=5\n");
  EXPECT_FALSE(bad.some) << "an unreadable average";
  EXPECT_FALSE(bad.full) << "averages missing";
}

TEST(CgroupParse, FindCountReadsKeyValueLines) {
  EXPECT_EQ(cgroup::find_count("low 0\nhigh 2\noom 3\noom_kill 4\n", "oom_kill"), 4u);
  EXPECT_EQ(cgroup::find_count("oom_kill_disable 0\nunder_oom 0\noom_kill 1", "oom_kill"), 1u);
  EXPECT_FALSE(cgroup::find_count("oom_kill x\n", "oom_kill"));
  EXPECT_FALSE(cgroup::find_count("oom 3\n", "oom_kill"));
}

using testing::pid_target;

// A fixture host: <dir>/proc with one server process (pid 100) and the
// exporter's own cgroup (self), and <dir>/cg, a mounted hierarchy.
struct Fixture {
  TempDir tmp;
  std::string proc = tmp.sub("proc");
  std::string cg = tmp.sub("cg");
  Fixture(const std::string& server_cgroup, const std::string& self_cgroup) {
    put(proc + "/100/stat",
        "100 (agent) S 1 100 100 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 500 1000000 2000 "
        "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n");
    put(proc + "/100/cgroup", server_cgroup);
    put(proc + "/self/cgroup", self_cgroup);
  }
  // A process `pid` (a child of `ppid`) in `cgroup` ("0::/path\n").
  void verifier(int pid, int ppid, const std::string& cgroup) const {
    put(proc + "/" + std::to_string(pid) + "/stat",
        std::to_string(pid) + " (verifier) S " + std::to_string(ppid) +
            " 100 100 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 600 1000000 200 "
            "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n");
    put(proc + "/" + std::to_string(pid) + "/cgroup", cgroup);
  }
  // The servers unit of the fixture: its proc root, its hierarchy, the agent.
  std::shared_ptr<ServerWatcher> servers(bool v2) const {
    ServersConfig c;
    c.proc_root = proc;
    cgroup::Mounts m;
    (v2 ? m.v2 : m.v1_memory) = cg;
    c.mounts = m;
    c.targets = {pid_target("agent", "agent", 100)};
    return make_watcher(c);
  }
};

std::map<std::string, prometheus::MetricFamily> families(Collector& c) {
  std::map<std::string, prometheus::MetricFamily> out;
  c.collect([&](const Family& f) {
    EXPECT_EQ(contract_violation(f), "") << f.name;
    out[f.name] = f;
  });
  return out;
}

TEST(CgroupCollector, ServesEveryCgroupFamilyForAFixtureV2Tree) {
  Fixture fx("0::/gym/agent\n", "0::/exporter\n");
  const std::string dir = fx.cg + "/gym/agent";
  put(dir + "/memory.current", "1048576\n");
  put(dir + "/memory.peak", "4194304\n");
  put(dir + "/memory.max", "8388608\n");
  put(dir + "/memory.events", "low 0\nhigh 0\nmax 5\noom 3\noom_kill 2\noom_group_kill 1\n");
  // Linux 6.1's cpu.pressure and io.pressure, and the host's /proc/pressure.
  put(dir + "/cpu.pressure",
      "some avg10=40.00 avg60=20.00 avg300=5.00 total=7000000\n"
      "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  put(dir + "/io.pressure",
      "some avg10=1.00 avg60=0.50 avg300=0.10 total=125000\n"
      "full avg10=0.50 avg60=0.20 avg300=0.05 total=75000\n");
  put(fx.proc + "/pressure/cpu",
      "some avg10=0.00 avg60=0.10 avg300=0.05 total=31000000\n"
      "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  put(fx.proc + "/pressure/io",
      "some avg10=0.00 avg60=0.00 avg300=0.00 total=4000000\n"
      "full avg10=0.00 avg60=0.00 avg300=0.00 total=2000000\n");
  put(dir + "/memory.pressure",
      "some avg10=12.50 avg60=5.00 avg300=1.00 total=2500000\n"
      "full avg10=2.00 avg60=1.00 avg300=0.50 total=500000\n");
  // The kernel's cpu.max and cpu.stat (Linux 6.1, cpu controller enabled).
  put(dir + "/cpu.max", "150000 100000\n");
  put(dir + "/cpu.stat",
      "usage_usec 9000000\nuser_usec 8000000\nsystem_usec 1000000\ncore_sched.force_idle_usec 0\n"
      "nr_periods 400\nnr_throttled 120\nthrottled_usec 3500000\nnr_bursts 0\nburst_usec 0\n");
  CgroupCollector c(fx.servers(true), [](const std::string&) {});
  c.sample();
  auto f = families(c);
  for (const FamilySpec& row : kFamilies)
    if (row.name.starts_with("gym_server_cgroup_")) {
      EXPECT_TRUE(f.count(std::string(row.name))) << row.name << " has a row but is not served";
    }
  const auto& info = f.at("gym_server_cgroup_info").metric.at(0);
  EXPECT_EQ(info.label.at(2).value, "/gym/agent");
  EXPECT_EQ(info.label.at(3).value, "2");
  EXPECT_EQ(f.at("gym_server_cgroup_memory_usage_bytes").metric.at(0).gauge.value, 1048576);
  EXPECT_EQ(f.at("gym_server_cgroup_memory_peak_bytes").metric.at(0).gauge.value, 4194304);
  EXPECT_EQ(f.at("gym_server_cgroup_memory_limit_bytes").metric.at(0).gauge.value, 8388608);
  const auto& ooms = f.at("gym_server_cgroup_oom_kills_total").metric;
  ASSERT_EQ(ooms.size(), 2u);
  EXPECT_EQ(ooms[0].label.at(2).value, "process");
  EXPECT_EQ(ooms[0].counter.value, 2);
  EXPECT_EQ(ooms[1].label.at(2).value, "group");
  EXPECT_EQ(ooms[1].counter.value, 1) << "the whole cgroup killed once";
  const auto& cpu_p = f.at("gym_server_cgroup_cpu_pressure_seconds_total").metric;
  ASSERT_EQ(cpu_p.size(), 2u);
  EXPECT_DOUBLE_EQ(cpu_p[0].counter.value, 7);
  EXPECT_DOUBLE_EQ(cpu_p[1].counter.value, 0);
  const auto& io_p = f.at("gym_server_cgroup_io_pressure_seconds_total").metric;
  ASSERT_EQ(io_p.size(), 2u);
  EXPECT_DOUBLE_EQ(io_p[0].counter.value, 0.125);
  EXPECT_DOUBLE_EQ(io_p[1].counter.value, 0.075);
  std::map<std::string, double> host;
  for (const auto& m : f.at("gym_host_pressure_seconds_total").metric)
    host[m.label.at(0).value + "/" + m.label.at(1).value] = m.counter.value;
  EXPECT_EQ(host, (std::map<std::string, double>{
                      {"cpu/some", 31}, {"cpu/full", 0}, {"io/some", 4}, {"io/full", 2}}))
      << "no /proc/pressure/memory here: no memory series";
  const auto& stalled = f.at("gym_server_cgroup_memory_pressure_seconds_total").metric;
  ASSERT_EQ(stalled.size(), 2u);
  EXPECT_EQ(stalled[0].label.at(2).value, "some");
  EXPECT_DOUBLE_EQ(stalled[0].counter.value, 2.5);
  EXPECT_DOUBLE_EQ(stalled[1].counter.value, 0.5);
  const auto& ratio = f.at("gym_server_cgroup_memory_pressure_ratio").metric;
  ASSERT_EQ(ratio.size(), 6u);
  EXPECT_EQ(ratio[0].label.at(3).value, "10s");
  EXPECT_DOUBLE_EQ(ratio[0].gauge.value, 0.125);
  EXPECT_EQ(f.at("gym_exporter_cgroup_sample_errors_total").metric.at(0).counter.value, 0);
  EXPECT_DOUBLE_EQ(f.at("gym_server_cgroup_cpu_limit_cores").metric.at(0).gauge.value, 1.5);
  EXPECT_EQ(f.at("gym_server_cgroup_cpu_periods_total").metric.at(0).counter.value, 400);
  EXPECT_EQ(f.at("gym_server_cgroup_cpu_throttled_periods_total").metric.at(0).counter.value, 120);
  EXPECT_DOUBLE_EQ(f.at("gym_server_cgroup_cpu_throttled_seconds_total").metric.at(0).counter.value,
                   3.5);

  // No limit, and a kernel without memory.peak: those series are absent.
  put(dir + "/cpu.max", "max 100000\n");
  put(dir + "/memory.max", "max\n");
  std::filesystem::remove(dir + "/memory.peak");
  c.sample();
  f = families(c);
  EXPECT_FALSE(f.count("gym_server_cgroup_memory_limit_bytes"));
  EXPECT_FALSE(f.count("gym_server_cgroup_memory_peak_bytes"));
  EXPECT_FALSE(f.count("gym_server_cgroup_cpu_limit_cores"));
  EXPECT_EQ(f.at("gym_server_cgroup_cpu_periods_total").metric.at(0).counter.value, 400);
}

// A server whose root shares the exporter's cgroup and whose two sandboxes
// (v2, each its own cgroup with a quota) run a verifier each; one sandbox
// shares its cgroup with another server. Each cgroup counts for every
// server with a process in it; a removed sandbox keeps what it counted.
TEST(CgroupCollector, CpuCountsEverySandboxCgroupOfAServerAndKeepsARemovedOnesCounts) {
  Fixture fx("0::/exporter\n", "0::/exporter\n");
  auto sandbox = [&](const std::string& name, const std::string& max, int periods, int throttled,
                     int usec) {
    put(fx.cg + "/sandboxes/" + name + "/cpu.max", max);
    put(fx.cg + "/sandboxes/" + name + "/cpu.stat",
        "usage_usec 1\nnr_periods " + std::to_string(periods) + "\nnr_throttled " +
            std::to_string(throttled) + "\nthrottled_usec " + std::to_string(usec) + "\n");
  };
  fx.verifier(101, 100, "0::/sandboxes/a\n");
  fx.verifier(102, 100, "0::/sandboxes/b\n");
  fx.verifier(200, 1, "0::/sandboxes/b\n");  // the other server's root, in b
  sandbox("a", "20000 100000\n", 10, 5, 400000);
  sandbox("b", "50000 100000\n", 20, 2, 100000);
  ServersConfig sc;
  sc.proc_root = fx.proc;
  cgroup::Mounts m;
  m.v2 = fx.cg;
  sc.mounts = m;
  sc.targets = {pid_target("agent", "agent", 100), pid_target("other", "agent", 200)};
  CgroupCollector c(make_watcher(sc), [](const std::string&) {});
  c.sample();
  auto f = families(c);
  auto value = [&](const std::string& family, const std::string& server) {
    for (const auto& m : f.at(family).metric)
      if (m.label.at(0).value == server) return m.counter.value + m.gauge.value;
    return -1.0;
  };
  EXPECT_DOUBLE_EQ(value("gym_server_cgroup_cpu_limit_cores", "agent"), 0.7);
  EXPECT_EQ(value("gym_server_cgroup_cpu_periods_total", "agent"), 30);
  EXPECT_EQ(value("gym_server_cgroup_cpu_throttled_periods_total", "agent"), 7);
  EXPECT_DOUBLE_EQ(value("gym_server_cgroup_cpu_throttled_seconds_total", "agent"), 0.5);
  EXPECT_DOUBLE_EQ(value("gym_server_cgroup_cpu_limit_cores", "other"), 0.5) << "b counts for both";
  EXPECT_EQ(value("gym_server_cgroup_cpu_periods_total", "other"), 20);
  EXPECT_FALSE(f.count("gym_server_cgroup_info")) << "the root has no cgroup of its own";

  // Sandbox a throttles more, then its verifier exits and it is removed.
  sandbox("a", "20000 100000\n", 14, 9, 700000);
  c.sample();
  std::filesystem::remove_all(fx.proc + "/101");
  std::filesystem::remove_all(fx.cg + "/sandboxes/a");
  c.sample();
  f = families(c);
  EXPECT_DOUBLE_EQ(value("gym_server_cgroup_cpu_limit_cores", "agent"), 0.5);
  EXPECT_EQ(value("gym_server_cgroup_cpu_periods_total", "agent"), 34) << "a's 14 and b's 20";
  EXPECT_EQ(value("gym_server_cgroup_cpu_throttled_periods_total", "agent"), 11);
  EXPECT_DOUBLE_EQ(value("gym_server_cgroup_cpu_throttled_seconds_total", "agent"), 0.8);
}

// A resources server (its root in the exporter's cgroup) whose verifiers
// run in a pool cgroup shared with another server and come and go between
// samples, then in a sandbox of their own that is OOM-killed and removed:
// every kill counts once for each server it is in, idle and removed
// cgroups keep theirs, and a second exporter of the same boot goes on from
// the totals file.
TEST(CgroupCollector, OomKillsOfPoolAndRemovedSandboxesCountOnceAndSurviveARestart) {
  Fixture fx("0::/exporter\n", "0::/exporter\n");
  auto events = [&](const std::string& cgroup, int kills, int group_kills) {
    put(fx.cg + cgroup + "/memory.current", "4096\n");
    put(fx.cg + cgroup + "/memory.max", "33554432\n");
    put(fx.cg + cgroup + "/memory.events", "low 0\nhigh 0\nmax 9\noom 3\noom_kill " +
                                               std::to_string(kills) + "\noom_group_kill " +
                                               std::to_string(group_kills) + "\n");
  };
  events("/pool", 1, 0);
  fx.verifier(101, 100, "0::/pool\n");
  fx.verifier(200, 1, "0::/pool\n");  // the other server's root
  ServersConfig sc;
  sc.proc_root = fx.proc;
  cgroup::Mounts m;
  m.v2 = fx.cg;
  sc.mounts = m;
  sc.targets = {pid_target("agent", "agent", 100), pid_target("other", "agent", 200)};
  const std::string file = fx.tmp.sub(kCgroupTotalsFile);
  auto collector = [&] {
    return std::make_unique<CgroupCollector>(
        make_watcher(sc), [](const std::string&) {}, 5, file, [] { return true; });
  };
  auto c = collector();
  auto kills = [&](const std::string& server, const std::string& kind) {
    c->sample();
    auto f = families(*c);
    for (const auto& m : f["gym_server_cgroup_oom_kills_total"].metric)
      if (m.label.at(0).value == server && m.label.at(2).value == kind) return m.counter.value;
    return -1.0;
  };
  EXPECT_EQ(kills("agent", "process"), 1);
  EXPECT_EQ(kills("other", "process"), 1) << "a shared cgroup counts for each server in it";
  EXPECT_EQ(kills("agent", "group"), 0);
  // The verifier is killed and gone before the next sample: the pool is read
  // once more, then kept idle; the next verifier goes on from its count.
  events("/pool", 2, 0);
  std::filesystem::remove_all(fx.proc + "/101");
  EXPECT_EQ(kills("agent", "process"), 2);
  fx.verifier(102, 100, "0::/pool\n");
  EXPECT_EQ(kills("agent", "process"), 2) << "the pool's kills again are not new kills";
  // A sandbox of its own, killed whole (one group kill), then removed.
  events("/sandboxes/s1", 0, 0);
  fx.verifier(103, 100, "0::/sandboxes/s1\n");
  EXPECT_EQ(kills("agent", "process"), 2);
  EXPECT_EQ(families(*c).at("gym_server_cgroup_memory_limit_bytes").metric.at(0).gauge.value,
            2 * 33554432.0)
      << "the limits of its two cgroups";
  events("/sandboxes/s1", 1, 1);
  std::filesystem::remove_all(fx.proc + "/103");
  EXPECT_EQ(kills("agent", "group"), 1);
  std::filesystem::remove_all(fx.cg + "/sandboxes/s1");
  EXPECT_EQ(kills("agent", "process"), 3);
  EXPECT_EQ(kills("agent", "group"), 1) << "removed, still counted";
  EXPECT_EQ(kills("other", "process"), 2);
  EXPECT_EQ(c->sample_stats()->errors["totals"], 0u);

  // The exporter restarts: the removed sandbox's kills come from the file,
  // the pool's go on from its last count.
  c = collector();
  EXPECT_EQ(kills("agent", "process"), 3);
  EXPECT_EQ(kills("agent", "group"), 1);
  EXPECT_EQ(kills("other", "process"), 2);
  events("/pool", 3, 0);
  EXPECT_EQ(kills("agent", "process"), 4);
  EXPECT_EQ(kills("other", "process"), 3);
  EXPECT_EQ(c->sample_stats()->errors["totals"], 0u);
}

// A server in its own v2 cgroup whose verifier runs in a child cgroup of
// it: the parent's memory.events, memory.current and pressure hold the
// child's, so the child adds only its CPU account (its own quota).
TEST(CgroupCollector, AV2CgroupBelowAnotherOfTheServerIsCountedInItsParentOnly) {
  Fixture fx("0::/gym/agent\n", "0::/exporter\n");
  fx.verifier(101, 100, "0::/gym/agent/verifier\n");
  auto cgroup = [&](const std::string& dir, int current, int max, int kills, int periods) {
    put(dir + "/memory.current", std::to_string(current) + "\n");
    put(dir + "/memory.max", std::to_string(max) + "\n");
    put(dir + "/memory.events", "oom_kill " + std::to_string(kills) + "\noom_group_kill 0\n");
    put(dir + "/memory.pressure",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=" + std::to_string(kills * 1000000) +
            "\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
    put(dir + "/cpu.max", "50000 100000\n");
    put(dir + "/cpu.stat",
        "nr_periods " + std::to_string(periods) + "\nnr_throttled 1\n" + "throttled_usec 10\n");
  };
  cgroup(fx.cg + "/gym/agent", 10 << 20, 16 << 20, 3, 100);
  cgroup(fx.cg + "/gym/agent/verifier", 4 << 20, 8 << 20, 2, 40);
  CgroupCollector c(fx.servers(true), [](const std::string&) {});
  c.sample();
  const CgroupCollector::ServerTotals t = c.totals().at(0);
  EXPECT_EQ(t.total(CgroupCollector::kOomProcess), 3u) << "the parent's 3 hold the child's 2";
  EXPECT_EQ(t.total(CgroupCollector::kMemorySome), 3000000u);
  EXPECT_EQ(t.memory_usage_bytes, uint64_t(10 << 20));
  EXPECT_EQ(t.memory_limit_bytes, uint64_t(16 << 20));
  EXPECT_EQ(t.periods(), 140u) << "each cgroup's quota is its own";
  EXPECT_DOUBLE_EQ(t.cpu_limit_cores.value_or(0), 1.0);
}

// The totals file's lines (the fuzz corpus has this one): read, and written
// back byte for byte.
TEST(CgroupTotalsFile, ALineAServerAndALineACgroupReadAndWrittenBackTheSame) {
  const std::string text =
      "gym-exporter-cgroup-totals 1 b\n"
      "server 11000000001 1 2 0 0 0 0 0 0 3 1 100 resources_server\tmath\n"
      "cgroup 2 1 1 77 1 1 - 0 - 0 - 0 - 0 - 0 - 0 - 0 10 3 1 1 100 100 "
      "/sandboxes/a\t/sys/fs/cgroup/sandboxes/a\n";
  CgroupTotals t;
  std::string why;
  ASSERT_TRUE(decode_cgroup_totals(text, "b", t, why)) << why;
  const CgroupCollector::ServerTotals& math = t.at("math");
  EXPECT_EQ(math.server_type, "resources_server");
  EXPECT_TRUE(math.seen[CgroupCollector::kOomProcess]);
  EXPECT_FALSE(math.seen[CgroupCollector::kMemorySome]);
  EXPECT_EQ(math.total(CgroupCollector::kOomProcess), 2u) << "1 gone and 1 in /sandboxes/a";
  EXPECT_EQ(math.total(CgroupCollector::kThrottledUs), 200u);
  const CgroupCollector::ServerTotals::Kept& a = math.cgroups.at("/sys/fs/cgroup/sandboxes/a");
  EXPECT_EQ(a.inode, 77u);
  EXPECT_EQ(a.place.path, "/sandboxes/a");
  EXPECT_FALSE(a.counts[CgroupCollector::kOomGroup].last.has_value());
  EXPECT_EQ(a.counts[CgroupCollector::kPeriods].last, 10u);
  EXPECT_EQ(encode_cgroup_totals(t, "b"), text);
  EXPECT_FALSE(decode_cgroup_totals(text, "c", t, why)) << "another boot's";
}

// A totals file that is not one (cut short, another boot's, garbage) is
// counted and logged, and the counts of removed cgroups start from zero.
TEST(CgroupCollector, ACorruptOrStaleTotalsFileIsCountedAndIgnored) {
  Fixture fx("0::/gym/agent\n", "0::/exporter\n");
  put(fx.cg + "/gym/agent/memory.current", "1\n");
  put(fx.cg + "/gym/agent/memory.events", "oom_kill 2\n");
  const std::string file = fx.tmp.sub(kCgroupTotalsFile);
  CgroupTotals kept;
  kept["agent"].name = "agent";
  kept["agent"].server_type = "agent";
  kept["agent"].gone[CgroupCollector::kOomProcess] = 5;
  kept["agent"].seen[CgroupCollector::kOomProcess] = true;
  const std::string good = encode_cgroup_totals(kept, procfs::read_boot_id("/proc"));
  for (const std::string& text :
       {good.substr(0, good.size() - 9), encode_cgroup_totals(kept, "another-boot"),
        std::string("\0\xff garbage", 10), good + "cgroup 2 1 1 7 - 1\n"}) {
    put(file, text);
    std::vector<std::string> logged;
    CgroupCollector c(
        fx.servers(true), [&](const std::string& l) { logged.push_back(l); }, 5, file,
        [] { return false; });
    c.sample();
    EXPECT_EQ(c.totals().at(0).total(CgroupCollector::kOomProcess), 2u);
    EXPECT_EQ(c.sample_stats()->errors["totals"], 1u);
    ASSERT_FALSE(logged.empty());
    EXPECT_NE(logged[0].find("ignored the cgroup totals"), std::string::npos) << logged[0];
  }
  put(file, good);
  CgroupCollector c(
      fx.servers(true), [](const std::string&) {}, 5, file, [] { return false; });
  c.sample();
  EXPECT_EQ(c.totals().at(0).total(CgroupCollector::kOomProcess), 7u) << "5 kept and 2 now";
}

TEST(CgroupCollector, OomKillsNeverFallWhenTheCgroupIsRecreatedOrReplaced) {
  Fixture fx("0::/gym/agent\n", "0::/exporter\n");
  const std::string dir = fx.cg + "/gym/agent";
  put(dir + "/memory.current", "1\n");
  put(dir + "/memory.events", "oom_kill 2\n");
  CgroupCollector c(fx.servers(true), [](const std::string&) {});
  auto total = [&] {
    c.sample();
    return c.totals().at(0).total(CgroupCollector::kOomProcess);
  };
  EXPECT_EQ(total(), 2u);
  put(dir + "/memory.events", "oom_kill 3\n");
  EXPECT_EQ(total(), 3u);
  EXPECT_EQ(total(), 3u) << "no growth, nothing added";
  put(dir + "/memory.events", "oom_kill 1\n");  // removed and made again
  EXPECT_EQ(total(), 4u);
  // The server moves to another cgroup that has had 5.
  put(fx.cg + "/gym/other/memory.current", "1\n");
  put(fx.cg + "/gym/other/memory.events", "oom_kill 5\n");
  put(fx.proc + "/100/cgroup", "0::/gym/other\n");
  EXPECT_EQ(total(), 9u);
  EXPECT_EQ(c.servers().at(0).place.path, "/gym/other");
}

TEST(CgroupCollector, ReadsTheV1MemoryHierarchyWhereV2HasNoMemoryController) {
  Fixture fx("4:memory:/gym/agent\n0::/\n", "4:memory:/exporter\n0::/\n");
  const std::string dir = fx.cg + "/gym/agent";
  put(dir + "/memory.usage_in_bytes", "2097152\n");
  put(dir + "/memory.max_usage_in_bytes", "3145728\n");
  put(dir + "/memory.limit_in_bytes", "9223372036854771712\n");  // the kernel's "no limit"
  put(dir + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
  CgroupCollector c(fx.servers(false), [](const std::string&) {});
  c.sample();
  auto f = families(c);
  EXPECT_EQ(f.at("gym_server_cgroup_info").metric.at(0).label.at(3).value, "1");
  EXPECT_EQ(f.at("gym_server_cgroup_memory_usage_bytes").metric.at(0).gauge.value, 2097152);
  EXPECT_EQ(f.at("gym_server_cgroup_memory_peak_bytes").metric.at(0).gauge.value, 3145728);
  EXPECT_FALSE(f.count("gym_server_cgroup_memory_limit_bytes")) << "unlimited";
  EXPECT_EQ(f.at("gym_server_cgroup_oom_kills_total").metric.at(0).counter.value, 1);
  EXPECT_FALSE(f.count("gym_server_cgroup_memory_pressure_seconds_total")) << "v2 only";
}

TEST(CgroupCollector, AServerInTheExportersOwnOrTheRootCgroupHasNoSeries) {
  for (const char* server : {"0::/exporter\n", "0::/\n", "1:cpu:/x\n"}) {
    Fixture fx(server, "0::/exporter\n");
    put(fx.cg + "/exporter/memory.current", "1\n");
    put(fx.cg + "/memory.current", "1\n");
    CgroupCollector c(fx.servers(true), [](const std::string&) {});
    c.sample();
    EXPECT_TRUE(c.servers().empty()) << server;
    auto f = families(c);
    EXPECT_EQ(f.size(), 1u) << "only the error counter";
  }
}

TEST(CgroupCollector, AnUnreadableUsageIsCountedAndLoggedOnce) {
  Fixture fx("0::/gym/agent\n", "0::/exporter\n");
  const std::string dir = fx.cg + "/gym/agent";
  put(dir + "/memory.current", "1\n");  // v2 accounts memory here
  std::filesystem::remove(dir + "/memory.current");
  std::filesystem::create_directory(dir + "/memory.current");  // there, but not a number
  int logged = 0;
  CgroupCollector d(fx.servers(true), [&](const std::string&) { ++logged; });
  d.sample();
  d.sample();
  auto f = families(d);
  EXPECT_EQ(f.at("gym_exporter_cgroup_sample_errors_total").metric.at(0).counter.value, 2);
  EXPECT_EQ(logged, 1);
  EXPECT_FALSE(f.count("gym_server_cgroup_memory_usage_bytes"));
}

uint64_t host_oom_kills() {
  std::string text;
  if (procfs::read_file("/proc/vmstat", text) != procfs::ReadStatus::kOk) return 0;
  return cgroup::find_count(text, "oom_kill").value_or(0);
}

TEST(RealCgroup, AnOomKillInTheServersCgroupIsCountedOnceAndTheRootsOwnIsItsExitReason) {
  RealMemoryCgroup cg(64u << 20);
  if (!cg.ok()) GTEST_SKIP() << "no memory cgroup can be made here: " << cg.why();
  testing::Gate child_hogs, root_hogs;
  testing::Ready ready;
  // The server: joins the cgroup; first a child of it is OOM-killed, then
  // the server itself.
  // It signals at each step even when the step failed (then exits), so that
  // the test fails instead of waiting forever.
  const pid_t root = testing::spawn([&]() -> int {
    const bool joined = cg.join();
    ready.signal();
    if (!joined) return 2;
    child_hogs.wait();
    const pid_t child = testing::spawn([]() -> int { hog(); });
    const int status = testing::wait_exit(child);
    ready.signal();
    if (status != 128 + SIGKILL) return 3;
    root_hogs.wait();
    hog();
  });
  child_hogs.close_read();
  root_hogs.close_read();
  ready.wait(1);
  const uint64_t host_before = host_oom_kills();

  const ServerTarget t = pid_target("verifier", "resources_server", root);
  ServersConfig sc;
  sc.targets = {t};
  CgroupCollector cgroups(make_watcher(sc), [](const std::string&) {});
  testing::SamplerConfig mc;
  mc.targets = {t};
  testing::ServerSampler memory(mc, nullptr, [](const std::string&) {});
  cgroups.sample();
  memory.sample();
  ASSERT_EQ(cgroups.servers().size(), 1u);
  EXPECT_EQ(cgroups.servers()[0].place.version, cg.version());
  EXPECT_EQ(cgroups.servers()[0].memory.limit, 64u << 20);
  EXPECT_EQ(cgroups.totals().at(0).total(CgroupCollector::kOomProcess), 0u);

  child_hogs.open();
  ready.wait(1);  // the child was killed by SIGKILL, and the root goes on
  cgroups.sample();
  memory.sample();
  ASSERT_EQ(cgroups.servers().size(), 1u);
  EXPECT_EQ(cgroups.totals().at(0).total(CgroupCollector::kOomProcess), 1u);
  EXPECT_EQ(cg.oom_kills(), 1u);
  EXPECT_EQ(memory.servers().at(0).oom_kill_exits, 0u) << "the root lives";
  EXPECT_EQ(memory.servers().at(0).exits, 0u);

  root_hogs.open();
  EXPECT_EQ(testing::wait_exit(root), 128 + SIGKILL);
  memory.sample();
  cgroups.sample();
  memory.sample();  // counted once, not at every sample after
  const auto s = memory.servers().at(0);
  EXPECT_FALSE(s.root_pid.has_value());
  EXPECT_EQ(s.oom_kill_exits, 1u);
  EXPECT_EQ(s.exits, 0u);
  EXPECT_TRUE(cgroups.servers().empty()) << "its root is gone";
  EXPECT_EQ(cg.oom_kills(), 2u);
  EXPECT_GE(host_oom_kills(), host_before + 2) << "both kills are the host's too";
  std::map<std::string, double> got;
  memory.collect([&](const prometheus::MetricFamily& f) {
    if (f.name == "gym_host_oom_kills_total") got[f.name] = f.metric.at(0).counter.value;
  });
  EXPECT_GE(got["gym_host_oom_kills_total"], double(host_before + 2));
}

// A sandbox cgroup limited to 32 MiB whose verifier allocates 128 MiB: the
// OOM killer kills it, the kill counts for the server (kind="process"),
// and still does after the sandbox's cgroup is removed and after the
// exporter starts again.
TEST(RealCgroup, ASandboxesOomKillCountsAfterItsCgroupIsRemovedAndTheExporterRestarts) {
  RealMemoryCgroup cg(32u << 20);
  if (!cg.ok()) GTEST_SKIP() << "no memory cgroup can be made here: " << cg.why();
  TempDir registry;
  testing::Gate allocate;
  testing::Ready ready;
  const pid_t root = testing::spawn([&]() -> int {
    const pid_t verifier = testing::spawn([&]() -> int {
      allocate.close_write();  // the gate opens when the test's end closes
      const bool joined = cg.join();
      ready.signal();
      if (!joined) return 2;
      allocate.wait();
      char* p = static_cast<char*>(
          ::mmap(nullptr, 128u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      if (p == MAP_FAILED) return 3;
      for (size_t i = 0; i < (128u << 20); i += 4096) p[i] = 1;
      return 0;  // not killed
    });
    allocate.close_write();
    return testing::wait_exit(verifier);
  });
  allocate.close_read();
  ready.wait(1);
  ServersConfig sc;
  sc.targets = {pid_target("sandboxes", "resources_server", root)};
  const std::string file = registry.sub(kCgroupTotalsFile);
  auto collector = [&] {
    return std::make_unique<CgroupCollector>(
        make_watcher(sc), [](const std::string&) {}, 5, file, [] { return true; });
  };
  auto c = collector();
  c->sample();
  ASSERT_EQ(c->totals().size(), 1u);
  EXPECT_EQ(c->totals()[0].memory_limit_bytes, 32u << 20) << "the sandbox's limit";
  EXPECT_EQ(c->totals()[0].total(CgroupCollector::kOomProcess), 0u);
  allocate.open();
  EXPECT_EQ(testing::wait_exit(root), 128 + SIGKILL) << "the verifier was OOM-killed";
  EXPECT_EQ(cg.oom_kills(), 1u);
  auto kills = [&] {
    c->sample();
    std::map<std::string, double> out;
    for (const auto& [name, f] : families(*c))
      if (name == "gym_server_cgroup_oom_kills_total")
        for (const auto& m : f.metric) out[m.label.at(2).value] = m.counter.value;
    return out;
  };
  const std::map<std::string, double> one{{"process", 1}};
  EXPECT_EQ(kills(), one) << "read once more when its last process went";
  ASSERT_TRUE(cg.remove());
  EXPECT_EQ(kills(), one) << "its cgroup removed";
  c = collector();
  EXPECT_EQ(kills(), one) << "the exporter started again";
  EXPECT_EQ(c->sample_stats()->errors["totals"], 0u);
}

TEST(RealCgroup, AServerThatExitsOnItsOwnCountsAsExitedOnce) {
  testing::Gate gate;
  testing::Ready ready;
  const pid_t root = testing::spawn([&] {
    ready.signal();
    gate.wait();
    return 0;
  });
  gate.close_read();
  ready.wait(1);
  testing::SamplerConfig mc;
  mc.targets = {pid_target("agent", "agent", root)};
  testing::ServerSampler memory(mc, nullptr, [](const std::string&) {});
  memory.sample();
  EXPECT_EQ(memory.servers().at(0).exits, 0u);
  gate.open();
  EXPECT_EQ(testing::wait_exit(root), 0);
  memory.sample();
  memory.sample();
  EXPECT_EQ(memory.servers().at(0).exits, 1u);
  EXPECT_EQ(memory.servers().at(0).oom_kill_exits, 0u);
  std::map<std::string, double> exits;
  memory.collect([&](const prometheus::MetricFamily& f) {
    if (f.name != "gym_server_exits_total") return;
    for (const auto& m : f.metric) exits[m.label.at(2).value] = m.counter.value;
  });
  EXPECT_EQ(exits, (std::map<std::string, double>{{"exited", 1}, {"oom_kill", 0}}));
}

// Waits until `pid` (a child not yet reaped) is a zombie.
bool wait_zombie(pid_t pid) {
  for (int i = 0; i < 2000; ++i) {
    std::string text;
    if (procfs::read_file("/proc/" + std::to_string(pid) + "/stat", text) ==
        procfs::ReadStatus::kOk)
      if (auto st = procfs::parse_stat(text); st && st->zombie()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

// The exit reasons of the only server (of the servers unit's collector).
template <class Sampler>
std::pair<uint64_t, uint64_t> exits_of(const Sampler& m) {
  const auto s = m.servers().at(0);
  return {s.exits, s.oom_kill_exits};
}

TEST(RealCgroup, AnOomKilledRootReapedLateIsAnOomKill) {
  RealMemoryCgroup cg(64u << 20);
  if (!cg.ok()) GTEST_SKIP() << "no memory cgroup can be made here: " << cg.why();
  testing::Gate hogs;
  testing::Ready ready;
  const pid_t root = testing::spawn([&]() -> int {
    const bool joined = cg.join();
    ready.signal();
    if (!joined) return 2;
    hogs.wait();
    hog();
  });
  hogs.close_read();
  ready.wait(1);
  testing::SamplerConfig mc;
  mc.targets = {pid_target("verifier", "resources_server", root)};
  testing::ServerSampler memory(mc, nullptr, [](const std::string&) {});
  memory.sample();
  hogs.open();
  ASSERT_TRUE(wait_zombie(root));
  memory.sample();  // dead, not reaped by its launcher yet
  EXPECT_EQ(testing::wait_exit(root), 128 + SIGKILL);
  memory.sample();
  EXPECT_EQ(cg.oom_kills(), 1u);
  EXPECT_EQ(exits_of(memory), (std::pair<uint64_t, uint64_t>{0, 1}));
}

TEST(RealCgroup, ARootThatMovesIntoItsOwnCgroupAfterFirstSightCountsItsOomKill) {
  RealMemoryCgroup cg(64u << 20);
  if (!cg.ok()) GTEST_SKIP() << "no memory cgroup can be made here: " << cg.why();
  testing::Gate join, hogs;
  testing::Ready ready;
  const pid_t root = testing::spawn([&]() -> int {
    ready.signal();
    join.wait();  // first seen in the exporter's cgroup: none of its own
    const bool joined = cg.join();
    ready.signal();
    if (!joined) return 2;
    hogs.wait();
    hog();
  });
  join.close_read();
  hogs.close_read();
  ready.wait(1);
  testing::SamplerConfig mc;
  mc.targets = {pid_target("verifier", "resources_server", root)};
  testing::ServerSampler memory(mc, nullptr, [](const std::string&) {});
  memory.sample();
  join.open();
  ready.wait(1);
  memory.sample();  // now in a cgroup of its own
  hogs.open();
  EXPECT_EQ(testing::wait_exit(root), 128 + SIGKILL);
  memory.sample();
  EXPECT_EQ(cg.oom_kills(), 1u);
  EXPECT_EQ(exits_of(memory), (std::pair<uint64_t, uint64_t>{0, 1}));
}

TEST(RealCgroup, ConfiguredMountsAreWhereExitReasonsAreRead) {
  // The configuration says where the hierarchy is mounted: a directory laid
  // out as the hierarchy (the cgroups of the test and of the server, each
  // with its OOM count), which only a collector that reads the configured
  // mount can see.
  RealMemoryCgroup cg(64u << 20);
  if (!cg.ok()) GTEST_SKIP() << "no memory cgroup can be made here: " << cg.why();
  testing::Gate gate;
  testing::Ready ready;
  const pid_t root = testing::spawn([&]() -> int {
    const bool joined = cg.join();
    ready.signal();
    if (!joined) return 2;
    gate.wait();
    return 0;
  });
  gate.close_read();
  ready.wait(1);
  std::string text;
  ASSERT_EQ(procfs::read_file("/proc/" + std::to_string(root) + "/cgroup", text),
            procfs::ReadStatus::kOk);
  const cgroup::Membership who = cgroup::parse_membership(text);
  const std::string path = cg.version() == 2 ? *who.v2 : *who.v1_memory;
  TempDir mount;
  std::filesystem::create_directories(mount.path() + path);
  const std::string events =
      mount.path() + path + (cg.version() == 2 ? "/memory.events" : "/memory.oom_control");
  if (cg.version() == 2) std::ofstream(mount.path() + path + "/memory.current") << "0\n";
  std::ofstream(events) << "oom_kill 0\n";
  const std::string key = cg.version() == 2 ? "v2_mount" : "v1_memory_mount";
  const ConfigResult r = parse_config(
      "memory:\n  targets:\n    - {name: verifier, server_type: "
      "resources_server, pid: " +
          std::to_string(root) + "}\ncgroup:\n  " + key + ": " + mount.path() + "\n",
      "mounts.yml");
  ASSERT_TRUE(r.ok()) << r.errors.front();
  auto collectors = make_collectors(r.config, {nullptr});
  ServersCollector* memory = nullptr;  // the servers unit counts exits
  for (auto& c : collectors)
    if (auto* m = dynamic_cast<ServersCollector*>(c.get())) memory = m;
  ASSERT_NE(memory, nullptr);
  memory->sample();
  std::ofstream(events) << "oom_kill 1\n";  // what the configured hierarchy says
  ::kill(root, SIGKILL);
  testing::wait_exit(root);
  memory->sample();
  EXPECT_EQ(cg.oom_kills(), 0u) << "the real cgroup saw none";
  EXPECT_EQ(exits_of(*memory), (std::pair<uint64_t, uint64_t>{0, 1}));
}

// A server whose verifier runs in a sandbox cgroup limited to 0.2 CPU and
// burns CPU for 4 s: the server reads the sandbox's limit and its throttled
// time as the cgroup's own cpu.stat has it.
TEST(RealCgroup, ASandboxesCpuQuotaAndThrottlingCountForItsServer) {
  RealCpuCgroup cg(20000, 100000);
  if (!cg.ok()) GTEST_SKIP() << "no cpu cgroup can be made here: " << cg.why();
  testing::Gate burn, stop;
  testing::Ready ready;
  const pid_t root = testing::spawn([&]() -> int {
    const pid_t verifier = testing::spawn([&]() -> int {
      const bool joined = cg.join();
      ready.signal();
      if (!joined) return 2;
      burn.wait();
      const auto end = std::chrono::steady_clock::now() + 4s;
      volatile uint64_t spin = 0;
      while (std::chrono::steady_clock::now() < end) spin = spin + 1;
      ready.signal();
      stop.wait();
      return 0;
    });
    burn.close_write();  // the gates open when the test's ends close
    stop.close_write();
    return testing::wait_exit(verifier);
  });
  burn.close_read();
  stop.close_read();
  ready.wait(1);
  ServersConfig sc;
  sc.targets = {pid_target("sandboxes", "resources_server", root)};
  CgroupCollector cgroups(make_watcher(sc), [](const std::string&) {});
  cgroups.sample();
  ASSERT_EQ(cgroups.totals().size(), 1u);
  EXPECT_DOUBLE_EQ(cgroups.totals()[0].cpu_limit_cores.value_or(0), 0.2);
  EXPECT_TRUE(cgroups.servers().empty()) << "its root has no cgroup of its own";
  const uint64_t before = cgroups.totals()[0].throttled_us();
  burn.open();
  ready.wait(1);  // burnt
  cgroups.sample();
  ASSERT_EQ(cgroups.totals().size(), 1u);
  const CgroupCollector::ServerTotals c = cgroups.totals()[0];
  const double kernel = double(cg.throttled_us());
  EXPECT_NEAR(double(c.throttled_us()), kernel, kernel * 0.1);
  EXPECT_GT(c.throttled_us() - before, 2000000u) << "0.2 CPU for 4 s: most of it held back";
  EXPECT_GE(c.periods(), 30u);
  EXPECT_GT(c.throttled_periods(), c.periods() / 2);
  stop.open();
  EXPECT_EQ(testing::wait_exit(root), 0);
}

}  // namespace
}  // namespace gym::exporter
