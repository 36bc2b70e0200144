// Registry updates versus prometheus-cpp's, and one reader snapshot of many
// segments. Run with bench/ratios.py to get each case as a ratio against its
// baseline measured in the same run.
#include <benchmark/benchmark.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <sys/resource.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gym/registry_reader.h"
#include "gym/segment_writer.h"
#include "scratch_dir.h"

namespace {

// The contract's operation buckets, in nanoseconds and in seconds.
const int64_t kBoundsNs[] = {1000000,     5000000,      10000000,     50000000,    100000000,
                             500000000,   1000000000,   5000000000,   10000000000, 30000000000,
                             60000000000, 300000000000, 1800000000000};
const prometheus::Histogram::BucketBoundaries kBoundsSeconds = {
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800};

// Durations spread log-uniformly from 0.1 ms to 100 s, as operations are.
struct Durations {
  int64_t ns[1024];
  double seconds[1024];
  Durations() {
    for (int i = 0; i < 1024; ++i) {
      double s = 1e-4 * std::pow(1e6, ((i * 389) % 1024) / 1024.0);
      ns[i] = static_cast<int64_t>(s * 1e9);
      seconds[i] = s;
    }
  }
};
const Durations kDurations;

std::string bench_dir(const char* name) {
  return gym::bench::scratch_dir(std::string("gym-bench-") + name);
}

gym::SegmentWriter& writer() {
  static auto* w = new gym::SegmentWriter(bench_dir("updates"));
  return *w;
}

struct Prom {
  prometheus::Registry registry;
  prometheus::Counter* counter;
  prometheus::Gauge* gauge;
  prometheus::Histogram* histogram;
  Prom() {
    counter = &prometheus::BuildCounter().Name("c_total").Register(registry).Add({});
    gauge = &prometheus::BuildGauge().Name("g").Register(registry).Add({});
    histogram =
        &prometheus::BuildHistogram().Name("h_seconds").Register(registry).Add({}, kBoundsSeconds);
  }
};
Prom& prom() {
  static auto* p = new Prom;
  return *p;
}

void counter_add_registry(benchmark::State& state) {
  static gym::Counter c = writer().counter("c_total", {});
  for (auto _ : state) c.add();
}
void counter_add_prometheus_cpp(benchmark::State& state) {
  prometheus::Counter& c = *prom().counter;
  for (auto _ : state) c.Increment();
}
void gauge_add_registry(benchmark::State& state) {
  static gym::Gauge* g = new gym::Gauge(writer().gauge("g", {}));
  for (auto _ : state) g->add(1);
}
void gauge_add_prometheus_cpp(benchmark::State& state) {
  prometheus::Gauge& g = *prom().gauge;
  for (auto _ : state) g.Increment();
}
void histogram_observe_registry(benchmark::State& state) {
  static gym::Histogram h = writer().histogram("h_seconds", {}, kBoundsNs, 1e9);
  unsigned i = 0;
  for (auto _ : state) h.observe(kDurations.ns[i++ & 1023]);
}
// The same with native buckets too (what the operation histograms count).
void histogram_observe_native(benchmark::State& state) {
  static gym::Histogram h = writer().histogram("hn_seconds", {}, kBoundsNs, 1e9, /*native=*/true);
  unsigned i = 0;
  for (auto _ : state) h.observe(kDurations.ns[i++ & 1023]);
}
void histogram_observe_prometheus_cpp(benchmark::State& state) {
  prometheus::Histogram& h = *prom().histogram;
  unsigned i = 0;
  for (auto _ : state) h.Observe(kDurations.seconds[i++ & 1023]);
}

BENCHMARK(counter_add_registry)->Threads(1)->Threads(2);
BENCHMARK(counter_add_prometheus_cpp)->Threads(1)->Threads(2);
BENCHMARK(gauge_add_registry)->Threads(1)->Threads(2);
BENCHMARK(gauge_add_prometheus_cpp)->Threads(1)->Threads(2);
BENCHMARK(histogram_observe_registry)->Threads(1)->Threads(2);
BENCHMARK(histogram_observe_native)->Threads(1)->Threads(2);
BENCHMARK(histogram_observe_prometheus_cpp)->Threads(1)->Threads(2);

// One snapshot of `segments` live segments of 20 series each (10 counters,
// 6 gauges, 4 histograms), all owned by writers in this process.
void reader_snapshot(benchmark::State& state) {
  const int segments = static_cast<int>(state.range(0));
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  const std::string dir = bench_dir("reader");
  std::vector<std::unique_ptr<gym::SegmentWriter>> writers;
  std::vector<gym::Gauge> gauges;
  for (int s = 0; s < segments; ++s) {
    auto w = std::make_unique<gym::SegmentWriter>(dir);
    for (int i = 0; i < 10; ++i) {
      std::string v = "l" + std::to_string(i);
      gym::Label l[] = {{"component", "agent_server"}, {"limit_name", v}};
      w->counter("gym_concurrency_admission_cancelled_total", l).add(uint64_t(s + i));
    }
    for (int i = 0; i < 6; ++i) {
      std::string v = "l" + std::to_string(i);
      gym::Label l[] = {{"component", "agent_server"}, {"limit_name", v}};
      gauges.push_back(w->gauge("gym_concurrency_active", l));
      gauges.back().set(i);
    }
    for (int i = 0; i < 4; ++i) {
      std::string v = "e" + std::to_string(i);
      gym::Label l[] = {{"operation", "verify"}, {"executor", v}};
      w->histogram("gym_resources_operation_duration_seconds", l, kBoundsNs, 1e9).observe(s);
    }
    writers.push_back(std::move(w));
  }
  gym::RegistryReader reader(dir);
  reader.snapshot();  // the first snapshot maps and parses everything
  for (auto _ : state) {
    const gym::Snapshot& snap = reader.snapshot();
    benchmark::DoNotOptimize(snap.series.data());
    if (snap.stats.live_segments != uint64_t(segments)) state.SkipWithError("segments missing");
  }
  state.counters["series"] = double(reader.snapshot().series.size());
  gauges.clear();
  writers.clear();
  std::filesystem::remove_all(dir);
}
BENCHMARK(reader_snapshot)->Arg(1000)->Unit(benchmark::kMillisecond);

// A resources server's series as gym-demo's make them: 20 operations, each
// with two native duration histograms, five counters and two gauges (180).
void resources_series(gym::SegmentWriter& w, std::vector<gym::Gauge>& gauges) {
  for (int i = 0; i < 20; ++i) {
    const std::string op = "op" + std::to_string(i);
    gym::Label l[] = {{"operation", op}, {"executor", "subprocess"}};
    w.histogram("gym_resources_operation_duration_seconds", l, kBoundsNs, 1e9, true).observe(i);
    w.histogram("gym_resources_operation_queue_duration_seconds", l, kBoundsNs, 1e9, true)
        .observe(i);
    for (int c = 0; c < 5; ++c) {
      gym::Label lc[] = {{"operation", op}, {"outcome", "o" + std::to_string(c)}};
      w.counter("gym_resources_operations_total", lc).add(1);
    }
    gauges.push_back(w.gauge("gym_resources_operation_active", l));
    gauges.push_back(w.gauge("gym_resources_operation_queued", l));
  }
}

// What a writer pays to fold `dead` exited segments of 180 series beside six
// live ones (RegistryReader::fold_exited: a writer's path when no exporter
// runs, at most once a second host-wide).
void fold_exited(benchmark::State& state) {
  const auto dead = uint64_t(state.range(0));
  const std::string dir = bench_dir("fold");
  std::vector<std::unique_ptr<gym::SegmentWriter>> live;
  std::vector<gym::Gauge> gauges;
  for (int s = 0; s < 6; ++s) {
    live.push_back(std::make_unique<gym::SegmentWriter>(dir));
    resources_series(*live.back(), gauges);
  }
  for (auto _ : state) {
    state.PauseTiming();
    for (uint64_t d = 0; d < dead; ++d) {
      gym::SegmentWriter w(dir);  // exits (drops its lock) after its gauges go
      std::vector<gym::Gauge> theirs;
      resources_series(w, theirs);
    }
    state.ResumeTiming();
    if (gym::RegistryReader::fold_exited(dir) != dead) state.SkipWithError("not all folded");
  }
  gauges.clear();
  live.clear();
  std::filesystem::remove_all(dir);
}
BENCHMARK(fold_exited)->Arg(1)->Arg(12)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
