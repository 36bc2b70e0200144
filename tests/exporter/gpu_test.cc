// The gpu collector (collectors/gpu.h) through the real dlopen of a fake
// libnvidia-ml.so.1 (tests/gpu/fake_nvml.cc) that answers from a fixture
// this test writes, with the pids of real processes: GPU memory per server
// and the unattributed remainder add up to each GPU's used memory; no NVML,
// an old driver and every error path leave a clear signal and no wrong
// number; a containerised server is attributed by its host pid.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectors/gpu.h"
#include "contract/families.h"
#include "exporter/process_support.h"
#include "shared_registry.h"
#include "test_support.h"

namespace gym::exporter {
namespace {

using testing::children_of;
using testing::Program;
using testing::unshare_works;

constexpr uint64_t kGiB = uint64_t(1) << 30;

// The fixture the fake library reads at each sample.
class Fixture {
 public:
  explicit Fixture(const std::string& dir) : path_(dir + "/nvml-fixture") {
    ::setenv("FAKE_NVML_FIXTURE", path_.c_str(), 1);
  }
  ~Fixture() { ::unsetenv("FAKE_NVML_FIXTURE"); }
  // Whole, as one rename: the sampling thread may be reading it.
  void write(const std::string& text) {
    std::ofstream(path_ + ".new") << text;
    std::rename((path_ + ".new").c_str(), path_.c_str());
  }

 private:
  std::string path_;
};

struct Logged {
  std::vector<std::string> lines;
  Log log() {
    return [this](const std::string& l) { lines.push_back(l); };
  }
};

// A collector over the registry in `dir`, with its own watcher.
std::unique_ptr<GpuCollector> collector(const std::string& dir, Logged& logged,
                                        const std::string& library = FAKE_NVML,
                                        double interval_seconds = 5) {
  auto registry = std::make_shared<SharedRegistry>(dir);
  auto watcher = make_watcher(ServersConfig{}, registry);
  GpuConfig c;
  c.library = library;
  c.interval_seconds = interval_seconds;
  return std::make_unique<GpuCollector>(c, logged.log(), watcher);
}

std::map<std::string, std::vector<prometheus::ClientMetric>> collected(GpuCollector& c) {
  std::map<std::string, std::vector<prometheus::ClientMetric>> out;
  c.collect([&](const Family& f) {
    EXPECT_EQ(contract_violation(f), "") << f.name;
    out[f.name] = f.metric;
  });
  return out;
}

size_t threads_now() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

std::string label(const prometheus::ClientMetric& m, const std::string& name) {
  for (const auto& l : m.label)
    if (l.name == name) return l.value;
  return "";
}

TEST(GpuCollector, MemoryPerServerAndTheUnattributedRemainderAddUpToEachGpusUsedMemory) {
  testing::TempDir tmp;
  Program model({GYM_DECLARE_BIN, "policy_model", "model_server", "1", "0"}, tmp.path());
  Program actor({GYM_DECLARE_BIN, "policy_model", "model_server", "1", "0"}, tmp.path());
  Program judge({GYM_DECLARE_BIN, "judge", "resources_server", "1", "0"}, tmp.path());
  Program other({"sleep", "60"}, tmp.path());  // on a GPU, of no server
  for (Program* p : {&model, &actor, &judge}) ASSERT_EQ(p->line().substr(0, 6), "ready ");
  Fixture fixture(tmp.path());
  const auto pid = [](const Program& p) { return std::to_string(p.pid()); };
  fixture.write(
      "device GPU-0000 85899345920 32212254720\n"  // 80 GiB, 30 GiB used
      "process " +
      pid(model) +
      " 10737418240\n"  // 10 GiB
      "process " +
      pid(actor) +
      " 5368709120\n"  // 5 GiB
      "process " +
      pid(other) +
      " 3221225472\n"                                 // 3 GiB
      "device GPU-0001 85899345920 8589934592 mig\n"  // 8 GiB used
      "process " +
      pid(judge) +
      " 6442450944\n"  // 6 GiB, both kinds
      "process " +
      pid(judge) + " 6442450944 graphics\n");
  Logged logged;
  auto gpu = collector(tmp.path(), logged);
  gpu->sample();
  EXPECT_TRUE(logged.lines.empty()) << logged.lines.front();
  EXPECT_TRUE(gpu->up());
  std::map<std::pair<std::string, unsigned>, uint64_t> per_server;
  for (const auto& s : gpu->servers()) per_server[{s.name, s.gpu}] = s.bytes;
  EXPECT_EQ(per_server, (std::map<std::pair<std::string, unsigned>, uint64_t>{
                            {{"policy_model", 0}, 15 * kGiB}, {{"judge", 1}, 6 * kGiB}}));
  const std::vector<GpuCollector::Gpu> gpus = gpu->gpus();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].uuid, "GPU-0000");
  EXPECT_FALSE(gpus[0].mig);
  EXPECT_TRUE(gpus[1].mig);
  EXPECT_EQ(gpus[0].unattributed_bytes, 15 * kGiB) << "3 GiB of another process, 12 of nobody's";
  EXPECT_EQ(gpus[1].unattributed_bytes, 2 * kGiB);

  // As served: per GPU, the servers' memory and the remainder add up to used.
  auto families = collected(*gpu);
  std::map<std::string, double> used, sum;
  for (const auto& m : families["gym_gpu_memory_used_bytes"]) used[label(m, "gpu")] = m.gauge.value;
  for (const auto& m : families["gym_gpu_memory_unattributed_bytes"])
    sum[label(m, "gpu")] += m.gauge.value;
  for (const auto& m : families["gym_server_gpu_memory_bytes"])
    sum[label(m, "gpu")] += m.gauge.value;
  EXPECT_EQ(used, (std::map<std::string, double>{{"0", 30.0 * kGiB}, {"1", 8.0 * kGiB}}));
  EXPECT_EQ(sum, used);
  ASSERT_EQ(families["gym_gpu_info"].size(), 2u);
  EXPECT_EQ(label(families["gym_gpu_info"][1], "uuid"), "GPU-0001");
  EXPECT_EQ(label(families["gym_gpu_info"][1], "mig"), "true");
  ASSERT_EQ(families["gym_exporter_gpu_up"].size(), 1u);
  EXPECT_EQ(families["gym_exporter_gpu_up"][0].gauge.value, 1);
  // Every GPU family of the contract table is served here.
  for (const FamilySpec& row : kFamilies) {
    if (row.name.find("gpu") != std::string_view::npos) {
      EXPECT_TRUE(families.contains(std::string(row.name))) << row.name;
    }
  }
  for (const auto& m : families["gym_exporter_gpu_sample_errors_total"])
    EXPECT_EQ(m.counter.value, 0) << label(m, "reason");

  // The actor goes: its memory is gone from the server's.
  actor.stop();
  fixture.write(
      "device GPU-0000 85899345920 27127053312\n"
      "process " +
      pid(model) +
      " 10737418240\n"
      "process " +
      pid(other) + " 3221225472\n");
  gpu->sample();
  ASSERT_EQ(gpu->servers().size(), 1u);
  EXPECT_EQ(gpu->servers()[0].bytes, 10 * kGiB);
  // Its peak stays: both processes' 15 GiB.
  std::map<std::pair<std::string, unsigned>, uint64_t> peaks;
  for (const auto& s : gpu->peaks()) peaks[{s.name, s.gpu}] = s.bytes;
  EXPECT_EQ(peaks, (std::map<std::pair<std::string, unsigned>, uint64_t>{
                       {{"policy_model", 0}, 15 * kGiB}, {{"judge", 1}, 6 * kGiB}}));
}

// Utilization: NVML's per-process samples since the last read, averaged per
// process and summed per server (at most 1); a GPU that does not report it
// has no utilization series; a period with no new sample reads 0.
TEST(GpuCollector, UtilizationIsTheServersMeanShareOfTheSamplesSinceTheLastRead) {
  testing::TempDir tmp;
  Program a({GYM_DECLARE_BIN, "policy_model", "model_server", "1", "0"}, tmp.path());
  Program b({GYM_DECLARE_BIN, "policy_model", "model_server", "1", "0"}, tmp.path());
  ASSERT_EQ(a.line().substr(0, 6), "ready ");
  ASSERT_EQ(b.line().substr(0, 6), "ready ");
  const std::string pa = std::to_string(a.pid()), pb = std::to_string(b.pid());
  Fixture fixture(tmp.path());
  const std::string devices = "device GPU-0 100 50\nprocess " + pa + " 10\nprocess " + pb +
                              " 10\n"
                              "util " +
                              pa + " 40 1000\nutil " + pa + " 60 2000\nutil " + pb +
                              " 30 2000\n"
                              "device GPU-1 100 50\nprocess " +
                              pa +
                              " 10\n"
                              "fail nvmlDeviceGetProcessUtilization 3\n"
                              "device GPU-2 100 50\nprocess " +
                              pa + " 10\nutil " + pa +
                              " 90 1000\n"
                              "util " +
                              pb + " 80 1000\n";
  fixture.write(devices);
  Logged logged;
  auto gpu = collector(tmp.path(), logged);
  gpu->sample();
  std::map<unsigned, std::optional<double>> util;
  for (const auto& s : gpu->servers()) util[s.gpu] = s.utilization;
  // GPU 0: a's mean 0.5, b's 0.3; GPU 1: not reported; GPU 2: only a is
  // on it by its process list (b's sample alone does not put b there), 0.9.
  ASSERT_EQ(util.size(), 3u);
  ASSERT_TRUE(util[0].has_value());
  EXPECT_DOUBLE_EQ(*util[0], 0.8);
  EXPECT_FALSE(util[1].has_value());
  ASSERT_TRUE(util[2].has_value());
  EXPECT_DOUBLE_EQ(*util[2], 0.9);
  auto families = collected(*gpu);
  EXPECT_EQ(families["gym_server_gpu_utilization_ratio"].size(), 2u);
  // Nothing newer since: idle, 0 (the fixture is the same; its samples are
  // older than the last seen).
  gpu->sample();
  for (const auto& s : gpu->servers())
    if (s.gpu != 1) {
      ASSERT_TRUE(s.utilization.has_value()) << s.gpu;
      EXPECT_EQ(*s.utilization, 0.0) << s.gpu;
    }
  // Busy beyond one GPU's time across processes: at most 1.
  fixture.write(devices + "device GPU-3 100 50\nprocess " + pa + " 10\nprocess " + pb +
                " 10\nutil " + pa + " 90 5000\nutil " + pb + " 90 5000\n");
  gpu->sample();
  for (const auto& s : gpu->servers())
    if (s.gpu == 3) {
      ASSERT_TRUE(s.utilization.has_value());
      EXPECT_EQ(*s.utilization, 1.0);
    }
}

// Scrapes while the sampling thread samples every 10 ms (ThreadSanitizer
// runs this): what collect() reads is the sampler's under one lock.
TEST(GpuCollector, ScrapesWhileItSamplesSeeWholeSamples) {
  testing::TempDir tmp;
  Program model({GYM_DECLARE_BIN, "policy_model", "model_server", "1", "0"}, tmp.path());
  ASSERT_EQ(model.line().substr(0, 6), "ready ");
  Fixture fixture(tmp.path());
  fixture.write("device GPU-0 100 50\nprocess " + std::to_string(model.pid()) + " 40\nutil " +
                std::to_string(model.pid()) + " 50 1000\n");
  Logged logged;
  auto gpu = collector(tmp.path(), logged, FAKE_NVML, 0.01);
  const size_t threads = threads_now();
  gpu->start();
  // Its sampling thread (ThreadSanitizer may add its own at the first one).
  EXPECT_GT(threads_now(), threads) << "its sampling thread";
  // The memory grows while it is scraped: peaks change under the scrapes.
  for (int i = 0; i < 200; ++i) {
    fixture.write("device GPU-0 1000 500\nprocess " + std::to_string(model.pid()) + " " +
                  std::to_string(40 + i) + "\n");
    auto families = collected(*gpu);
    if (families.contains("gym_server_gpu_memory_bytes")) {
      ASSERT_EQ(families["gym_server_gpu_memory_bytes"].size(), 1u);
      const double now = families["gym_server_gpu_memory_bytes"][0].gauge.value;
      EXPECT_GE(now, 40);
      EXPECT_LE(now, 40 + i);
      ASSERT_EQ(families["gym_server_gpu_memory_sampled_peak_bytes"].size(), 1u);
      EXPECT_GE(families["gym_server_gpu_memory_sampled_peak_bytes"][0].gauge.value, now);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  gpu->stop();
  EXPECT_EQ(gpu->servers().size(), 1u);
}

TEST(GpuCollector, WithoutNvmlItIsDownAndServesNoGpuSeries) {
  testing::TempDir tmp;
  for (const std::string& library :
       {tmp.path() + "/no-such/libnvidia-ml.so.1", std::string(FAKE_NVML_OLD)}) {
    Logged logged;
    auto gpu = collector(tmp.path(), logged, library);
    gpu->sample();
    gpu->sample();
    if (library == FAKE_NVML_OLD) {
      // A driver's library that cannot serve: a warning, once, at start.
      ASSERT_EQ(logged.lines.size(), 1u);
      EXPECT_NE(logged.lines[0].find("nvmlDeviceGetComputeRunningProcesses_v3"), std::string::npos)
          << logged.lines[0];
    } else {
      // No driver at all (a CPU host): said at info level, no warning.
      EXPECT_TRUE(logged.lines.empty()) << logged.lines.front();
    }
    EXPECT_FALSE(gpu->up());
    // Nothing to sample: no sampling thread either.
    const size_t threads = threads_now();
    gpu->start();
    EXPECT_EQ(threads_now(), threads);
    gpu->stop();
    auto families = collected(*gpu);
    ASSERT_EQ(families["gym_exporter_gpu_up"].size(), 1u);
    EXPECT_EQ(families["gym_exporter_gpu_up"][0].gauge.value, 0);
    for (const auto& [name, metrics] : families)
      EXPECT_TRUE(name.starts_with("gym_exporter_gpu_")) << name << " served without NVML";
  }
}

TEST(GpuCollector, EveryNvmlFailureIsCountedByReasonAndLeavesOnlyWhatIsKnown) {
  testing::TempDir tmp;
  Program model({GYM_DECLARE_BIN, "policy_model", "model_server", "1", "0"}, tmp.path());
  ASSERT_EQ(model.line().substr(0, 6), "ready ");
  const std::string me = std::to_string(model.pid());
  Fixture fixture(tmp.path());
  fixture.write(
      "device GPU-lost 100 10\nfail nvmlDeviceGetMemoryInfo 15\n"
      "device GPU-denied 100 10\nprocess " +
      me +
      " 4\n"
      "fail nvmlDeviceGetComputeRunningProcesses_v3 4\n"
      "device GPU-na 100 10\nprocess " +
      me +
      " na\n"
      "device GPU-race 100 10\nprocess " +
      me +
      " 4\nrace 2\n"
      "device GPU-churn 100 10\nprocess " +
      me + " 4\nrace 10\n");
  Logged logged;
  auto gpu = collector(tmp.path(), logged);
  for (int round = 1; round <= 2; ++round) {
    gpu->sample();
    EXPECT_TRUE(gpu->up());
    std::map<std::string, bool> attributed;
    for (const auto& g : gpu->gpus()) attributed[g.uuid] = g.attributed;
    EXPECT_EQ(
        attributed,
        (std::map<std::string, bool>{
            {"GPU-denied", false}, {"GPU-na", false}, {"GPU-race", true}, {"GPU-churn", false}}))
        << "a lost GPU is absent; one whose processes are unknown is not attributed";
    // Only the GPU read whole attributes its process.
    ASSERT_EQ(gpu->servers().size(), 1u);
    EXPECT_EQ(gpu->servers()[0].gpu, 3u);
    EXPECT_EQ(gpu->servers()[0].bytes, 4u);
    const uint64_t n = uint64_t(round);
    EXPECT_EQ(gpu->errors(), (std::map<std::string, uint64_t>{{"gpu_lost", n},
                                                              {"no_permission", n},
                                                              {"not_available", n},
                                                              {"insufficient_size", n},
                                                              {"error", 0}}));
  }
  EXPECT_EQ(logged.lines.size(), 4u) << "each reason logged once while it repeats";
  auto families = collected(*gpu);
  EXPECT_EQ(families["gym_gpu_memory_used_bytes"].size(), 4u);
  ASSERT_EQ(families["gym_gpu_memory_unattributed_bytes"].size(), 1u);
  EXPECT_EQ(label(families["gym_gpu_memory_unattributed_bytes"][0], "gpu"), "3");

  // NVML fails whole: down, counted.
  fixture.write("fail nvmlDeviceGetCount_v2 999\n");
  gpu->sample();
  EXPECT_FALSE(gpu->up());
  EXPECT_TRUE(gpu->gpus().empty());
  EXPECT_EQ(gpu->errors().at("error"), 1u);
}

TEST(GpuCollector, AServerInItsOwnPidNamespaceIsAttributedByItsHostPid) {
  if (!unshare_works()) GTEST_SKIP() << "unshare --pid --fork --mount-proc does not work here";
  testing::TempDir tmp;
  Program writer({"unshare", "--pid", "--fork", "--mount-proc", GYM_DECLARE_BIN, "policy_model",
                  "model_server", "1", "0"},
                 tmp.path());
  ASSERT_EQ(writer.line(), "ready 1\n");
  const std::vector<pid_t> inner = children_of(writer.pid());
  ASSERT_EQ(inner.size(), 1u);
  Fixture fixture(tmp.path());
  // NVML names processes by their host pids.
  fixture.write("device GPU-0 100 50\nprocess " + std::to_string(inner[0]) + " 40\n");
  Logged logged;
  auto gpu = collector(tmp.path(), logged);
  gpu->sample();
  ASSERT_EQ(gpu->servers().size(), 1u);
  EXPECT_EQ(gpu->servers()[0].name, "policy_model");
  EXPECT_EQ(gpu->servers()[0].bytes, 40u);
  EXPECT_EQ(gpu->gpus().at(0).unattributed_bytes, 10u);
}

}  // namespace
}  // namespace gym::exporter
