// What a server is: every process that belongs to it (server_tree.h), with
// real processes: unrelated declarers of one name, a declarer below another,
// Ray actors adopted by a match rule, a sandbox adopted through its cgroup,
// writers in other pid namespaces (unshare), and an exporter that cannot see
// a writer's namespace.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "collectors/cpu.h"
#include "collectors/memory.h"
#include "config.h"
#include "exporter/process_support.h"
#include "gym/server_identity.h"
#include "server_sampler.h"
#include "snapshot/view.h"
#include "test_support.h"

namespace gym::exporter {
namespace {

using testing::children_of;
using testing::Program;
using testing::unshare_works;

using namespace std::chrono_literals;
using Server = testing::ServerSampler::Server;

const Log kQuiet = [](const std::string&) {};

// A copy of the named server of `servers` (nullopt: none).
std::optional<Server> find(const std::vector<Server>& servers, const std::string& name) {
  for (const Server& s : servers)
    if (s.name == name) return s;
  return std::nullopt;
}

// Summed Rss of smaps_rollup of `pids` (bytes).
uint64_t smaps_rss(const std::vector<pid_t>& pids) {
  uint64_t sum = 0;
  for (pid_t pid : pids) {
    std::string text;
    if (procfs::read_file("/proc/" + std::to_string(pid) + "/smaps_rollup", text) ==
        procfs::ReadStatus::kOk)
      sum += procfs::parse_smaps_rollup(text).rss.value_or(0);
  }
  return sum;
}

// Waits (up to 10 s) until `pid`'s command line starts with `title`.
bool wait_title(pid_t pid, const std::string& title) {
  for (int i = 0; i < 2000; ++i) {
    std::string text;
    if (procfs::read_file("/proc/" + std::to_string(pid) + "/cmdline", text) ==
            procfs::ReadStatus::kOk &&
        text.rfind(title, 0) == 0)
      return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

TEST(Attribution, TwoUnrelatedDeclarersOfOneNameAreOneServerAndOneExitingLeavesTheOther) {
  testing::TempDir tmp;
  testing::Gate gate;
  testing::Ready ready;
  // A server process and an unrelated one (a Ray actor's stand-in, holding
  // the model's memory) declare the same name.
  auto declarer = [&](size_t megabytes) {
    return testing::spawn([&, megabytes] {
      ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
      declare_server("policy_model", "model_server");
      std::vector<char> held(megabytes << 20);
      for (size_t i = 0; i < held.size(); i += 4096) held[i] = 1;
      ready.signal();
      gate.wait();
      return int(held[0]) - 1;
    });
  };
  const pid_t server = declarer(1);
  const pid_t actor = declarer(48);
  ready.wait(2);
  auto registry = std::make_shared<SharedRegistry>(tmp.path());
  testing::ServerSampler sampler(testing::SamplerConfig{}, registry, kQuiet);
  sampler.sample();
  std::optional<Server> s = find(sampler.servers(), "policy_model");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->processes, 2u);
  EXPECT_EQ(std::set<pid_t>(s->root_pids.begin(), s->root_pids.end()),
            (std::set<pid_t>{server, actor}));
  EXPECT_GT(s->rss, uint64_t(48) << 20) << "the actor's memory is the server's";
  const uint64_t both = s->rss;
  const uint64_t summed = smaps_rss({server, actor});
  EXPECT_NEAR(double(s->rss), double(summed), double(summed) * 0.01);
  // One gym_server_info per root.
  int infos = 0;
  sampler.collect([&](const prometheus::MetricFamily& f) {
    if (f.name == "gym_server_info") infos += int(f.metric.size());
  });
  EXPECT_EQ(infos, 2);

  ::kill(actor, SIGKILL);
  testing::wait_exit(actor);
  sampler.sample();
  s = find(sampler.servers(), "policy_model");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->root_pid, server) << "the other declarer is still the server: up";
  EXPECT_EQ(s->root_pids, std::vector<pid_t>{server});
  EXPECT_EQ(s->processes, 1u);
  // The actor's 48 MiB went with it. (Not a fixed bound: under a sanitizer
  // a forked test process alone is some 50 MB, its parent's pages.)
  EXPECT_LE(s->rss + (uint64_t(40) << 20), both);
  const uint64_t alone = smaps_rss({server});
  EXPECT_NEAR(double(s->rss), double(alone), double(alone) * 0.01);
  EXPECT_EQ(s->exits, 1u) << "the root that went is an exit";
  gate.open();
  testing::wait_exit(server);
}

TEST(Attribution, ADeclarerBelowAnotherDeclarerOfTheSameServerCountsOnce) {
  testing::TempDir tmp;
  testing::Gate gate;
  testing::Ready ready;
  const pid_t server = testing::spawn([&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    declare_server("math_verifier", "resources_server");
    // Its child declares the same server again (a sandbox entrypoint would).
    const pid_t child = testing::spawn([&] {
      declare_server("math_verifier", "resources_server");
      std::vector<char> held(16 << 20);
      for (size_t i = 0; i < held.size(); i += 4096) held[i] = 1;
      ready.signal();
      gate.wait();
      return int(held[0]) - 1;
    });
    gate.wait();
    return testing::wait_exit(child);
  });
  ready.wait(1);
  auto registry = std::make_shared<SharedRegistry>(tmp.path());
  testing::ServerSampler sampler(testing::SamplerConfig{}, registry, kQuiet);
  sampler.sample();
  std::optional<Server> s = find(sampler.servers(), "math_verifier");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->processes, 2u) << "each process once";
  EXPECT_EQ(s->root_pids, std::vector<pid_t>{server}) << "the child is in its parent's tree";
  std::vector<pid_t> members{server};
  for (pid_t c : children_of(server)) members.push_back(c);
  ASSERT_EQ(members.size(), 2u);
  const uint64_t summed = smaps_rss(members);
  EXPECT_NEAR(double(s->rss), double(summed), double(summed) * 0.01);
  gate.open();
  EXPECT_EQ(testing::wait_exit(server), 0);
}

TEST(Attribution, RayActorsAreAdoptedByAMatchRuleWithTheirDescendants) {
  testing::TempDir tmp;
  testing::Gate gate;
  testing::Ready ready;
  const pid_t server = testing::spawn([&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    declare_server("policy_model", "model_server");
    ready.signal();
    gate.wait();
    return 0;
  });
  // Two actors as Ray starts them: processes that are not the server's
  // children (raylet's, here a shell's), retitled ray::<Class>.<method>;
  // one has a child of its own.
  std::vector<Program> actors;
  actors.reserve(2);
  actors.emplace_back(
      std::vector<std::string>{"bash", "-c",
                               "exec -a ray::LocalVLLMModelActor.__init__ sleep 60 & "
                               "echo $!; wait"},
      tmp.path());
  actors.emplace_back(
      std::vector<std::string>{"bash", "-c",
                               "(exec -a 'ray::LocalVLLMModelActor.generate' bash -c "
                               "'sleep 60 & echo $$; wait') & wait"},
      tmp.path());
  std::vector<pid_t> actor_pids;
  for (Program& a : actors) actor_pids.push_back(std::stoi(a.line()));
  for (pid_t a : actor_pids) ASSERT_TRUE(wait_title(a, "ray::LocalVLLMModelActor."));
  ready.wait(1);
  // Another actor class is not the model's.
  Program other({"bash", "-c", "exec -a ray::RewardActor.__init__ sleep 60"}, tmp.path());
  ASSERT_TRUE(wait_title(other.pid(), "ray::RewardActor."));

  const ConfigResult r = parse_config(R"(
servers:
  targets:
    - name: policy_model
      server_type: model_server
      match: {ray_actor: LocalVLLMModelActor, all: true}
)",
                                      "ray.yml");
  ASSERT_TRUE(r.ok()) << r.errors.front();
  auto registry = std::make_shared<SharedRegistry>(tmp.path());
  testing::ServerSampler sampler(r.config, registry, kQuiet);
  sampler.sample();
  std::optional<Server> s = find(sampler.servers(), "policy_model");
  ASSERT_TRUE(s.has_value());
  std::set<pid_t> roots(s->root_pids.begin(), s->root_pids.end());
  EXPECT_TRUE(roots.contains(server)) << "the declarer";
  for (pid_t a : actor_pids) EXPECT_TRUE(roots.contains(a)) << "actor " << a;
  EXPECT_EQ(roots.size(), 3u) << "not the RewardActor";
  EXPECT_EQ(s->processes, 4u) << "server, two actors, the second actor's child";
  gate.open();
  testing::wait_exit(server);
}

TEST(Attribution, AMatchRuleOverItsBoundKeepsTheOldestAndIsCounted) {
  testing::TempDir tmp;
  std::vector<Program> actors;
  actors.reserve(3);
  for (int i = 0; i < 3; ++i) {
    actors.emplace_back(
        std::vector<std::string>{"bash", "-c", "exec -a ray::Sandbox.run sleep 60 & echo $!; wait"},
        tmp.path());
    ASSERT_TRUE(wait_title(std::stoi(actors.back().line()), "ray::Sandbox.run"));
  }
  const ConfigResult r = parse_config(R"(
servers:
  targets:
    - {name: sandboxes, server_type: resources_server, max_roots: 2,
       match: {ray_actor: Sandbox, all: true}}
)",
                                      "bound.yml");
  ASSERT_TRUE(r.ok()) << r.errors.front();
  std::vector<std::string> logged;
  testing::ServerSampler sampler(r.config, nullptr,
                                 [&](const std::string& l) { logged.push_back(l); });
  sampler.sample();
  sampler.sample();
  std::optional<Server> s = find(sampler.servers(), "sandboxes");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->root_pids.size(), 2u);
  EXPECT_EQ(s->processes, 2u);
  double adoption = -1;
  sampler.collect([&](const prometheus::MetricFamily& f) {
    if (f.name != "gym_exporter_memory_sample_errors_total") return;
    for (const auto& m : f.metric)
      if (m.label.at(0).value == "adoption") adoption = m.counter.value;
  });
  EXPECT_EQ(adoption, 2) << "counted at each sample";
  EXPECT_EQ(std::count_if(logged.begin(), logged.end(),
                          [](const std::string& l) {
                            return l.find("more than max_roots") != std::string::npos;
                          }),
            1)
      << "logged once";
}

TEST(Attribution, ASandboxIsAdoptedThroughItsCgroup) {
  std::string text;
  ASSERT_EQ(procfs::read_file("/proc/self/mountinfo", text), procfs::ReadStatus::kOk);
  const cgroup::Mounts m = cgroup::parse_mountinfo(text);
  const std::string mount = !m.v2.empty() ? m.v2 : m.v1_memory;
  if (mount.empty()) GTEST_SKIP() << "no cgroup hierarchy mounted";
  const std::string dir = mount + "/gym-sandbox-" + std::to_string(::getpid());
  if (::mkdir(dir.c_str(), 0755) != 0)
    GTEST_SKIP() << "cannot create " << dir << ": " << std::strerror(errno);
  testing::Gate gate;
  testing::Ready ready;
  // The sandbox: a process of the container runtime (not the server's
  // child) in the container's cgroup, with a child of its own.
  const pid_t sandbox = testing::spawn([&] {
    std::ofstream(dir + "/cgroup.procs") << ::getpid() << std::flush;
    const pid_t verifier = testing::spawn([&] {
      ready.signal();
      gate.wait();
      return 0;
    });
    gate.wait();
    return testing::wait_exit(verifier);
  });
  ready.wait(1);
  const ConfigResult r = parse_config(R"(
servers:
  targets:
    - name: code_sandbox
      server_type: resources_server
      cgroups: ["gym-sandbox-*"]
)",
                                      "cgroups.yml");
  ASSERT_TRUE(r.ok()) << r.errors.front();
  testing::ServerSampler sampler(r.config, nullptr, kQuiet);
  sampler.sample();
  std::optional<Server> s = find(sampler.servers(), "code_sandbox");
  ASSERT_TRUE(s.has_value());
  // The sandbox process itself is in the cgroup; its verifier joined it by
  // being forked there, so both are roots, and counted once each.
  EXPECT_TRUE(std::find(s->root_pids.begin(), s->root_pids.end(), sandbox) != s->root_pids.end());
  EXPECT_EQ(s->processes, 2u);
  gate.open();
  EXPECT_EQ(testing::wait_exit(sandbox), 0);
  for (int i = 0; i < 500 && ::rmdir(dir.c_str()) != 0; ++i) std::this_thread::sleep_for(10ms);
}

// A verifier the server started 1.5 s ago and left running: the server's
// oldest process (its root, older still, is not counted) is that old; when
// it goes, the server has none.
TEST(Attribution, ALeftRunningVerifierIsTheServersOldestProcessByItsAge) {
  testing::Gate verifier_ends, root_ends;
  testing::Ready ready;
  const pid_t root = testing::spawn([&] {
    std::this_thread::sleep_for(300ms);  // the root is older than its verifier
    const pid_t verifier = testing::spawn([&] {
      verifier_ends.close_write();  // the gates open when the test's ends close
      root_ends.close_write();
      ready.signal();
      verifier_ends.wait();
      return 0;
    });
    verifier_ends.close_write();
    root_ends.close_write();
    const int status = testing::wait_exit(verifier);
    ready.signal();
    root_ends.wait();
    return status;
  });
  verifier_ends.close_read();
  root_ends.close_read();
  ready.wait(1);
  const auto started = std::chrono::steady_clock::now();
  testing::SamplerConfig c;
  ServerTarget t;
  t.name = "verifier_server";
  t.server_type = "resources_server";
  t.pid = root;
  c.targets = {t};
  testing::ServerSampler sampler(c, nullptr, kQuiet);
  std::this_thread::sleep_for(1500ms);
  sampler.sample();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::optional<Server> s = find(sampler.servers(), "verifier_server");
  ASSERT_TRUE(s.has_value());
  ASSERT_TRUE(s->oldest_process_seconds.has_value());
  EXPECT_GE(*s->oldest_process_seconds, waited - 0.1);
  EXPECT_LT(*s->oldest_process_seconds, waited + 0.3) << "the verifier's age, not the root's";
  verifier_ends.open();
  ready.wait(1);
  sampler.sample();
  s = find(sampler.servers(), "verifier_server");
  ASSERT_TRUE(s.has_value());
  EXPECT_FALSE(s->oldest_process_seconds.has_value()) << "only its root is left";
  root_ends.open();
  EXPECT_EQ(testing::wait_exit(root), 0);
}

TEST(Attribution, AWriterInItsOwnPidNamespaceIsFoundOnTheHostWithItsMemoryAndCpu) {
  if (!unshare_works()) GTEST_SKIP() << "unshare --pid --fork --mount-proc does not work here";
  testing::TempDir tmp;
  Program writer({"unshare", "--pid", "--fork", "--mount-proc", GYM_DECLARE_BIN, "policy_model",
                  "model_server", "40", "0.3"},
                 tmp.path());
  const std::string ready = writer.line();
  ASSERT_EQ(ready, "ready 1\n") << "pid 1 of its own namespace";
  const std::vector<pid_t> inner = children_of(writer.pid());
  ASSERT_EQ(inner.size(), 1u);
  const pid_t host_pid = inner[0];

  auto registry = std::make_shared<SharedRegistry>(tmp.path());
  testing::ServerSampler memory(testing::SamplerConfig{}, registry, kQuiet);
  const std::shared_ptr<ServerWatcher> watcher = memory.watcher;
  CpuCollector cpu(watcher, kQuiet);
  for (int i = 0; i < 3; ++i) {
    memory.sample();
    cpu.sample();
  }
  std::optional<Server> s = find(memory.servers(), "policy_model");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->root_pid, host_pid) << "up, with its pid on the host";
  EXPECT_EQ(s->processes, 1u);
  const uint64_t summed = smaps_rss({host_pid});
  EXPECT_GT(summed, uint64_t(40) << 20);
  EXPECT_NEAR(double(s->rss), double(summed), double(summed) * 0.01);
  const auto cpus = cpu.servers();
  ASSERT_EQ(cpus.size(), 1u);
  // Its CPU as the kernel counts it (ticks; it is idle now).
  std::string text;
  ASSERT_EQ(procfs::read_file("/proc/" + std::to_string(host_pid) + "/stat", text),
            procfs::ReadStatus::kOk);
  const auto st = procfs::parse_stat(text);
  ASSERT_TRUE(st.has_value());
  // (0.3 s spun; the kernel's ticks on a loaded VM read as little as 9.)
  EXPECT_GE(st->utime_ticks + st->stime_ticks, 3u) << "it used CPU";
  EXPECT_NEAR(double(cpus[0].user_ticks + cpus[0].system_ticks),
              double(st->utime_ticks + st->stime_ticks), 1.0)
      << "the CPU it used";
  EXPECT_EQ(watcher->namespace_scans(), 1u)
      << "one scan of /proc for the new writer, not one a sample";
}

// A sandbox that unshares the pid namespace but keeps the host's /proc
// (unshare --pid without --mount-proc): the writer is pid 1 of its
// namespace, and /proc/1 is the host's init, not it. Its segment still
// carries its own start time (from /proc/self), so the exporter finds it.
TEST(Attribution, AWriterInAPidNamespaceWithTheHostsProcIsFoundOnTheHost) {
  if (!unshare_works()) GTEST_SKIP() << "unshare --pid --fork does not work here";
  testing::TempDir tmp;
  Program writer(
      {"unshare", "--pid", "--fork", GYM_DECLARE_BIN, "sandboxed", "resources_server", "8", "0"},
      tmp.path());
  ASSERT_EQ(writer.line(), "ready 1\n") << "pid 1 of its own namespace";
  const std::vector<pid_t> inner = children_of(writer.pid());
  ASSERT_EQ(inner.size(), 1u);

  auto registry = std::make_shared<SharedRegistry>(tmp.path());
  testing::ServerSampler memory(testing::SamplerConfig{}, registry, kQuiet);
  const std::shared_ptr<ServerWatcher> watcher = memory.watcher;
  memory.sample();
  std::optional<Server> s = find(memory.servers(), "sandboxed");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->root_pid, inner[0]) << "up, with its pid on the host";
  EXPECT_EQ(s->processes, 1u);
  EXPECT_EQ(watcher->namespace_scans(), 1u);
}

TEST(Attribution, AServerInANamespaceTheExporterCannotSeeIsAbsentAndCounted) {
  if (!unshare_works()) GTEST_SKIP() << "unshare --pid --fork --mount-proc does not work here";
  testing::TempDir tmp;
  // The exporter's view is a container's: the proc root of a pid namespace
  // of its own (that of `box`), which cannot see the host's processes.
  Program box({"unshare", "--pid", "--fork", "--mount-proc", GYM_DECLARE_BIN, "boxed_agent",
               "agent_server", "1", "0"},
              tmp.path());
  ASSERT_EQ(box.line(), "ready 1\n");
  const std::string box_proc =
      "/proc/" + std::to_string(children_of(box.pid()).at(0)) + "/root/proc";
  // A server on the host, declared from the host's namespace.
  Program host({GYM_DECLARE_BIN, "host_model", "model_server", "1", "0"}, tmp.path());
  ASSERT_EQ(host.line().rfind("ready ", 0), 0u);

  testing::SamplerConfig c;
  c.proc_root = box_proc;
  std::vector<std::string> logged;
  auto registry = std::make_shared<SharedRegistry>(tmp.path());
  testing::ServerSampler sampler(c, registry, [&](const std::string& l) { logged.push_back(l); });
  sampler.sample();
  sampler.sample();
  const auto servers = sampler.servers();
  std::optional<Server> boxed = find(servers, "boxed_agent");
  ASSERT_TRUE(boxed.has_value()) << "its own namespace's writer is seen";
  EXPECT_EQ(boxed->root_pid, 1);
  EXPECT_FALSE(find(servers, "host_model").has_value()) << "absent, never up 0 with zeros";
  std::map<std::string, double> got;
  sampler.collect([&](const prometheus::MetricFamily& f) {
    for (const auto& m : f.metric) {
      std::string server;
      for (const auto& l : m.label)
        if (l.name == "nemo_gym_server_name") server = l.value;
      if (server == "host_model") got[f.name] = 1;
      if (f.name == "gym_exporter_unseen_server_processes") got[f.name] = m.gauge.value;
    }
  });
  EXPECT_EQ(got.size(), 1u) << "no series of host_model";
  EXPECT_EQ(got["gym_exporter_unseen_server_processes"], 1);
  EXPECT_EQ(std::count_if(logged.begin(), logged.end(),
                          [](const std::string& l) {
                            return l.find("hostPID") != std::string::npos &&
                                   l.find("host_model") != std::string::npos;
                          }),
            1)
      << "one clear line, naming the setting";
}

}  // namespace
}  // namespace gym::exporter

namespace gym::exporter {
namespace {

using testing::children_of;
using testing::Program;
using testing::unshare_works;

// gym-stat and the exporter's JSON view (snapshot/view.h) show a server as
// the exporter counts it: one row a name, the union of its declarers' trees,
// a declarer of another pid namespace at its host pid.
TEST(Attribution, TheRegistryViewHasOneRowAServerWithTheUnionOfItsDeclarers) {
  testing::TempDir tmp;
  Program first({GYM_DECLARE_BIN, "policy_model", "model_server", "8", "0"}, tmp.path());
  Program second({GYM_DECLARE_BIN, "policy_model", "model_server", "40", "0"}, tmp.path());
  ASSERT_EQ(first.line(), "ready " + std::to_string(first.pid()) + "\n");
  ASSERT_EQ(second.line(), "ready " + std::to_string(second.pid()) + "\n");
  std::optional<Program> contained;
  pid_t contained_pid = 0;
  if (unshare_works()) {
    contained.emplace(
        std::vector<std::string>{"unshare", "--pid", "--fork", "--mount-proc", GYM_DECLARE_BIN,
                                 "sandboxed", "resources_server", "8", "0"},
        tmp.path());
    ASSERT_EQ(contained->line(), "ready 1\n");
    const std::vector<pid_t> inner = children_of(contained->pid());
    ASSERT_EQ(inner.size(), 1u);
    contained_pid = inner[0];
  }
  ReaderOptions read_only;
  read_only.mode = ReaderOptions::Mode::kReadOnly;
  // As gym-stat and the exporter make the view: the servers unit's and the
  // memory collector's samples, on the board.
  auto registry = std::make_shared<SharedRegistry>(tmp.path(), read_only);
  auto board = std::make_shared<ServerBoard>();
  const std::shared_ptr<ServerWatcher> watcher = make_watcher(ServersConfig{}, registry);
  ServersCollector servers(watcher, kQuiet, board);
  MemoryCollector memory(MemoryConfig{}, watcher, kQuiet, board);
  servers.refresh();
  memory.refresh();
  const View v = registry->with(
      [&](RegistryReader& r) { return make_view(r.snapshot(), tmp.path(), board->read()); });
  std::map<std::string, ServerView> rows;
  for (const ServerView& s : v.servers) EXPECT_TRUE(rows.emplace(s.server_name, s).second);
  ASSERT_EQ(rows.size(), contained ? 2u : 1u);
  const ServerView& model = rows.at("policy_model");
  EXPECT_EQ(model.pid, first.pid()) << "the oldest declarer";
  EXPECT_EQ(model.processes, 2u);
  ASSERT_TRUE(model.rss_bytes.has_value());
  const uint64_t summed = smaps_rss({first.pid(), second.pid()});
  EXPECT_GT(summed, uint64_t(40) << 20);
  EXPECT_NEAR(double(*model.rss_bytes), double(summed), double(summed) * 0.01);
  if (contained) {
    const ServerView& box = rows.at("sandboxed");
    EXPECT_EQ(box.pid, contained_pid) << "its pid on the host";
    EXPECT_EQ(box.processes, 1u);
    EXPECT_TRUE(box.rss_bytes.has_value());
  }
}

}  // namespace
}  // namespace gym::exporter
