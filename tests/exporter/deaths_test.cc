// Deaths of servers' processes (servers/deaths.h, collectors/deaths.h): the
// kernel's process events parsed from bytes in its exact layout; the log's
// attribution (a fork joins its parent's server, a reused pid is nobody's,
// records bounded); and, with the real proc connector, a server that forks
// a thousand short children counted exactly by reason and listed with their
// codes.
#include <gtest/gtest.h>
#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "collectors/deaths.h"
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
  ServersConfig config;
  ServerTarget t;
  t.name = "sandboxes";
  t.server_type = "resources_server";
  t.pid = server;
  config.targets = {t};
  config.interval_seconds = 3600;  // one sample, at start
  auto log = std::make_shared<DeathLog>();
  DeathsCollector deaths(make_watcher(config), log, kQuiet);
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

}  // namespace
}  // namespace gym::exporter
