// What one operation costs, counted rather than timed, for the cost guard
// (bench/cost_guard.py runs this under valgrind's callgrind and compares with
// bench/cost_budget.txt). Two kinds of probe:
//
//   cost_probe instructions PROBE N   does PROBE's setup, then PROBE N times
//                                     (the guard runs N and 2N and divides the
//                                     difference, so setup cancels out)
//   cost_probe bytes                  prints "NAME VALUE" lines: /dev/shm bytes
//                                     per writer shape (a forked child's, and
//                                     what 100 exited children leave with no
//                                     exporter), exporter heap per series, and
//                                     the largest process the default PSS
//                                     budget reads (MiB)
//
// Instruction probes (and one bytes figure, the exemplars' /dev/shm per
// histogram): observe (a histogram observation with native buckets),
// observe_exemplar (the same with a trace context: its bucket's exemplar),
// semaphore (MeteredSemaphore acquire + release), operation (the C++
// resources-operation scope), operation_abi (the same through the C ABI, by
// kind), operation_abi_names (the same by name: what a binding writes
// first), scrape_text / scrape_openmetrics / scrape_protobuf (one scrape of
// kScrapeWriters writers of 20 series each; the guard divides by the series).
#include <malloc.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <semaphore>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "collector.h"
#include "collectors/pss_budget.h"
#include "exposition/exposition.h"
#include "exposition/protobuf.h"
#include "exposition/text.h"
#include "gym/contract.h"
#include "gym/metered_semaphore.h"
#include "gym/resources_operation.h"
#include "gym/segment_writer.h"
#include "gym_metrics.h"
#include "scratch_dir.h"

namespace {

constexpr int kScrapeWriters = 50;
constexpr int kSeriesPerWriter = 20;

// 20 series in a writer: 10 counters, 6 gauges, 4 histograms with native
// buckets, labelled apart per writer (exporter_bench's shape).
void fill(gym::SegmentWriter& writer, int w) {
  for (int i = 0; i < 10; ++i) {
    const std::string l = "w" + std::to_string(w) + "_" + std::to_string(i);
    gym::Label labels[] = {{gym::label::kComponent, "agent_server"}, {gym::label::kLimitName, l}};
    writer.counter(gym::family::kAdmissionCancelled, labels).add(uint64_t(w + i));
  }
  for (int i = 0; i < 6; ++i) {
    const std::string l = "w" + std::to_string(w) + "_" + std::to_string(i);
    gym::Label labels[] = {{gym::label::kComponent, "agent_server"}, {gym::label::kLimitName, l}};
    writer.gauge(gym::family::kConcurrencyQueueDepth, labels).set(i);
  }
  for (int i = 0; i < 4; ++i) {
    const std::string l = "w" + std::to_string(w) + "_" + std::to_string(i);
    gym::Label labels[] = {{gym::label::kOperation, "verify"},
                           {gym::label::kExecutor, "subprocess"},
                           {gym::label::kServerName, l}};
    writer
        .histogram(gym::family::kOperationQueueDuration, labels, gym::kOperationBoundsNs, 1e9,
                   /*native=*/true)
        .observe(int64_t(w) * 1000000 + i);
  }
}

struct Scrape {
  std::string dir = gym::bench::scratch_dir("gym-cost-scrape");
  std::vector<std::unique_ptr<gym::SegmentWriter>> writers;
  std::unique_ptr<gym::exporter::Exposition> exposition;
  explicit Scrape(int count) {
    for (int w = 0; w < count; ++w) {
      writers.push_back(std::make_unique<gym::SegmentWriter>(dir));
      fill(*writers.back(), w);
    }
  }
  // The exporter's side: a reader and the registry collector, after one
  // scrape (which maps and parses every segment once).
  void open() {
    std::vector<std::unique_ptr<gym::exporter::Collector>> collectors;
    const gym::exporter::CollectorContext context{
        std::make_shared<gym::exporter::SharedRegistry>(dir)};
    collectors.push_back(gym::exporter::make_collector("registry", context));
    exposition = std::make_unique<gym::exporter::Exposition>(std::move(collectors));
    exposition->render();
  }
};

// Blocks of the directory's segment files (`all`: of every file, the
// totals and the lock file too, which a directory has once, whatever its
// writers).
size_t bytes_in(const std::string& dir, bool all = false) {
  size_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    struct stat st {};
    if (!all && e.path().extension() != ".seg") continue;
    if (::stat(e.path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
      total += size_t(st.st_blocks) * 512;
  }
  return total;
}

// A writer with one limit, admitted once.
size_t shm_one_limit() {
  const std::string dir = gym::bench::scratch_dir("gym-cost-one-limit");
  gym::SegmentWriter writer(dir);
  gym::MeteredSemaphore sem(4, gym::Component::kAgentServer, "rollouts", std::nullopt, std::nullopt,
                            writer);
  sem.acquire();
  sem.release();
  return bytes_in(dir);
}

// What the exemplars of one histogram add: 16 operation histograms observed
// without a trace context, then with one, the difference per histogram.
size_t shm_exemplars_per_histogram() {
  const std::string dir = gym::bench::scratch_dir("gym-cost-exemplars");
  gym::SegmentWriter writer(dir);
  constexpr int kHistograms = 16;
  std::vector<gym::Histogram> hs;
  for (int i = 0; i < kHistograms; ++i) {
    const std::string server = "server_" + std::to_string(i);
    gym::Label labels[] = {{gym::label::kOperation, "verify"}, {gym::label::kServerName, server}};
    hs.push_back(writer.histogram(gym::family::kOperationDuration, labels, gym::kOperationBoundsNs,
                                  1e9, /*native=*/true));
    hs.back().observe(5000000);
  }
  const size_t before = bytes_in(dir);
  const auto trace =
      gym::TraceContext::from_hex("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
  for (const gym::Histogram& h : hs) h.observe(5000000, *trace);
  return (bytes_in(dir) - before) / kHistograms;
}

// footprint's shape: three limits with admission timeouts (one wait timed
// out, one cancelled, one still queued) and twenty resources operations of
// one kind.
size_t shm_table_shape() {
  const std::string dir = gym::bench::scratch_dir("gym-cost-table");
  gym::SegmentWriter writer(dir);
  using namespace std::chrono_literals;
  gym::MeteredSemaphore timed(1, gym::Component::kAgentServer, "timed", std::nullopt, 1ms, writer);
  gym::MeteredSemaphore cancelled(1, gym::Component::kAgentServer, "cancelled", std::nullopt, 60s,
                                  writer);
  gym::MeteredSemaphore queued(1, gym::Component::kAgentServer, "queued", std::nullopt, 60s,
                               writer);
  timed.acquire();
  try {
    timed.acquire();
  } catch (const gym::AdmissionTimeout&) {
  }
  timed.release();
  cancelled.acquire();
  {
    std::stop_source stop;
    std::thread waiter([&] {
      try {
        cancelled.acquire(stop.get_token());
      } catch (const gym::AdmissionCancelled&) {
      }
    });
    while (cancelled.queued() == 0) std::this_thread::sleep_for(1ms);
    stop.request_stop();
    waiter.join();
  }
  cancelled.release();
  queued.acquire();
  std::thread waiter([&] {
    queued.acquire();
    queued.release();
  });
  while (queued.queued() == 0) std::this_thread::sleep_for(1ms);
  gym::OperationMetrics metrics(writer);
  std::counting_semaphore<> limit(4);
  for (int i = 0; i < 20; ++i)
    gym::ResourcesOperation op(limit, gym::Operation::kVerify, gym::Executor::kSubprocess, {},
                               metrics);
  const size_t bytes = bytes_in(dir);
  queued.release();
  waiter.join();
  return bytes;
}

// What a forked child of footprint's writer takes in /dev/shm while it lives,
// having run one resources operation (its own segment; see docs/registry.md).
size_t shm_forked_child() {
  const std::string dir = gym::bench::scratch_dir("gym-cost-child");
  gym::SegmentWriter writer(dir);
  gym::OperationMetrics metrics(writer);
  std::counting_semaphore<> limit(4);
  for (int i = 0; i < 20; ++i)
    gym::ResourcesOperation op(limit, gym::Operation::kVerify, gym::Executor::kSubprocess, {},
                               metrics);
  const size_t before = bytes_in(dir);
  int ready[2];
  if (::pipe(ready) != 0) return 0;
  const pid_t child = ::fork();
  if (child == 0) {
    {
      gym::ResourcesOperation op(limit, gym::Operation::kVerify, gym::Executor::kSubprocess, {},
                                 metrics);
    }
    char c = 'r';
    if (::write(ready[1], &c, 1) != 1) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  char c;
  const bool ok = child > 0 && ::read(ready[0], &c, 1) == 1;
  const size_t during = bytes_in(dir);
  if (child > 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  ::close(ready[0]);
  ::close(ready[1]);
  return ok && during > before ? during - before : 0;
}

// What 100 exited children of such a writer leave in /dev/shm with no
// exporter running (their segments not yet folded, the totals and the lock
// file): the writers' own folding keeps it bounded (docs/registry.md).
size_t shm_after_forks() {
  const std::string dir = gym::bench::scratch_dir("gym-cost-forks");
  gym::SegmentWriter writer(dir);
  gym::OperationMetrics metrics(writer);
  std::counting_semaphore<> limit(4);
  {
    gym::ResourcesOperation op(limit, gym::Operation::kVerify, gym::Executor::kSubprocess, {},
                               metrics);
  }
  for (int i = 0; i < 100; ++i) {
    const pid_t child = ::fork();
    if (child == 0) {
      {
        gym::ResourcesOperation op(limit, gym::Operation::kVerify, gym::Executor::kSubprocess, {},
                                   metrics);
      }
      ::_exit(0);
    }
    if (child > 0) ::waitpid(child, nullptr, 0);
  }
  struct stat own {};
  if (::stat(writer.path().c_str(), &own) != 0) return 0;
  return bytes_in(dir, /*all=*/true) - size_t(own.st_blocks) * 512;
}

// The largest process (MiB resident) the default PSS budget lets the
// exporter read before it has measured this host's stall per GiB.
size_t pss_largest_default_read_mib() {
  const gym::exporter::PssBudgetConfig c;
  return size_t(c.max_stall_seconds / c.prior_seconds_per_gib * 1024);
}

// The exporter's heap per series it serves: after the second scrape of
// kScrapeWriters writers, less before the exporter's side was made (the
// writers, in this process too, are not the exporter's), over their series.
double heap_per_series() {
  auto scrape = std::make_unique<Scrape>(kScrapeWriters);
  const size_t before = mallinfo2().uordblks;
  scrape->open();
  scrape->exposition->render();
  const size_t after = mallinfo2().uordblks;
  return double(after - before) / (kScrapeWriters * kSeriesPerWriter);
}

// What a streamed scrape holds at its peak: the heap's growth over two
// streamed scrapes of kScrapeWriters writers (after a first whole one),
// looked at as each piece is handed on, over their series: the buffer a
// piece is rendered into, kept between scrapes. A reply built whole, or
// held as it is handed on, shows here as its size.
double scrape_peak_heap_per_series() {
  auto scrape = std::make_unique<Scrape>(kScrapeWriters);
  scrape->open();
  const gym::exporter::TextEncoder text;
  // Blocks of the arenas and blocks mapped on their own (a large buffer).
  const auto heap = [] { return mallinfo2().uordblks + mallinfo2().hblkhd; };
  const size_t before = heap();
  size_t peak = before;
  const auto look = [&](std::string_view) { peak = std::max(peak, heap()); };
  for (int i = 0; i < 2; ++i) scrape->exposition->render(text, {}, look);
  return double(peak - before) / (kScrapeWriters * kSeriesPerWriter);
}

int instructions(const std::string& probe, long n) {
  const std::string dir = gym::bench::scratch_dir("gym-cost-probe");
  gym::SegmentWriter writer(dir);
  if (probe == "observe") {
    gym::Label labels[] = {{gym::label::kOperation, "verify"},
                           {gym::label::kExecutor, "subprocess"}};
    gym::Histogram h = writer.histogram(gym::family::kOperationDuration, labels,
                                        gym::kOperationBoundsNs, 1e9, /*native=*/true);
    for (long i = 0; i < n; ++i) h.observe(int64_t(i) * 7919 % 100000000);
  } else if (probe == "observe_exemplar") {
    gym::Label labels[] = {{gym::label::kOperation, "verify"},
                           {gym::label::kExecutor, "subprocess"}};
    gym::Histogram h = writer.histogram(gym::family::kOperationDuration, labels,
                                        gym::kOperationBoundsNs, 1e9, /*native=*/true);
    const auto trace =
        gym::TraceContext::from_hex("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    for (long i = 0; i < n; ++i) h.observe(int64_t(i) * 7919 % 100000000, *trace);
  } else if (probe == "semaphore") {
    gym::MeteredSemaphore sem(4, gym::Component::kAgentServer, "rollouts", std::nullopt,
                              std::nullopt, writer);
    for (long i = 0; i < n; ++i) {
      sem.acquire();
      sem.release();
    }
  } else if (probe == "operation") {
    gym::OperationMetrics metrics(writer);
    std::counting_semaphore<> limit(4);
    for (long i = 0; i < n; ++i)
      gym::ResourcesOperation op(limit, gym::Operation::kVerify, gym::Executor::kSubprocess, {},
                                 metrics);
  } else if (probe == "operation_abi") {
    ::setenv(gym::SegmentWriter::kDirEnv, dir.c_str(), 1);
    const int kind = gym_operation_kind("verify", "subprocess");
    for (long i = 0; i < n; ++i) {
      int64_t queued = 0, active = 0;
      gym_operation_queued_k(kind, &queued);
      gym_operation_started_k(kind, 1000, queued, &active);
      gym_operation_finished_k(kind, 2000, GYM_OUTCOME_OK, active);
    }
  } else if (probe == "operation_abi_names") {
    ::setenv(gym::SegmentWriter::kDirEnv, dir.c_str(), 1);
    for (long i = 0; i < n; ++i) {
      int64_t queued = 0, active = 0;
      gym_operation_queued_t("verify", "subprocess", &queued);
      gym_operation_started_t("verify", "subprocess", 1e-6, queued, &active);
      gym_operation_finished_t("verify", "subprocess", 2e-6, "ok", active);
    }
  } else if (probe.starts_with("scrape_")) {
    Scrape scrape(kScrapeWriters);
    scrape.open();
    const std::string format = probe.substr(7);
    std::unique_ptr<gym::exporter::Encoder> encoder;
    if (format == "text") encoder = std::make_unique<gym::exporter::TextEncoder>();
    if (format == "openmetrics") encoder = std::make_unique<gym::exporter::OpenMetricsEncoder>();
    if (format == "protobuf") encoder = std::make_unique<gym::exporter::ProtobufEncoder>();
    if (!encoder) return 2;
    // As a scrape is served: rendered in pieces, each handed on (here
    // counted) as it is made.
    size_t bytes = 0;
    const auto count = [&bytes](std::string_view piece) { bytes += piece.size(); };
    for (long i = 0; i < n; ++i) scrape.exposition->render(*encoder, {}, count);
    if (bytes == 0) return 1;
  } else {
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "instructions") == 0) {
    const int rc = instructions(argv[2], std::atol(argv[3]));
    if (rc == 2) std::fprintf(stderr, "cost_probe: no probe %s\n", argv[2]);
    return rc;
  }
  if (argc == 2 && std::strcmp(argv[1], "bytes") == 0) {
    std::printf("shm_bytes_one_limit %zu\n", shm_one_limit());
    std::printf("shm_bytes_table_shape %zu\n", shm_table_shape());
    std::printf("shm_bytes_exemplars_per_histogram %zu\n", shm_exemplars_per_histogram());
    std::printf("shm_bytes_forked_child %zu\n", shm_forked_child());
    std::printf("shm_bytes_after_100_forks %zu\n", shm_after_forks());
    std::printf("pss_largest_default_read_mib %zu\n", pss_largest_default_read_mib());
    std::printf("heap_bytes_per_series %.0f\n", heap_per_series());
    std::printf("heap_bytes_scrape_peak_per_series %.0f\n", scrape_peak_heap_per_series());
    std::printf("scrape_series %d\n", kScrapeWriters * kSeriesPerWriter);
    return 0;
  }
  std::fprintf(stderr, "usage: cost_probe instructions PROBE N | cost_probe bytes\n");
  return 2;
}
