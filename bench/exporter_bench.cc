// One scrape (the whole exposition text) versus the number of live series,
// against prometheus-cpp's own Registry + TextSerializer holding the same
// series. Each writer segment holds 20 series (10 counters, 6 gauges, 4
// histograms with the contract's buckets), labelled apart per writer.
// bench/scrape_compare.py runs this, Python's prometheus_client in
// multiprocess mode on the same shapes, and the exporter's memory.
//
//   exporter_bench [benchmark flags]
//   exporter_bench --hold-segments=N --dir=DIR [--shared-labels]
//                  [--shape=footprint] (keeps N live segments until killed;
//                                     footprint: the cost guard's shape of
//                                     three limits and twenty operations)
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <semaphore>
#include <sstream>
#include <stop_token>
#include <string>
#include <vector>

#include "collector.h"
#include "exposition/exposition.h"
#include "exposition/protobuf.h"
#include "exposition/text.h"
#include "gym/contract.h"
#include "gym/metered_semaphore.h"
#include "gym/registry_reader.h"
#include "gym/resources_operation.h"
#include "gym/segment_writer.h"
#include "http/compression.h"
#include "http/server.h"
#include "scratch_dir.h"

namespace {

constexpr int kSeriesPerWriter = 20;

void raise_fd_limit() {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
}

// --shared-labels: every writer reports the same label sets (a Gym host whose
// processes share their limits and operations), not its own.
bool g_shared_labels = false;

std::string label_of(int writer, int i) {
  return (g_shared_labels ? "shared" : "w" + std::to_string(writer)) + "_" + std::to_string(i);
}

// Writers of `count` segments in `dir`, with their gauges.
struct Writers {
  std::vector<std::unique_ptr<gym::SegmentWriter>> writers;
  std::vector<gym::Gauge> gauges;
  Writers(const std::string& dir, int count) {
    for (int w = 0; w < count; ++w) {
      auto writer = std::make_unique<gym::SegmentWriter>(dir);
      for (int i = 0; i < 10; ++i) {
        const std::string l = label_of(w, i);
        gym::Label labels[] = {{gym::label::kComponent, "agent_server"},
                               {gym::label::kLimitName, l}};
        writer->counter(gym::family::kAdmissionCancelled, labels).add(uint64_t(w + i));
      }
      for (int i = 0; i < 6; ++i) {
        const std::string l = label_of(w, i);
        gym::Label labels[] = {{gym::label::kComponent, "agent_server"},
                               {gym::label::kLimitName, l}};
        gauges.push_back(writer->gauge(gym::family::kConcurrencyQueueDepth, labels));
        gauges.back().set(i);
      }
      for (int i = 0; i < 4; ++i) {
        const std::string l = label_of(w, i);
        gym::Label labels[] = {{gym::label::kOperation, "verify"},
                               {gym::label::kExecutor, "subprocess"},
                               {gym::label::kServerName, l}};
        // With native buckets, as ResourcesOperation registers it.
        gym::Histogram h = writer->histogram(gym::family::kOperationQueueDuration, labels,
                                             gym::kOperationBoundsNs, 1e9, /*native=*/true);
        h.observe(int64_t(w) * 1000000);
      }
      writers.push_back(std::move(writer));
    }
  }
};

// The cost guard's footprint shape a writer (`--shape=footprint`): three
// limits with admission timeouts, of a server of its own (one wait timed
// out, one cancelled), and twenty resources operations of one kind.
struct FootprintWriters {
  std::vector<std::unique_ptr<gym::SegmentWriter>> writers;
  std::vector<std::unique_ptr<gym::MeteredSemaphore>> limits;
  std::vector<std::unique_ptr<gym::OperationMetrics>> operations;
  FootprintWriters(const std::string& dir, int count) {
    using namespace std::chrono_literals;
    for (int w = 0; w < count; ++w) {
      auto& writer = *writers.emplace_back(std::make_unique<gym::SegmentWriter>(dir));
      const std::string server = "server-" + std::to_string(w);
      auto limit = [&](const char* name, gym::MeteredSemaphore::Duration timeout) {
        return limits
            .emplace_back(std::make_unique<gym::MeteredSemaphore>(1, gym::Component::kAgentServer,
                                                                  name, server, timeout, writer))
            .get();
      };
      gym::MeteredSemaphore* timed = limit("timed", 1ms);
      gym::MeteredSemaphore* cancelled = limit("cancelled", 60s);
      limit("queued", 60s);
      timed->acquire();
      try {
        timed->acquire();
      } catch (const gym::AdmissionTimeout&) {
      }
      timed->release();
      cancelled->acquire();
      std::stop_source stop;
      stop.request_stop();
      try {
        cancelled->acquire(stop.get_token());
      } catch (const gym::AdmissionCancelled&) {
      }
      cancelled->release();
      auto& metrics = *operations.emplace_back(std::make_unique<gym::OperationMetrics>(writer));
      std::counting_semaphore<> free(4);
      for (int i = 0; i < 20; ++i)
        gym::ResourcesOperation op(free, gym::Operation::kVerify, gym::Executor::kSubprocess, {},
                                   metrics);
    }
  }
};

struct GymFixture {
  std::string dir;
  std::unique_ptr<Writers> writers;
  std::unique_ptr<gym::exporter::Exposition> exposition;
  explicit GymFixture(int writer_count) {
    dir = gym::bench::scratch_dir("gym-bench-scrape-" + std::to_string(writer_count));
    writers = std::make_unique<Writers>(dir, writer_count);
    std::vector<std::unique_ptr<gym::exporter::Collector>> collectors;
    const gym::exporter::CollectorContext context{
        std::make_shared<gym::exporter::SharedRegistry>(dir)};
    for (const char* kind : {"registry", "build_info", "process"})
      collectors.push_back(gym::exporter::make_collector(kind, context));
    exposition = std::make_unique<gym::exporter::Exposition>(std::move(collectors));
    exposition->render();  // the first scrape maps and parses every segment
  }
  ~GymFixture() {
    exposition.reset();
    writers.reset();
    std::filesystem::remove_all(dir);
  }
};

struct PromFixture {
  prometheus::Registry registry;
  explicit PromFixture(int writer_count) {
    auto& counters = prometheus::BuildCounter()
                         .Name(std::string(gym::family::kAdmissionCancelled))
                         .Help("Waits cancelled before a slot was free.")
                         .Register(registry);
    auto& gauges = prometheus::BuildGauge()
                       .Name(std::string(gym::family::kConcurrencyQueueDepth))
                       .Help("Callers waiting for a slot of a concurrency limit now.")
                       .Register(registry);
    auto& hists = prometheus::BuildHistogram()
                      .Name(std::string(gym::family::kOperationQueueDuration))
                      .Help("Time resources operations waited for their limit.")
                      .Register(registry);
    const prometheus::Histogram::BucketBoundaries bounds = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1,
                                                            5,     10,    30,   60,   300, 1800};
    for (int w = 0; w < writer_count; ++w) {
      for (int i = 0; i < 10; ++i)
        counters
            .Add({{std::string(gym::label::kComponent), "agent_server"},
                  {std::string(gym::label::kLimitName), label_of(w, i)}})
            .Increment(w + i);
      for (int i = 0; i < 6; ++i)
        gauges
            .Add({{std::string(gym::label::kComponent), "agent_server"},
                  {std::string(gym::label::kLimitName), label_of(w, i)}})
            .Set(i);
      for (int i = 0; i < 4; ++i)
        hists
            .Add({{std::string(gym::label::kOperation), "verify"},
                  {std::string(gym::label::kExecutor), "subprocess"},
                  {std::string(gym::label::kServerName), label_of(w, i)}},
                 bounds)
            .Observe(w * 0.001);
    }
  }
};

// One size alive at a time, kept across the runs Google Benchmark makes.
template <class Fixture>
Fixture& fixture(int writers) {
  static std::unique_ptr<Fixture> current;
  static int size = -1;
  if (size != writers) {
    current.reset();
    current = std::make_unique<Fixture>(writers);
    size = writers;
  }
  return *current;
}

void scrape_gym(benchmark::State& state) {
  raise_fd_limit();
  const int writers = int(state.range(0)) / kSeriesPerWriter;
  GymFixture& f = fixture<GymFixture>(writers);
  size_t bytes = 0;
  for (auto _ : state) bytes = f.exposition->render().size();
  state.counters["bytes"] = double(bytes);
  state.counters["writers"] = writers;
}

void scrape_prometheus_cpp(benchmark::State& state) {
  const int writers = int(state.range(0)) / kSeriesPerWriter;
  PromFixture& f = fixture<PromFixture>(writers);
  size_t bytes = 0;
  for (auto _ : state) {
    std::ostringstream os;
    prometheus::TextSerializer().Serialize(os, f.registry.Collect());
    bytes = os.str().size();
  }
  state.counters["bytes"] = double(bytes);
}

// The heap a coder holds once it has compressed `body` (its state and
// buffers, kept by the pool between scrapes): malloc's bytes in use,
// mmapped blocks included, before and after.
size_t coder_heap(gym::exporter::Coding c, const std::string& body) {
  const auto in_use = [] {
    const struct mallinfo2 m = ::mallinfo2();
    return m.uordblks + m.hblkhd;
  };
  const size_t before = in_use();
  std::unique_ptr<gym::exporter::Coder> coder = c == gym::exporter::Coding::kZstd
                                                    ? gym::exporter::make_zstd_coder()
                                                    : gym::exporter::make_gzip_coder();
  const auto drop = [](std::string_view piece) { benchmark::DoNotOptimize(piece.data()); };
  if (!coder || !coder->add(body, drop) || !coder->finish(drop)) return 0;
  return in_use() - before;
}

// One scrape of 20,000 series in each format the exporter serves, plain,
// gzip and zstd (bench/ratios.py ... --baseline text
// --benchmark_filter=format), with the bytes sent and the heap the coder
// holds.
void format(benchmark::State& state, const gym::exporter::Encoder& encoder,
            gym::exporter::Coding coding) {
  raise_fd_limit();
  GymFixture& f = fixture<GymFixture>(20000 / kSeriesPerWriter);
  size_t bytes = 0;
  for (auto _ : state) {
    std::string body = f.exposition->render(encoder);
    bytes = coding != gym::exporter::Coding::kIdentity
                ? gym::exporter::compress(coding, body).size()
                : body.size();
  }
  state.counters["bytes"] = double(bytes);
  if (coding != gym::exporter::Coding::kIdentity)
    state.counters["coder_heap"] = double(coder_heap(coding, f.exposition->render(encoder)));
}
void format_text(benchmark::State& state) {
  format(state, gym::exporter::TextEncoder(), gym::exporter::Coding::kIdentity);
}
void format_openmetrics(benchmark::State& state) {
  format(state, gym::exporter::OpenMetricsEncoder(), gym::exporter::Coding::kIdentity);
}
void format_textgzip(benchmark::State& state) {
  format(state, gym::exporter::TextEncoder(), gym::exporter::Coding::kGzip);
}
void format_textzstd(benchmark::State& state) {
  format(state, gym::exporter::TextEncoder(), gym::exporter::Coding::kZstd);
}
void format_openmetricsgzip(benchmark::State& state) {
  format(state, gym::exporter::OpenMetricsEncoder(), gym::exporter::Coding::kGzip);
}
void format_openmetricszstd(benchmark::State& state) {
  format(state, gym::exporter::OpenMetricsEncoder(), gym::exporter::Coding::kZstd);
}
void format_protobuf(benchmark::State& state) {
  format(state, gym::exporter::ProtobufEncoder(), gym::exporter::Coding::kIdentity);
}
void format_protobufgzip(benchmark::State& state) {
  format(state, gym::exporter::ProtobufEncoder(), gym::exporter::Coding::kGzip);
}
void format_protobufzstd(benchmark::State& state) {
  format(state, gym::exporter::ProtobufEncoder(), gym::exporter::Coding::kZstd);
}
// Where a plain scrape of those 20,000 series goes: the registry reader's
// snapshot alone, the registry collector (snapshot and its model's values),
// and the whole text exposition rendered in pieces as a scrape is served.
void part_snapshot(benchmark::State& state) {
  raise_fd_limit();
  GymFixture& f = fixture<GymFixture>(20000 / kSeriesPerWriter);
  gym::RegistryReader reader(f.dir);
  reader.snapshot();
  for (auto _ : state) benchmark::DoNotOptimize(reader.snapshot().series.data());
}
void part_collect(benchmark::State& state) {
  raise_fd_limit();
  GymFixture& f = fixture<GymFixture>(20000 / kSeriesPerWriter);
  const gym::exporter::CollectorContext context{
      std::make_shared<gym::exporter::SharedRegistry>(f.dir)};
  auto registry = gym::exporter::make_collector("registry", context);
  size_t families = 0;
  registry->collect([&](const gym::exporter::Family&) { ++families; });
  for (auto _ : state) registry->collect([&](const gym::exporter::Family&) { ++families; });
  benchmark::DoNotOptimize(families);
}
void part_streamed(benchmark::State& state) {
  raise_fd_limit();
  GymFixture& f = fixture<GymFixture>(20000 / kSeriesPerWriter);
  const gym::exporter::TextEncoder text;
  size_t bytes = 0;
  for (auto _ : state)
    bytes = f.exposition->render(
        text, {}, [](std::string_view piece) { benchmark::DoNotOptimize(piece.data()); });
  state.counters["bytes"] = double(bytes);
}
BENCHMARK(part_snapshot)->Unit(benchmark::kMillisecond);
BENCHMARK(part_collect)->Unit(benchmark::kMillisecond);
BENCHMARK(part_streamed)->Unit(benchmark::kMillisecond);
BENCHMARK(format_text)->Unit(benchmark::kMillisecond);
BENCHMARK(format_protobuf)->Unit(benchmark::kMillisecond);
BENCHMARK(format_protobufgzip)->Unit(benchmark::kMillisecond);
BENCHMARK(format_protobufzstd)->Unit(benchmark::kMillisecond);
BENCHMARK(format_openmetrics)->Unit(benchmark::kMillisecond);
BENCHMARK(format_textgzip)->Unit(benchmark::kMillisecond);
BENCHMARK(format_textzstd)->Unit(benchmark::kMillisecond);
BENCHMARK(format_openmetricsgzip)->Unit(benchmark::kMillisecond);
BENCHMARK(format_openmetricszstd)->Unit(benchmark::kMillisecond);

BENCHMARK(scrape_gym)
    ->Arg(100)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(20000)
    ->Arg(100000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(scrape_prometheus_cpp)
    ->Arg(100)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(20000)
    ->Arg(100000)
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  int hold = 0;
  std::string dir, shape;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--hold-segments=", 16) == 0) hold = std::atoi(argv[i] + 16);
    if (std::strncmp(argv[i], "--dir=", 6) == 0) dir = argv[i] + 6;
    if (std::strcmp(argv[i], "--shared-labels") == 0) g_shared_labels = true;
    if (std::strncmp(argv[i], "--shape=", 8) == 0) shape = argv[i] + 8;
  }
  if (hold > 0) {
    raise_fd_limit();
    std::unique_ptr<Writers> writers;
    std::unique_ptr<FootprintWriters> footprint;
    if (shape == "footprint")
      footprint = std::make_unique<FootprintWriters>(dir, hold);
    else
      writers = std::make_unique<Writers>(dir, hold);
    std::printf("ready\n");
    std::fflush(stdout);
    ::pause();
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
