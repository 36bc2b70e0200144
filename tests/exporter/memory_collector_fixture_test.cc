// The memory collector against the fixture proc tree (tests/exporter/
// fixtures/proc, drawn in procfs_test.cc): servers found by pid, pidfile,
// comm and command line; a pidfile naming a reused pid; the host's memory;
// a proc root or smaps_rollup that cannot be read.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include <filesystem>
#include <fstream>

#include "collectors/memory.h"
#include "host/procfs.h"
#include "server_sampler.h"
#include "test_support.h"

namespace gym::exporter {
namespace {

const std::string kFixture = std::string(GYM_TEST_FIXTURES) + "/proc";
const uint64_t kPage = uint64_t(::sysconf(_SC_PAGESIZE));

ServerTarget target(std::string name) {
  ServerTarget t;
  t.name = std::move(name);
  t.server_type = "resources_server";
  return t;
}

const testing::ServerSampler::Server* find(const std::vector<testing::ServerSampler::Server>& v,
                                           const std::string& name) {
  for (const auto& s : v)
    if (s.name == name) return &s;
  return nullptr;
}

TEST(MemoryCollectorFixture, TargetsByPidPidfileCommAndCmdline) {
  testing::SamplerConfig c;
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
  testing::ServerSampler sampler(c, nullptr, [&](const std::string& m) { logged.push_back(m); });
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
  EXPECT_EQ(comm->rss, (1200 + 200) * 1024u) << "with PSS, RSS comes from the same smaps_rollup";
  EXPECT_EQ(comm->pss, (600 + 100) * 1024u);
  const auto* g = find(servers, "gone");
  EXPECT_FALSE(g->root_pid.has_value());
  EXPECT_EQ(g->processes, 0u);
  EXPECT_EQ(g->rss, 0u);
  EXPECT_EQ(g->pss, 0u);
  EXPECT_EQ(g->uss, 0u);
  EXPECT_EQ(g->swap, 0u);
  EXPECT_EQ(find(servers, "no_pss")->rss, (300 + 50) * kPage) << "without PSS, RSS from stat";
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
  testing::SamplerConfig c;
  c.proc_root = kFixture;
  testing::ServerSampler sampler(c, nullptr, [](const std::string&) {});
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
  testing::SamplerConfig c;
  c.proc_root = "/nonexistent/proc";
  auto t = target("x");
  t.pid = 1;
  c.targets = {t};
  testing::ServerSampler sampler(c, nullptr, [](const std::string&) {});
  sampler.sample();
  // Nothing is known of any process: the server is absent, not down.
  EXPECT_TRUE(sampler.servers().empty());
}

// A writable copy of the fixture tree, to change between samples.
class FixtureCopy {
 public:
  FixtureCopy() {
    std::filesystem::copy(kFixture, proc(), std::filesystem::copy_options::recursive);
  }
  std::string proc() const { return tmp_.sub("proc"); }
  std::string path(const std::string& name) const { return tmp_.sub(name); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(tmp_.sub(name), std::ios::trunc) << text;
  }
  // Sets a file's modification time, in seconds since the epoch.
  void set_mtime(const std::string& name, double seconds) const {
    timespec times[2];
    times[0].tv_sec = times[1].tv_sec = time_t(seconds);
    times[0].tv_nsec = times[1].tv_nsec = long((seconds - double(time_t(seconds))) * 1e9);
    ASSERT_EQ(::utimensat(AT_FDCWD, tmp_.sub(name).c_str(), times, 0), 0);
  }

 private:
  testing::TempDir tmp_;
};

// Process 101 of the fixture with another start time (a younger process).
const char* const kStat101Reused =
    "101 (we(ird) )name) S 100 101 101 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 900 1000000 300 "
    "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";

double counted(testing::ServerSampler& sampler, const std::string& family,
               const std::string& label) {
  double value = -1;
  sampler.collect([&](const prometheus::MetricFamily& f) {
    if (f.name != family) return;
    for (const auto& m : f.metric)
      if (label.empty() || (!m.label.empty() && m.label[0].value == label))
        value = f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
  });
  return value;
}

TEST(MemoryCollectorFixture, APidfileNamesTheProcessFirstSeenBehindItNotAReusedPid) {
  FixtureCopy fx;
  fx.write("server.pid", "101\n");
  testing::SamplerConfig c;
  c.proc_root = fx.proc();
  auto t = target("pidfile");
  t.pidfile = fx.path("server.pid");
  c.targets = {t};
  testing::ServerSampler sampler(c, nullptr, [](const std::string&) {});
  sampler.sample();
  EXPECT_EQ(sampler.servers().at(0).root_pid, 101);
  EXPECT_EQ(counted(sampler, "gym_server_up", "pidfile"), 1);
  // The server exits and a younger process gets its pid; the pidfile stays.
  fx.write("proc/101/stat", kStat101Reused);
  sampler.sample();
  EXPECT_FALSE(sampler.servers().at(0).root_pid.has_value()) << "a reused pid is not the server";
  EXPECT_EQ(sampler.servers().at(0).processes, 0u);
  EXPECT_EQ(counted(sampler, "gym_server_up", "pidfile"), 0);
  // A restarted server writes the pidfile again, with the same pid by chance.
  fx.set_mtime("server.pid", double(::time(nullptr)) + 10);
  sampler.sample();
  EXPECT_EQ(sampler.servers().at(0).root_pid, 101) << "a rewritten pidfile names its process";
}

TEST(MemoryCollectorFixture, AProcessYoungerThanItsPidfileIsNotTheServer) {
  FixtureCopy fx;
  // Boot at 1000 s; 101 started 600 ticks later.
  fx.write("proc/stat", "cpu  1 2 3\nbtime 1000\n");
  const double started = 1000 + 600.0 / double(::sysconf(_SC_CLK_TCK));
  fx.write("server.pid", "101\n");
  fx.set_mtime("server.pid", started - 5);  // written before 101 started: stale
  testing::SamplerConfig c;
  c.proc_root = fx.proc();
  auto t = target("pidfile");
  t.pidfile = fx.path("server.pid");
  c.targets = {t};
  testing::ServerSampler sampler(c, nullptr, [](const std::string&) {});
  sampler.sample();
  EXPECT_FALSE(sampler.servers().at(0).root_pid.has_value())
      << "the pid was reused after the pidfile was written";
  EXPECT_EQ(counted(sampler, "gym_server_up", "pidfile"), 0);
  fx.set_mtime("server.pid", started + 0.5);  // written by 101
  sampler.sample();
  EXPECT_EQ(sampler.servers().at(0).root_pid, 101);
  EXPECT_EQ(counted(sampler, "gym_server_up", "pidfile"), 1);
}

TEST(MemoryCollectorFixture, AMissingPidfileIsDownCountedEachTimeAndLoggedOnce) {
  FixtureCopy fx;
  testing::SamplerConfig c;
  c.proc_root = fx.proc();
  auto t = target("missing");
  t.pidfile = fx.path("missing.pid");
  c.targets = {t};
  std::vector<std::string> logged;
  testing::ServerSampler sampler(c, nullptr, [&](const std::string& m) { logged.push_back(m); });
  for (int i = 0; i < 3; ++i) sampler.sample();
  EXPECT_EQ(counted(sampler, "gym_server_up", "missing"), 0) << "a series, at 0";
  EXPECT_EQ(counted(sampler, "gym_server_processes", "missing"), 0);
  EXPECT_EQ(counted(sampler, "gym_exporter_memory_sample_errors_total", "pidfile"), 3);
  ASSERT_EQ(logged.size(), 1u) << "one line while it stays missing";
  EXPECT_NE(logged[0].find("missing.pid"), std::string::npos) << logged[0];
  fx.write("missing.pid", "100\n");
  sampler.sample();
  EXPECT_EQ(counted(sampler, "gym_server_up", "missing"), 1);
  std::filesystem::remove(fx.path("missing.pid"));
  sampler.sample();
  sampler.sample();
  EXPECT_EQ(std::count_if(
                logged.begin(), logged.end(),
                [](const std::string& m) { return m.find("missing.pid") != std::string::npos; }),
            2)
      << "missing again after it was back: logged again, once";
}

TEST(MemoryCollectorFixture, ALiveProcessWithoutSmapsRollupMeansRssOnlyNotPssZero) {
  FixtureCopy fx;
  std::filesystem::remove(fx.path("proc/101/smaps_rollup"));
  std::filesystem::remove(fx.path("proc/102/smaps_rollup"));
  testing::SamplerConfig c;
  c.proc_root = fx.proc();
  auto t = target("old_kernel");
  t.pid = 101;
  c.targets = {t};
  testing::ServerSampler sampler(c, nullptr, [](const std::string&) {});
  sampler.sample();
  const auto s = sampler.servers().at(0);
  EXPECT_EQ(s.processes, 2u);
  EXPECT_EQ(s.rss, (300 + 50) * kPage) << "RSS from stat";
  EXPECT_FALSE(s.pss.has_value());
  EXPECT_FALSE(s.uss.has_value());
  EXPECT_FALSE(s.swap.has_value());
  EXPECT_EQ(counted(sampler, "gym_exporter_memory_sample_errors_total", "read"), 2);
}

}  // namespace
}  // namespace gym::exporter
