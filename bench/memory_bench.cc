// Sampling a 200-process tree: the sampler with PSS and RSS-only, against the
// floor, reading the same procfs files once with bare open/read/close (the
// members' statm, task directory, children and smaps_rollup), and against
// the floor of a scan (every process's stat). bench/memory_compare.py adds
// psutil and the exporter's CPU.
//
// The server watcher with 200 writers that each declare a server from their
// own pid namespace (containers), against 200 in the exporter's namespace:
// a foreign writer's host pid is found by one scan of /proc when it first
// shows, then kept, so a resolution costs the same for both (the counter
// namespace_scans says how many scans all iterations made).
//
// The cgroup collector's sample of a server with 200 verifiers, each in a
// sandbox cgroup of its own (memory, cpu and pressure files in a fixture v2
// tree in the kernel's formats), against the same server with all 201
// processes in its own one cgroup (what the collector read before it read
// every cgroup of a server: the root's memory).
//
//   memory_bench [benchmark flags]
//   memory_bench --hold-tree=N   (keeps a tree of N processes until killed)
#include <benchmark/benchmark.h>
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fstream>

#include "collectors/cgroups.h"
#include "collectors/gpu.h"
#include "collectors/memory.h"
#include "gym_metrics.h"
#include "scratch_dir.h"
#include "servers/watcher.h"
#include "shared_registry.h"

namespace {

constexpr int kTree = 200;

// A root and its children, `n` processes in all, sleeping until killed.
pid_t start_tree(int n) {
  int ready[2];
  if (::pipe(ready) != 0) std::abort();
  pid_t root = ::fork();
  if (root == 0) {
    ::close(ready[0]);
    // Its own process group (killed whole), and no inherited output pipes.
    ::setpgid(0, 0);
    int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    for (int i = 1; i < n; ++i) {
      if (::fork() == 0) {
        ::pause();
        ::_exit(0);
      }
    }
    char c = 'r';
    if (::write(ready[1], &c, 1) != 1) ::_exit(1);
    ::close(ready[1]);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char c;
  if (::read(ready[0], &c, 1) != 1) std::abort();
  ::close(ready[0]);
  return root;
}

pid_t tree_root() {
  static pid_t root = start_tree(kTree);
  return root;
}

void sample(benchmark::State& state, bool pss) {
  gym::exporter::ServersConfig c;
  gym::exporter::ServerTarget t;
  t.name = "tree";
  t.server_type = "resources_server";
  t.pid = tree_root();
  t.pss = pss;
  c.targets = {t};
  // PSS, when on, at every sample; a resolution of the servers at each.
  gym::exporter::MemoryCollector sampler(gym::exporter::MemoryConfig{5, 0, {}},
                                         gym::exporter::make_watcher(c), [](const std::string&) {});
  for (auto _ : state) sampler.sample();
  state.counters["processes"] = double(sampler.servers().at(0).processes);
}
void sample_pss_gym(benchmark::State& state) {
  sample(state, true);
}
void sample_rss_gym(benchmark::State& state) {
  sample(state, false);
}

size_t read_whole(const char* path, char* buf, size_t cap) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t got = 0;
  ssize_t n;
  while ((n = ::read(fd, buf, cap)) > 0) got += size_t(n);
  ::close(fd);
  return got;
}

// What a sample reads, each file opened and read once: each member's statm,
// task directory (stat(2)) and children, and its smaps_rollup when `pss`.
void floor(benchmark::State& state, bool pss) {
  const pid_t root = tree_root();
  std::vector<std::string> members;
  {
    gym::exporter::procfs::ProcessTable table("/proc");
    table.scan();
    for (const auto* p : table.tree(*table.find(root)))
      members.push_back("/proc/" + std::to_string(p->pid));
  }
  char buf[4096];
  std::string path;
  for (auto _ : state) {
    for (const std::string& dir : members) {
      path = dir + "/statm";
      benchmark::DoNotOptimize(read_whole(path.c_str(), buf, sizeof buf));
      struct stat st {};
      path = dir + "/task";
      benchmark::DoNotOptimize(::stat(path.c_str(), &st));
      path = dir + "/task/" + dir.substr(6) + "/children";
      benchmark::DoNotOptimize(read_whole(path.c_str(), buf, sizeof buf));
      if (pss) {
        path = dir + "/smaps_rollup";
        benchmark::DoNotOptimize(read_whole(path.c_str(), buf, sizeof buf));
      }
    }
  }
  state.counters["processes"] = double(members.size());
}
void sample_pss_floor(benchmark::State& state) {
  floor(state, true);
}
void sample_rss_floor(benchmark::State& state) {
  floor(state, false);
}

// Every /proc/<pid>/stat of the host, opened and read once: the floor of a
// sampler that scans the host for the tree (as psutil and process-exporter
// do, and gym-exporter when a `match` target needs it).
void sample_rss_scan_floor(benchmark::State& state) {
  tree_root();
  char buf[4096];
  char path[300];
  size_t n = 0;
  for (auto _ : state) {
    n = 0;
    DIR* d = ::opendir("/proc");
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      std::snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
      benchmark::DoNotOptimize(read_whole(path, buf, sizeof buf));
      ++n;
    }
    ::closedir(d);
  }
  state.counters["processes"] = double(n);
}

constexpr int kWriters = 200;

// `n` writers that each declare server srv-<i> into `dir` and sleep; each in
// a pid namespace of its own (pid 1 there) when `foreign`. They die with
// this program (PR_SET_PDEATHSIG, down the chain).
std::vector<pid_t> start_writers(const std::string& dir, int n, bool foreign) {
  std::vector<pid_t> out;
  for (int i = 0; i < n; ++i) {
    int ready[2];
    if (::pipe(ready) != 0) std::abort();
    pid_t child = ::fork();
    if (child == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(ready[0]);
      auto declare = [&] {
        ::setenv("GYM_METRICS_DIR", dir.c_str(), 1);
        const std::string name = "srv-" + std::to_string(i);
        char c = gym_declare_server(name.c_str(), "resources_server") == 0 ? 'r' : 'x';
        if (::write(ready[1], &c, 1) != 1) ::_exit(1);
        ::close(ready[1]);
        for (;;) ::pause();
      };
      if (!foreign) declare();
      if (::unshare(CLONE_NEWPID) != 0) {
        char c = 'x';
        if (::write(ready[1], &c, 1) != 1) ::_exit(1);
        ::_exit(1);
      }
      if (::fork() == 0) {  // pid 1 of the new namespace
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        declare();
      }
      ::close(ready[1]);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char c = 0;
    if (::read(ready[0], &c, 1) != 1 || c != 'r') std::abort();
    ::close(ready[0]);
    out.push_back(child);
  }
  return out;
}

void stop_writers(const std::vector<pid_t>& writers) {
  for (pid_t p : writers) ::kill(p, SIGKILL);
  for (pid_t p : writers) ::waitpid(p, nullptr, 0);
}

// One resolution of the watcher per iteration (a new view each time).
void watch(benchmark::State& state, bool foreign) {
  const std::string dir = gym::bench::scratch_dir(foreign ? "gym-bench-foreign" : "gym-bench-own");
  const std::vector<pid_t> writers = start_writers(dir, kWriters, foreign);
  {
    auto registry = std::make_shared<gym::exporter::SharedRegistry>(dir);
    gym::exporter::ServerWatcher watcher(gym::exporter::ServersConfig{}, registry);
    std::shared_ptr<const gym::exporter::ServersView> view;
    for (auto _ : state) view = watcher.view(std::chrono::seconds(0), view);
    size_t up = 0;
    for (const auto& t : view->trees) up += t.root != nullptr;
    state.counters["servers_up"] = double(up);
    state.counters["namespace_scans"] = double(watcher.namespace_scans());
  }
  stop_writers(writers);
}
void watcher_200_foreign_writers(benchmark::State& state) {
  watch(state, true);
}
void watcher_200_own_writers(benchmark::State& state) {
  watch(state, false);
}

#ifdef GYM_FAKE_NVML
// A GPU sample with 8 GPUs and 200 GPU processes (the 200-process tree, a
// configured server, 25 on each GPU), through the fake NVML of the tests
// (tests/gpu/fake_nvml.cc, which parses its fixture at each sample: more
// than the driver's own work). The watcher's resolution is the memory
// collector's, shared, and outside the timing. Against the floor of what
// the alternatives do each sample, forking nvidia-smi: a fork and exec of
// /bin/true (nvidia-smi itself then initializes NVML), in real time.
void gpu_sample_8_gpus_200_processes(benchmark::State& state) {
  const pid_t root = tree_root();
  std::vector<pid_t> pids;
  {
    gym::exporter::procfs::ProcessTable table("/proc");
    table.scan();
    for (const auto* p : table.tree(*table.find(root))) pids.push_back(p->pid);
  }
  const std::string dir = gym::bench::scratch_dir("gym-bench-gpu");
  std::filesystem::create_directories(dir);
  const std::string fixture = dir + "/fixture";
  {
    std::FILE* f = std::fopen(fixture.c_str(), "w");
    for (int g = 0; g < 8; ++g) {
      std::fprintf(f, "device GPU-%04d 85899345920 42949672960\n", g);
      for (size_t i = size_t(g); i < pids.size(); i += 8)
        std::fprintf(f, "process %d 1073741824\n", pids[i]);
    }
    std::fclose(f);
  }
  ::setenv("FAKE_NVML_FIXTURE", fixture.c_str(), 1);
  gym::exporter::ServerTarget t;
  t.name = "tree";
  t.server_type = "model_server";
  t.pid = root;
  gym::exporter::ServersConfig wc;
  wc.targets = {t};
  auto watcher = gym::exporter::make_watcher(wc);
  gym::exporter::GpuConfig gc;
  gc.library = GYM_FAKE_NVML;
  gym::exporter::GpuCollector gpu(
      gc, [](const std::string&) {}, watcher);
  std::shared_ptr<const gym::exporter::ServersView> memory_view;
  for (auto _ : state) {
    state.PauseTiming();
    memory_view = watcher->view(std::chrono::seconds(0), memory_view);  // the memory collector's
    state.ResumeTiming();
    gpu.sample();
  }
  uint64_t bytes = 0;
  for (const auto& s : gpu.servers()) bytes += s.bytes;
  state.counters["gpus"] = double(gpu.gpus().size());
  state.counters["server_gib"] = double(bytes >> 30);
}
BENCHMARK(gpu_sample_8_gpus_200_processes)->Unit(benchmark::kMillisecond);

void gpu_fork_exec_floor(benchmark::State& state) {
  for (auto _ : state) {
    pid_t p = ::fork();
    if (p == 0) {
      ::execl("/bin/true", "true", nullptr);
      ::_exit(127);
    }
    ::waitpid(p, nullptr, 0);
  }
}
BENCHMARK(gpu_fork_exec_floor)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

// A fixture host: a proc root with a server (pid 100) and 200 verifiers,
// each in /sandboxes/<pid> (or all in /gym/server), and a v2 cgroup tree.
struct CgroupHost {
  std::string dir;
  explicit CgroupHost(bool sandboxes) {
    dir = gym::bench::scratch_dir(sandboxes ? "gym-bench-cgroups-200" : "gym-bench-cgroups-1");
    auto put = [](const std::string& path, const std::string& text) {
      std::filesystem::create_directories(std::filesystem::path(path).parent_path());
      std::ofstream(path) << text;
    };
    auto cgroup = [&](const std::string& path) {
      const std::string d = dir + "/cg" + path;
      put(d + "/memory.current", "4194304\n");
      put(d + "/memory.peak", "8388608\n");
      put(d + "/memory.max", "33554432\n");
      put(d + "/memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n");
      for (const char* r : {"memory", "cpu", "io"})
        put(d + "/" + r + ".pressure",
            "some avg10=1.00 avg60=0.50 avg300=0.10 total=125000\n"
            "full avg10=0.50 avg60=0.20 avg300=0.05 total=75000\n");
      put(d + "/cpu.max", "200000 100000\n");
      put(d + "/cpu.stat",
          "usage_usec 9000000\nuser_usec 8000000\nsystem_usec 1000000\n"
          "core_sched.force_idle_usec 0\nnr_periods 400\nnr_throttled 120\n"
          "throttled_usec 3500000\nnr_bursts 0\nburst_usec 0\n");
    };
    auto process = [&](int pid, int ppid, const std::string& path) {
      const std::string p = dir + "/proc/" + std::to_string(pid);
      put(p + "/stat", std::to_string(pid) + " (verifier) S " + std::to_string(ppid) +
                           " 100 100 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 600 1000000 200 "
                           "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n");
      put(p + "/cgroup", "0::" + path + "\n");
    };
    put(dir + "/proc/self/cgroup", "0::/exporter\n");
    cgroup("/gym/server");
    process(100, 1, "/gym/server");
    for (int pid = 101; pid <= 100 + kTree; ++pid) {
      const std::string path = sandboxes ? "/sandboxes/" + std::to_string(pid) : "/gym/server";
      if (sandboxes) cgroup(path);
      process(pid, 100, path);
    }
  }
  // The servers unit of it: the fixture proc root and tree, the server.
  gym::exporter::ServersConfig servers() const {
    gym::exporter::ServersConfig c;
    c.proc_root = dir + "/proc";
    gym::exporter::cgroup::Mounts m;
    m.v2 = dir + "/cg";
    c.mounts = m;
    gym::exporter::ServerTarget t;
    t.name = "sandboxes";
    t.server_type = "resources_server";
    t.pid = 100;
    c.targets = {t};
    return c;
  }
};

void cgroup_sample(benchmark::State& state, bool sandboxes) {
  static CgroupHost one(false), many(true);
  const gym::exporter::ServersConfig c = (sandboxes ? many : one).servers();
  gym::exporter::CgroupCollector cgroups(gym::exporter::make_watcher(c), [](const std::string&) {});
  for (auto _ : state) cgroups.sample();
  state.counters["cgroups"] = double(cgroups.totals().at(0).cgroups.size());
}
void cgroup_sample_one_cgroup(benchmark::State& state) {
  cgroup_sample(state, false);
}
void cgroup_sample_200_sandboxes(benchmark::State& state) {
  cgroup_sample(state, true);
}
// What the cgroup collector's sample was before it read every cgroup of a
// server: the servers' view, the root's own cgroup and its memory files.
void cgroup_sample_root_only_before(benchmark::State& state) {
  static CgroupHost one(false);
  const gym::exporter::ServersConfig c = one.servers();
  auto watcher = gym::exporter::make_watcher(c);
  gym::exporter::cgroup::Resolver resolver(c.proc_root, c.mounts);
  std::shared_ptr<const gym::exporter::ServersView> view;
  size_t read = 0;
  for (auto _ : state) {
    view = watcher->view(std::chrono::duration<double>(0), view);
    for (const auto& s : view->trees)
      if (s.root != nullptr)
        if (auto place = resolver.own(s.root->pid))
          read += gym::exporter::cgroup::read_memory(*place).exists;
  }
  state.counters["cgroups"] = double(read) / double(state.iterations());
}
BENCHMARK(cgroup_sample_root_only_before)->Unit(benchmark::kMillisecond);
BENCHMARK(cgroup_sample_one_cgroup)->Unit(benchmark::kMillisecond);
BENCHMARK(cgroup_sample_200_sandboxes)->Unit(benchmark::kMillisecond);

BENCHMARK(sample_pss_gym)->Unit(benchmark::kMillisecond);
BENCHMARK(sample_pss_floor)->Unit(benchmark::kMillisecond);
BENCHMARK(sample_rss_gym)->Unit(benchmark::kMillisecond);
BENCHMARK(sample_rss_floor)->Unit(benchmark::kMillisecond);
BENCHMARK(sample_rss_scan_floor)->Unit(benchmark::kMillisecond);
BENCHMARK(watcher_200_foreign_writers)->Unit(benchmark::kMillisecond);
BENCHMARK(watcher_200_own_writers)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--hold-tree=", 12) == 0) {
      pid_t root = start_tree(std::atoi(argv[i] + 12));
      std::printf("%d\n", root);
      std::fflush(stdout);
      ::pause();
      return 0;
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (pid_t root = tree_root(); root > 0) {
    ::kill(-root, SIGKILL);
    ::waitpid(root, nullptr, 0);
  }
  return 0;
}
