// The PSS stall budget: its model and verdicts, and the memory collector
// keeping big real processes' smaps_rollup unread under the defaults.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>

#include "collectors/memory.h"
#include "collectors/pss_budget.h"
#include "gym/segment_writer.h"
#include "gym/server_identity.h"
#include "server_sampler.h"
#include "test_support.h"

namespace gym::exporter {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
#ifdef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kPopulateWrite = 23;  // Linux 5.14's value
#endif

TEST(StallModel, PredictsFromThePriorUntilFourLargeReadsWereMeasured) {
  StallModel m(0.020);
  EXPECT_DOUBLE_EQ(m.predict(2 * kGiB), 0.040);
  m.observe(kMiB, 0.010);  // a small process: its read is mostly fixed cost
  EXPECT_EQ(m.observations(), 0u) << "reads of processes under 64 MiB teach nothing";
  m.observe(kGiB, 0.013);
  EXPECT_DOUBLE_EQ(m.seconds_per_gib(), 0.020) << "a lower measure waits for three more";
  m.observe(kGiB, 0.030);
  EXPECT_DOUBLE_EQ(m.seconds_per_gib(), 0.030) << "a higher one counts at once";
  m.observe(kGiB, 0.013);
  m.observe(kGiB, 0.013);
  EXPECT_DOUBLE_EQ(m.seconds_per_gib(), 0.030) << "the 3rd quartile of 13, 13, 13, 30";
  for (int i = 0; i < 16; ++i) m.observe(512 * kMiB, 0.0065);
  EXPECT_DOUBLE_EQ(m.seconds_per_gib(), 0.013) << "the last 16 reads";
  m.observe(kGiB, -1);
  m.observe(0, 1);
  EXPECT_EQ(m.observations(), 20u) << "nonsense is not learned";
}

TEST(PssVerdict, RefusesOverTheCapDefersWithinTheShareAndObeysAForcedTarget) {
  const PssBudgetConfig c;  // 10 ms, 0.1%
  EXPECT_EQ(pss_verdict(c, 0.011, std::nullopt, false, true), PssVerdict::kRefused);
  EXPECT_EQ(pss_verdict(c, 0.011, std::nullopt, true, false), PssVerdict::kRead);
  EXPECT_EQ(pss_verdict(c, 0.005, std::nullopt, false, true), PssVerdict::kRead)
      << "never read yet";
  EXPECT_EQ(pss_verdict(c, 0.005, 4.9, false, true), PssVerdict::kDeferred) << "5 ms: every 5 s";
  EXPECT_EQ(pss_verdict(c, 0.005, 5.0, false, true), PssVerdict::kRead);
  EXPECT_EQ(pss_verdict(c, 0.0001, 0.1, false, true), PssVerdict::kRead);
  EXPECT_EQ(pss_verdict(c, 0.0001, 0.1, false, false), PssVerdict::kBusy)
      << "the exporter spent this sample's budget";
  EXPECT_EQ(pss_verdict(c, 0.011, std::nullopt, false, false), PssVerdict::kRefused)
      << "a refusal is told as such whatever the budget";
}

// A child with `bytes` of its own memory resident, waiting on `gate`; it
// runs `first` first (declares a server, say). The kernel populates the
// pages (MADV_POPULATE_WRITE, Linux 5.14): a sanitizer's shadow of a memset
// would make the child several times larger (ThreadSanitizer: about 4x).
pid_t spawn_resident(uint64_t bytes, testing::Ready& ready, testing::Gate& gate,
                     const std::function<void()>& first = {}) {
  return testing::spawn([&] {
    if (first) first();
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 2;
    if (::madvise(p, bytes, kPopulateWrite) != 0) std::memset(p, 1, bytes);
    ready.signal();
    gate.wait();
    return 0;
  });
}

testing::SamplerConfig target(pid_t pid) {
  testing::SamplerConfig c;  // the defaults: PSS due at every sample, budget on
  ServerTarget t;
  t.name = "big";
  t.server_type = "model_server";
  t.pid = pid;
  c.targets = {t};
  return c;
}

// How often gym_server_memory_pss_skips_total says `reason` for the server.
double skips(testing::ServerSampler& sampler, const std::string& reason) {
  double n = -1;
  sampler.collect([&](const prometheus::MetricFamily& f) {
    if (f.name != "gym_server_memory_pss_skips_total") return;
    for (const auto& m : f.metric)
      for (const auto& l : m.label)
        if (l.name == "reason" && l.value == reason) n = m.counter.value;
  });
  return n;
}

// What the exporter serves as its stall per GiB.
double per_gib(testing::ServerSampler& sampler) {
  double v = -1;
  sampler.collect([&](const prometheus::MetricFamily& f) {
    if (f.name == "gym_exporter_pss_stall_seconds_per_gib") v = f.metric.at(0).gauge.value;
  });
  return v;
}

TEST(PssBudget, ATwoGiBTargetIsNeverReadUnderTheDefaultsItsRssIsServed) {
  testing::Ready ready;
  testing::Gate gate;
  const pid_t big = spawn_resident(2 * kGiB + 64 * kMiB, ready, gate);
  ready.wait(1);
  testing::ServerSampler sampler(target(big), nullptr, [](const std::string&) {});
  for (int i = 0; i < 3; ++i) sampler.sample();
  const auto s = sampler.servers().at(0);
  EXPECT_EQ(s.pss_reads, 0u) << "its smaps_rollup was never read";
  EXPECT_EQ(s.pss_refused, 3u) << "each due read refused: about 40 ms predicted, over 10 ms";
  EXPECT_EQ(skips(sampler, "stall_cap"), 3);
  EXPECT_FALSE(s.pss.has_value()) << "a number is right or absent";
  EXPECT_FALSE(s.uss.has_value());
  EXPECT_FALSE(s.swap.has_value());
  EXPECT_GE(s.rss, 2 * kGiB);
  ASSERT_TRUE(s.rss_anon.has_value());
  EXPECT_GE(*s.rss_anon, 2 * kGiB) << "the split from status, which takes no memory lock";
  EXPECT_EQ(*s.rss_anon + *s.rss_file + *s.rss_shmem, s.rss);
  gate.open();
  EXPECT_EQ(testing::wait_exit(big), 0);
}

TEST(PssBudget, ADeclaredTwoGiBServerIsNeverReadUnderTheDefaults) {
  testing::TempDir tmp;
  testing::Ready ready;
  testing::Gate gate;
  const pid_t big = spawn_resident(2 * kGiB + 64 * kMiB, ready, gate, [&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    declare_server("policy_model", "model_server");
  });
  ready.wait(1);
  auto registry = std::make_shared<SharedRegistry>(tmp.path());
  testing::ServerSampler sampler(testing::SamplerConfig{}, registry, [](const std::string&) {});
  sampler.sample();
  sampler.sample();
  ASSERT_EQ(sampler.servers().size(), 1u);
  const auto s = sampler.servers().at(0);
  EXPECT_EQ(s.name, "policy_model");
  EXPECT_EQ(s.pss_reads, 0u) << "a declared server's PSS is within the budget too";
  EXPECT_EQ(s.pss_refused, 2u);
  EXPECT_FALSE(s.pss.has_value());
  EXPECT_GE(s.rss, 2 * kGiB);
  gate.open();
  EXPECT_EQ(testing::wait_exit(big), 0);
}

TEST(PssBudget, A300MiBTargetIsReadThenDeferredForItsShareOfWallTime) {
  testing::Ready ready;
  testing::Gate gate;
  const pid_t mid = spawn_resident(300 * kMiB, ready, gate);
  ready.wait(1);
  testing::ServerSampler sampler(target(mid), nullptr, [](const std::string&) {});
  sampler.sample();
  auto s = sampler.servers().at(0);
  EXPECT_EQ(s.pss_reads, 1u) << "about 6 ms predicted: within the 10 ms cap";
  ASSERT_TRUE(s.pss.has_value());
  EXPECT_GE(*s.pss, 300 * kMiB);
  // Read again at once, it would stop the process for more than 0.1% of
  // the time since: the last values stand (the tree is the same). (Or, on
  // a host so loaded that the first read took over 33 ms a GiB, the cost it
  // taught puts the process over the cap: refused, its PSS absent.)
  sampler.sample();
  s = sampler.servers().at(0);
  EXPECT_EQ(s.pss_reads, 1u) << "not read again so soon";
  EXPECT_EQ(s.pss_deferred + s.pss_refused, 1u);
  EXPECT_EQ(skips(sampler, "stall_budget"), double(s.pss_deferred));
  if (s.pss_deferred == 1)
    EXPECT_TRUE(s.pss.has_value()) << "the last read stands while the tree is the same";
  else
    EXPECT_GT(per_gib(sampler), 0.033) << "what the first read taught";
  gate.open();
  EXPECT_EQ(testing::wait_exit(mid), 0);
}

TEST(PssBudget, AForcedTargetIsReadAtEveryDueSampleAndAForbiddenOneNever) {
  testing::Ready ready;
  testing::Gate gate;
  const pid_t big = spawn_resident(2 * kGiB + 64 * kMiB, ready, gate);
  ready.wait(1);
  testing::SamplerConfig c = target(big);
  c.targets[0].pss = true;
  ServerTarget never = c.targets[0];
  never.name = "never";
  never.pss = false;
  c.targets.push_back(never);
  testing::ServerSampler sampler(c, nullptr, [](const std::string&) {});
  sampler.sample();
  sampler.sample();
  const auto forced = sampler.servers().at(0);
  EXPECT_EQ(forced.pss_reads, 2u) << "pss: true reads whatever it stalls";
  ASSERT_TRUE(forced.pss.has_value());
  const auto off = sampler.servers().at(1);
  EXPECT_FALSE(off.pss_wanted);
  EXPECT_EQ(off.pss_reads + off.pss_refused + off.pss_deferred, 0u);
  EXPECT_FALSE(off.pss.has_value());
  EXPECT_EQ(skips(sampler, "stall_cap"), 0) << "only the forced target has skip series";
  gate.open();
  EXPECT_EQ(testing::wait_exit(big), 0);
}

TEST(PssBudget, TheExportersReadingBudgetGoesToTheTreesReadLongestAgo) {
  testing::Ready ready;
  testing::Gate gate;
  std::vector<pid_t> small;
  testing::SamplerConfig c;
  c.budget.max_stall_fraction = 0;    // no per-process pacing: the order alone
  c.budget.max_cpu_fraction = 1e-12;  // room for one read a sample
  for (const char* name : {"a", "b", "c"}) {
    small.push_back(spawn_resident(8 * kMiB, ready, gate));
    ServerTarget t;
    t.name = name;
    t.server_type = "resources_server";
    t.pid = small.back();
    c.targets.push_back(t);
  }
  ready.wait(3);
  testing::ServerSampler sampler(c, nullptr, [](const std::string&) {});
  std::vector<uint64_t> reads_after_each;
  for (int i = 0; i < 3; ++i) {
    sampler.sample();
    uint64_t reads = 0;
    for (const auto& s : sampler.servers()) reads += s.pss_reads;
    reads_after_each.push_back(reads);
  }
  EXPECT_EQ(reads_after_each, (std::vector<uint64_t>{1, 2, 3})) << "one read a sample";
  for (const auto& s : sampler.servers()) {
    EXPECT_EQ(s.pss_reads, 1u) << s.name << ": each tree in turn, none twice";
    EXPECT_EQ(s.pss_busy, 2u) << s.name;
  }
  EXPECT_EQ(skips(sampler, "exporter_budget"), 2) << "the last server's count";
  gate.open();
  for (pid_t p : small) EXPECT_EQ(testing::wait_exit(p), 0);
}

}  // namespace
}  // namespace gym::exporter
