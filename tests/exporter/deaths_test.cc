// Deaths of servers' processes (servers/deaths.h, collectors/deaths.h): the
// kernel's process events parsed from bytes in its exact layout, and its
// OOM records from its log's lines (kernels 4.19 to 6.18); the log's
// attribution (a fork joins its parent's server, a reused pid is nobody's,
// records bounded); and, with the real proc connector, a server that forks
// a thousand short children counted exactly by reason and listed with their
// codes, and a sandbox OOM-killed in a real 32 MiB cgroup a moment after it
// started counted as an OOM kill of its server.
#include <gtest/gtest.h>
#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "collectors/deaths.h"
#include "real_cgroup.h"
#include "servers/watcher.h"
#include "test_support.h"

namespace gym::exporter {
namespace {

using namespace std::chrono_literals;
using procev::ProcEvent;

const Log kQuiet = [](const std::string&) {};

// One message as the kernel sends it: netlink header, connector header,
// proc_event (with `what` and the event's fields at their offsets).
std::string message(uint32_t what, const std::vector<int32_t>& fields, uint32_t idx = CN_IDX_PROC) {
  proc_event ev{};
  ev.what = static_cast<decltype(ev.what)>(what);
  std::memcpy(&ev.event_data, fields.data(), fields.size() * sizeof(int32_t));
  cn_msg cn{};
  cn.id = {idx, CN_VAL_PROC};
  cn.len = sizeof ev;
  nlmsghdr h{};
  h.nlmsg_len = uint32_t(NLMSG_HDRLEN + sizeof cn + sizeof ev);
  h.nlmsg_type = NLMSG_DONE;
  std::string out(NLMSG_ALIGN(h.nlmsg_len), '\0');
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + NLMSG_HDRLEN, &cn, sizeof cn);
  std::memcpy(out.data() + NLMSG_HDRLEN + sizeof cn, &ev, sizeof ev);
  return out;
}

TEST(ProcEvents, ForkExecAndExitOfProcessesAreParsedAndThreadsSkipped) {
  std::string datagram =
      message(proc_event::PROC_EVENT_FORK, {100, 100, 200, 200}) +  // a process forks
      message(proc_event::PROC_EVENT_FORK, {200, 200, 201, 200}) +  // a thread starts
      message(proc_event::PROC_EVENT_EXEC, {200, 200}) +
      message(proc_event::PROC_EVENT_EXIT, {201, 200, 0, 17}) +        // the thread ends
      message(proc_event::PROC_EVENT_EXIT, {200, 200, 0x300, 17}) +    // exit(3)
      message(proc_event::PROC_EVENT_EXIT, {202, 202, SIGKILL, 17}) +  // killed
      message(proc_event::PROC_EVENT_UID, {200, 200, 0, 0});           // not used
  std::vector<ProcEvent> got;
  EXPECT_EQ(procev::parse_proc_events(datagram, got), 0u);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].kind, ProcEvent::Kind::kFork);
  EXPECT_EQ(got[0].pid, 200);
  EXPECT_EQ(got[0].parent, 100);
  EXPECT_EQ(got[1].kind, ProcEvent::Kind::kExec);
  EXPECT_EQ(got[2].kind, ProcEvent::Kind::kExit);
  EXPECT_TRUE(WIFEXITED(int(got[2].status)) && WEXITSTATUS(int(got[2].status)) == 3);
  EXPECT_TRUE(WIFSIGNALED(int(got[3].status)) && WTERMSIG(int(got[3].status)) == SIGKILL);
}

TEST(ProcEvents, TruncatedOrForeignMessagesAreCountedNotParsed) {
  const std::string exit = message(proc_event::PROC_EVENT_EXIT, {5, 5, 0, 17});
  std::vector<ProcEvent> got;
  // Cut inside the event: the header's length is past the datagram's end.
  EXPECT_EQ(procev::parse_proc_events(exit.substr(0, exit.size() - 12), got), 1u);
  // Another connector's message.
  EXPECT_EQ(procev::parse_proc_events(message(proc_event::PROC_EVENT_EXIT, {5, 5, 0, 17}, 99), got),
            1u);
  // A pid that cannot be one.
  EXPECT_EQ(procev::parse_proc_events(message(proc_event::PROC_EVENT_EXIT, {0, 0, 0, 17}), got),
            1u);
  EXPECT_TRUE(got.empty());
  // Shorter than a netlink header: nothing, and nothing counted.
  EXPECT_EQ(procev::parse_proc_events(exit.substr(0, 8), got), 0u);
}

// A memory cgroup's OOM as 6.x logs it (the lines between left out).
TEST(Kmsg, AMemoryCgroupsOomKillIsReadWithItsCgroupUsageLimitAndRss) {
  kmsg::OomParser p;
  EXPECT_EQ(kmsg::record_message("6,3568,6940742447,-;memory: usage 32768kB, limit 32768kB, "
                                 "failcnt 96\n SUBSYSTEM=memory\n"),
            "memory: usage 32768kB, limit 32768kB, failcnt 96");
  EXPECT_FALSE(p.message("memory: usage 32768kB, limit 32768kB, failcnt 96"));
  EXPECT_FALSE(p.message("Tasks state (memory values in pages):"));
  EXPECT_FALSE(p.message(
      "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
      "oom_memcg=/gym-test-17060,task_memcg=/gym-test-17060/box,task=sandbox,pid=17064,uid=0"));
  const auto k = p.message(
      "Memory cgroup out of memory: Killed process 17064 (sandbox) total-vm:133680kB, "
      "anon-rss:75212kB, file-rss:4052kB, shmem-rss:0kB, UID:0 pgtables:1380kB "
      "oom_score_adj:0");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->pid, 17064);
  EXPECT_EQ(k->task, "sandbox");
  EXPECT_EQ(k->oom_memcg, "/gym-test-17060");
  EXPECT_EQ(k->task_memcg, "/gym-test-17060/box");
  EXPECT_EQ(k->anon_rss_bytes, 75212u << 10);
  EXPECT_EQ(k->file_rss_bytes, 4052u << 10);
  EXPECT_EQ(k->memcg_usage_bytes, 32768u << 10);
  EXPECT_EQ(k->memcg_limit_bytes, 32768u << 10);
}

// The host's OOM (no memory cgroup), and an older kernel's lone line.
TEST(Kmsg, AHostOomAndAnOlderKernelsKillAreReadTooAndNoiseIsNot) {
  kmsg::OomParser p;
  EXPECT_FALSE(
      p.message("oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,"
                "mems_allowed=0,global_oom,task_memcg=/user.slice,task=python3,"
                "pid=4242,uid=1000"));
  const auto host = p.message(
      "Out of memory: Killed process 4242 (python3) total-vm:9000kB, anon-rss:8000kB, "
      "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:40kB oom_score_adj:0");
  ASSERT_TRUE(host);
  EXPECT_EQ(host->task_memcg, "/user.slice");
  EXPECT_EQ(host->oom_memcg, "");
  EXPECT_FALSE(host->memcg_limit_bytes);
  const auto old = p.message(
      "Killed process 77 (a (b) c) total-vm:10kB, anon-rss:4kB, "
      "file-rss:0kB, shmem-rss:0kB");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->pid, 77);
  EXPECT_EQ(old->task, "a (b) c");
  EXPECT_FALSE(p.message("oom_reaper: reaped process 77 (x), now anon-rss:0kB"));
  EXPECT_FALSE(p.message("Killed process x (y)"));
  EXPECT_FALSE(p.message("Killed process 0 (y) total-vm:1kB"));
  EXPECT_EQ(kmsg::record_message("no header here"), "");
}

ProcEvent fork_of(pid_t parent, pid_t child) {
  return {ProcEvent::Kind::kFork, child, parent, 0};
}
ProcEvent exit_of(pid_t pid, uint32_t status) {
  return {ProcEvent::Kind::kExit, pid, 0, status};
}
const auto kNoCommand = [](pid_t) { return std::string(); };

TEST(DeathLog, AForkJoinsItsParentsServerAndItsExitIsCountedByReason) {
  DeathLog log;
  log.resync({{10, 1, "verifier", "resources_server", "python3", 100, 4096}}, 100.0);
  log.on_event(fork_of(10, 11), 101.0, 1e9, kNoCommand);
  log.on_event(fork_of(11, 12), 101.0, 1e9, kNoCommand);
  log.on_event(fork_of(99, 13), 101.0, 1e9, kNoCommand);  // no server's
  log.on_event(exit_of(12, 0), 101.25, 1e9 + 1, kNoCommand);
  log.on_event(exit_of(11, SIGSEGV), 102.0, 1e9 + 2, kNoCommand);
  log.on_event(exit_of(13, 0), 102.0, 1e9 + 2, kNoCommand);
  const auto counts = log.counts();
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[0].exits[0], 1u);  // exit_zero
  EXPECT_EQ(counts[0].exits[2], 1u);  // signal
  const auto records = log.records("", 0, "");
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].pid, 12);
  EXPECT_EQ(records[0].parent, 11);
  EXPECT_EQ(records[0].command, "python3");
  EXPECT_DOUBLE_EQ(*records[0].lifetime_seconds, 0.25);
  EXPECT_EQ(records[1].signal, SIGSEGV);
  EXPECT_EQ(log.records("", 0, "signal").size(), 1u);
  EXPECT_EQ(log.records("other", 0, "").size(), 0u);
  EXPECT_EQ(log.records("", 1e9 + 2, "").size(), 1u);
}

TEST(DeathLog, APidReusedByAProcessOfNoServerIsNotTheServers) {
  DeathLog log;
  log.resync({{10, 1, "verifier", "resources_server", "", 100, {}},
              {20, 10, "verifier", "resources_server", "", 100, {}}},
             100.0);
  log.on_event(exit_of(20, 0), 101.0, 1e9, kNoCommand);
  // Before the next sample, the resync's stale view names 20 again; then the
  // pid goes to a process of no server.
  log.resync({{10, 1, "verifier", "resources_server", "", 100, {}},
              {20, 10, "verifier", "resources_server", "", 100, {}}},
             100.5);
  log.on_event(fork_of(1, 20), 102.0, 1e9, kNoCommand);
  log.on_event(exit_of(20, SIGKILL), 103.0, 1e9, kNoCommand);
  EXPECT_EQ(log.counts()[0].exits[0], 1u);
  EXPECT_EQ(log.counts()[0].exits[2], 0u) << "not the server's death";
}

// A child that exits while a sample walks the tree is missing from it, its
// exit event still queued: it is counted when the event comes. One that two
// samples miss is dropped (its exit was lost).
TEST(DeathLog, AnExitQueuedBehindASampleIsCountedAndTwoMissesDrop) {
  DeathLog log;
  log.resync({{10, 1, "s", "resources_server", "", 1, {}}}, 1.0);
  log.on_event(fork_of(10, 11), 1.5, 1e9, kNoCommand);
  log.on_event(fork_of(10, 12), 1.5, 1e9, kNoCommand);
  log.resync({{10, 1, "s", "resources_server", "", 1, {}}}, 2.0);  // both gone when walked
  log.on_event(exit_of(11, 0), 2.1, 1e9, kNoCommand);
  EXPECT_EQ(log.counts()[0].exits[0], 1u);
  log.resync({{10, 1, "s", "resources_server", "", 1, {}}}, 3.0);  // 12's second miss
  log.on_event(exit_of(12, 0), 3.1, 1e9, kNoCommand);
  EXPECT_EQ(log.counts()[0].exits[0], 1u) << "12 was dropped";
  EXPECT_EQ(log.watched(), 1u);
}

TEST(DeathLog, RecordsAreBoundedByCountAndAge) {
  DeathLog log(DeathLimits{.records = 3, .max_age_seconds = 10});
  log.resync({{10, 1, "s", "resources_server", "", 1, {}}}, 1.0);
  for (pid_t p = 100; p < 110; ++p) {
    log.on_event(fork_of(10, p), 2.0, 1000, kNoCommand);
    log.on_event(exit_of(p, 0), 2.0, 1000 + p - 100, kNoCommand);
  }
  EXPECT_EQ(log.records("", 0, "").size(), 3u);
  EXPECT_EQ(log.counts()[0].exits[0], 10u) << "counts are not bounded";
  log.on_event(fork_of(10, 200), 3.0, 1100, kNoCommand);
  log.on_event(exit_of(200, 0), 3.0, 1100, kNoCommand);
  EXPECT_EQ(log.records("", 0, "").size(), 1u) << "older than 10 s at 1100";
}

// The watcher of one configured server, "sandboxes", the process `pid`,
// sampled once (at start).
std::shared_ptr<ServerWatcher> sandboxes(pid_t pid) {
  ServerTarget t;
  t.name = "sandboxes";
  t.server_type = "resources_server";
  t.pid = pid;
  ServersConfig config;
  config.targets = {t};
  config.interval_seconds = 3600;
  return make_watcher(config);
}

// The real connector: a configured server forks 1,000 children, most living
// under 10 ms, that exit 0, exit 7, are killed (SIGKILL) or crash (SIGSEGV).
TEST(Deaths, AThousandShortChildrenAreCountedExactlyByReasonAndListed) {
  std::string why;
  if (!procev::ProcConnector::open(&why)) GTEST_SKIP() << "no process events here: " << why;
  testing::Gate gate;
  const pid_t server = testing::spawn([&] {
    gate.wait();
    for (int i = 0; i < 1000; ++i) {
      const pid_t c = ::fork();
      if (c == 0) {
        if (i % 4 == 1) ::_exit(7);
        if (i % 4 == 2) ::raise(SIGKILL);
        if (i % 4 == 3) {
          ::signal(SIGSEGV, SIG_DFL);
          ::raise(SIGSEGV);
        }
        ::_exit(0);
      }
      int status;
      ::waitpid(c, &status, 0);
    }
    ::pause();
    return 0;
  });
  auto log = std::make_shared<DeathLog>();
  DeathsCollector deaths(sandboxes(server), log, kQuiet);
  ASSERT_TRUE(deaths.connected());
  deaths.start();
  gate.open();
  auto counted = [&] {
    uint64_t n = 0;
    for (const auto& c : log->counts())
      for (uint64_t e : c.exits) n += e;
    return n;
  };
  for (int i = 0; i < 3000 && counted() < 1000; ++i) std::this_thread::sleep_for(10ms);
  ::kill(server, SIGKILL);
  testing::wait_exit(server);
  // Its exit event reaches the reader a moment after its parent saw it.
  for (int i = 0; i < 3000 && counted() < 1001; ++i) std::this_thread::sleep_for(10ms);
  deaths.stop();
  const auto counts = log->counts();
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[0].server, "sandboxes");
  EXPECT_EQ(counts[0].exits[0], 250u) << "exit_zero";
  EXPECT_EQ(counts[0].exits[1], 250u) << "exit_nonzero";
  EXPECT_EQ(counts[0].exits[2], 500u + 1) << "signal: the children, then the server itself";
  const auto records = log->records("sandboxes", 0, "");
  ASSERT_EQ(records.size(), 1001u);
  std::map<std::string, int> codes;
  for (const ProcessDeath& d : records) {
    if (d.pid == server) continue;
    EXPECT_EQ(d.parent, server);
    ASSERT_TRUE(d.lifetime_seconds.has_value());
    codes[d.exit_code ? "exit " + std::to_string(*d.exit_code)
                      : "signal " + std::to_string(*d.signal)]++;
  }
  EXPECT_EQ(codes, (std::map<std::string, int>{
                       {"exit 0", 250}, {"exit 7", 250}, {"signal 9", 250}, {"signal 11", 250}}));
}

// The sandbox: a server forks one that moves itself into a 32 MiB
// memory cgroup and takes 1 MiB every 10 ms, OOM-killed about 0.3 s after
// it starts, between samples; then a process of no server is OOM-killed
// in the same cgroup. One oom_kill, the server's, listed with its cgroup
// and the cgroup's limit; the cgroup removed, nothing changes.
TEST(Deaths, ASandboxOomKilledAMomentAfterItStartsIsItsServersOomKill) {
  std::string why;
  if (!procev::ProcConnector::open(&why)) GTEST_SKIP() << "no process events here: " << why;
  if (!kmsg::KmsgReader::open("/dev/kmsg", &why)) GTEST_SKIP() << "no kernel log: " << why;
  RealMemoryCgroup cg(32u << 20);
  if (!cg.ok()) GTEST_SKIP() << "no memory cgroup can be made here: " << cg.why();
  testing::Gate go;
  const pid_t server = testing::spawn([&] {
    go.wait();
    const pid_t sandbox = testing::spawn([&]() -> int {
      if (!cg.join()) return 2;
      for (;;) {
        void* p =
            ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED) std::memset(p, 1, 1 << 20);
        std::this_thread::sleep_for(10ms);
      }
    });
    const int status = testing::wait_exit(sandbox);
    ::pause();
    return status;
  });
  go.close_read();
  // A process of no server, to be OOM-killed in the same cgroup: forked
  // before the collector's threads are (a fork beside threads is not safe
  // under ThreadSanitizer).
  testing::Gate strike;
  const pid_t stranger = testing::spawn([&]() -> int {
    go.close_write();  // the server's gate opens when the test closes it
    strike.wait();
    if (!cg.join()) return 2;
    hog();
  });
  strike.close_read();
  auto log = std::make_shared<DeathLog>();
  DeathsCollector deaths(sandboxes(server), log, kQuiet);
  deaths.start();
  go.open();
  auto oom_kills = [&] { return log->counts().empty() ? 0 : log->counts()[0].exits[3]; };
  for (int i = 0; i < 1000 && oom_kills() < 1; ++i) std::this_thread::sleep_for(10ms);
  strike.open();
  EXPECT_EQ(testing::wait_exit(stranger), 128 + SIGKILL);
  std::this_thread::sleep_for(300ms);  // the stranger's exit, had it been counted
  ::kill(server, SIGKILL);
  testing::wait_exit(server);
  EXPECT_TRUE(cg.remove());
  for (int i = 0; i < 3000 && log->counts()[0].exits[2] < 1; ++i)
    std::this_thread::sleep_for(10ms);  // the server's own exit event
  deaths.stop();
  const auto counts = log->counts();
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[0].exits[3], 1u) << "oom_kill: the sandbox, not the stranger";
  EXPECT_EQ(counts[0].exits[2], 1u) << "signal: the server, killed at the end";
  const auto ooms = log->records("sandboxes", 0, "oom_kill");
  ASSERT_EQ(ooms.size(), 1u);
  const ProcessDeath& d = ooms[0];
  EXPECT_EQ(d.parent, server);
  EXPECT_EQ(d.signal, SIGKILL);
  EXPECT_NE(d.memory_cgroup.find("/gym-test-"), std::string::npos) << d.memory_cgroup;
  EXPECT_EQ(d.memory_cgroup_limit_bytes, uint64_t(32) << 20);
  ASSERT_TRUE(d.lifetime_seconds);
  EXPECT_LT(*d.lifetime_seconds, 5.0);
  ASSERT_TRUE(d.rss_bytes);
  EXPECT_GT(*d.rss_bytes, uint64_t(16) << 20) << "the kernel's figure at the kill";
}

// A fork storm: 20,000 children as fast as they come, each exiting at once.
// Either every one is counted, or the kernel's drops are counted and the
// next sample resynchronises (the log then watches the server's live
// processes only).
TEST(Deaths, AForkStormLosesNothingOrCountsWhatItLost) {
  std::string why;
  if (!procev::ProcConnector::open(&why)) GTEST_SKIP() << "no process events here: " << why;
  testing::Gate gate;
  constexpr uint64_t kChildren = 20000;
  const pid_t server = testing::spawn([&] {
    gate.wait();
    for (uint64_t i = 0; i < kChildren; ++i) {
      const pid_t c = ::fork();
      if (c == 0) ::_exit(0);
      ::waitpid(c, nullptr, 0);
    }
    ::pause();
    return 0;
  });
  auto log = std::make_shared<DeathLog>();
  DeathsCollector deaths(sandboxes(server), log, kQuiet, 0.2);
  deaths.start();
  gate.open();
  const auto exits = [&] { return log->counts().empty() ? 0 : log->counts()[0].exits[0]; };
  uint64_t last = 0;
  for (int quiet = 0; quiet < 100 && exits() < kChildren; ++quiet) {  // 2 s without progress
    std::this_thread::sleep_for(20ms);
    if (exits() != last) quiet = 0, last = exits();
  }
  Families families;
  deaths.collect([&](const Family& f) { families.push_back(f); });
  double lost = -1;
  for (const Family& f : families)
    if (f.name == "gym_exporter_process_events_lost_total") lost = f.metric.at(0).counter.value;
  std::printf("%llu of %llu exits counted, %g drops\n", (unsigned long long)exits(),
              (unsigned long long)kChildren, lost);
  EXPECT_TRUE(exits() == kChildren || lost > 0) << exits() << " counted, no drop counted";
  EXPECT_LE(exits(), kChildren);
  std::this_thread::sleep_for(500ms);  // a sample after the storm
  EXPECT_LE(log->watched(), 2u) << "the server (and a child not yet reaped) only";
  ::kill(server, SIGKILL);
  testing::wait_exit(server);
  deaths.stop();
}

// An exporter started again goes on from the counts and lists the records
// the last one kept in the registry directory (its lock holder writes
// them), an OOM kill with its cgroup; a file that is not one is ignored and
// counted, never taken.
TEST(Deaths, CountsGoOnAcrossAnExporterRestart) {
  testing::TempDir dir;
  const auto claimed = [&] {
    auto r = std::make_shared<SharedRegistry>(dir.path());
    std::string why;
    EXPECT_TRUE(r->with([&](RegistryReader& rr) { return rr.claim(&why); })) << why;
    return r;
  };
  CollectorContext c;
  c.warn = kQuiet;
  c.servers = sandboxes(::getpid());
  {
    c.registry = claimed();
    c.deaths = std::make_shared<DeathLog>();
    c.deaths->resync({{10, 1, "sandboxes", "resources_server", "", 1, {}}}, 1.0);
    for (pid_t p = 100; p < 103; ++p) c.deaths->on_event(fork_of(10, p), 2.0, 1e9, kNoCommand);
    c.deaths->on_event(exit_of(100, 0), 2.0, 1e9, kNoCommand);
    c.deaths->on_event(exit_of(101, 0x700), 2.0, 1e9, kNoCommand);
    kmsg::OomKill oom;
    oom.pid = 102;
    oom.oom_memcg = "/box";
    oom.memcg_limit_bytes = 32 << 20;
    c.deaths->on_oom(oom, 2.0);
    c.deaths->on_event(exit_of(102, SIGKILL), 2.0, 1e9, kNoCommand);
    auto made = make_collector("deaths", c, nullptr);
    ASSERT_TRUE(made);
  }                    // the exporter stops: its counts are written
  c.registry.reset();  // and lets go of the directory
  c.registry = claimed();
  c.deaths = std::make_shared<DeathLog>();
  auto again = make_collector("deaths", c, nullptr);
  const auto counts = c.deaths->counts();
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[0].exits, (std::array<uint64_t, 4>{1, 1, 0, 1}));
  // And the records, the OOM kill's cgroup with them.
  const auto listed = c.deaths->records("sandboxes", 0, "");
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[1].exit_code, 7);
  EXPECT_EQ(listed[2].reason, "oom_kill");
  EXPECT_EQ(listed[2].signal, SIGKILL);
  EXPECT_EQ(listed[2].memory_cgroup, "/box");
  EXPECT_EQ(listed[2].memory_cgroup_limit_bytes, uint64_t(32) << 20);
  EXPECT_EQ(listed[2].parent, 10);
  EXPECT_DOUBLE_EQ(*listed[2].lifetime_seconds, 0.0);
  again.reset();
  std::ofstream(dir.path() + "/" + kDeathsFile) << "gym-exporter-deaths 1\nsince x\n";
  c.deaths = std::make_shared<DeathLog>();
  auto third = make_collector("deaths", c, nullptr);
  EXPECT_TRUE(c.deaths->counts().empty()) << "a broken file is not taken";
  auto* sampled = dynamic_cast<DeathsCollector*>(third.get());
  ASSERT_NE(sampled, nullptr);
  EXPECT_EQ(sampled->sample_stats()->errors.at("totals"), 1u);
}

}  // namespace
}  // namespace gym::exporter
