// MeteredSemaphore versus std::counting_semaphore, and the resources-operation
// scope versus the same instrumentation written with prometheus-cpp. Run with
// bench/ratios.py for ratios against the baselines of the same run.
#include <benchmark/benchmark.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <filesystem>
#include <semaphore>

#include "gym/metered_semaphore.h"
#include "gym/resources_operation.h"
#include "gym_metrics.h"
#include "scratch_dir.h"

namespace {

gym::SegmentWriter& writer() {
  static auto* w = new gym::SegmentWriter(gym::bench::scratch_dir("gym-bench-primitives"));
  return *w;
}

// The C ABI writes through the process's writer: into a scratch directory
// too, never the host's registry (set before anything uses it).
[[maybe_unused]] const bool g_process_dir_set = [] {
  ::setenv(gym::SegmentWriter::kDirEnv, gym::bench::scratch_dir("gym-bench-c-abi").c_str(), 1);
  return true;
}();

// Uncontended with 1 thread; 2 threads contend for 1 slot.
void acquire_release_metered(benchmark::State& state) {
  static auto* sem = new gym::MeteredSemaphore(1, gym::Component::kAgentServer, "rollouts",
                                               std::nullopt, std::nullopt, writer());
  for (auto _ : state) {
    sem->acquire();
    sem->release();
  }
}
void acquire_release_counting_semaphore(benchmark::State& state) {
  static auto* sem = new std::counting_semaphore<>(1);
  for (auto _ : state) {
    sem->acquire();
    sem->release();
  }
}
BENCHMARK(acquire_release_metered)->Threads(1)->Threads(2);
BENCHMARK(acquire_release_counting_semaphore)->Threads(1)->Threads(2);

// Two threads on one semaphore of 2 slots (each always finds one free: what
// they contend for is the cache line of the count): MeteredSemaphore, the
// bare std::counting_semaphore (2 slots: libstdc++ 12 makes a futex call on
// every release of a 1-slot one, which would flatter any comparison), and
// the same with a prometheus-cpp gauge of the free slots kept beside it.
void semaphore2_metered(benchmark::State& state) {
  static auto* sem = new gym::MeteredSemaphore(2, gym::Component::kAgentServer, "two_slots",
                                               std::nullopt, std::nullopt, writer());
  for (auto _ : state) {
    sem->acquire();
    sem->release();
  }
}
void semaphore2_counting_semaphore(benchmark::State& state) {
  static auto* sem = new std::counting_semaphore<>(2);
  for (auto _ : state) {
    sem->acquire();
    sem->release();
  }
}
void semaphore2_prometheus_cpp(benchmark::State& state) {
  static auto* registry = new prometheus::Registry;
  static auto* available = &prometheus::BuildGauge()
                                .Name("gym_concurrency_available")
                                .Register(*registry)
                                .Add({{"nemo_gym_concurrency_limit_name", "two_slots"}}, 2.0);
  static auto* sem = new std::counting_semaphore<>(2);
  for (auto _ : state) {
    sem->acquire();
    available->Decrement();
    available->Increment();
    sem->release();
  }
}
BENCHMARK(semaphore2_metered)->Threads(2);
BENCHMARK(semaphore2_counting_semaphore)->Threads(2);
BENCHMARK(semaphore2_prometheus_cpp)->Threads(2);

// The cost of the ages (#14), single thread, 2 slots: MeteredSemaphore's
// acquire+release now (a CAS on the free count, a CAS claiming a slot of the
// holds' ages record with a coarse clock read, a zero-wait bucket add; a CAS
// on the free count and one freeing the slot), through SemaphoreGuard (its
// own ticket) and through acquire()/release() (the thread's ticket), against
// the same semaphore as it was before ages (format 2): a CAS on the free count
// and an add on its registry copy, each way.
class BeforeAges {
 public:
  explicit BeforeAges(gym::SegmentWriter& w)
      : published_(w.gauge("bench_available", {})), free_(new Slot{2}) {
    published_.set(2);
  }
  void acquire() {
    int64_t v = __atomic_load_n(&free_->value, __ATOMIC_RELAXED);
    while (v > 0)
      if (__atomic_compare_exchange_n(&free_->value, &v, v - 1, true, __ATOMIC_SEQ_CST,
                                      __ATOMIC_RELAXED)) {
        published_.add(-1);
        return;
      }
    std::abort();  // uncontended: never
  }
  void release() {
    int64_t v = __atomic_load_n(&free_->value, __ATOMIC_RELAXED);
    do {
      if (v >= 2) throw std::logic_error("release without a slot held");
    } while (!__atomic_compare_exchange_n(&free_->value, &v, v + 1, true, __ATOMIC_SEQ_CST,
                                          __ATOMIC_RELAXED));
    published_.add(1);
    if (__atomic_load_n(&waiting_, __ATOMIC_SEQ_CST) > 0) std::abort();
  }

 private:
  struct alignas(64) Slot {
    int64_t value;
  };
  gym::Gauge published_;
  std::unique_ptr<Slot> free_;
  alignas(64) int64_t waiting_ = 0;
};

void acquire_release_single_before_ages(benchmark::State& state) {
  static auto* sem = new BeforeAges(writer());
  for (auto _ : state) {
    sem->acquire();
    sem->release();
  }
}
void acquire_release_single_metered(benchmark::State& state) {
  static auto* sem = new gym::MeteredSemaphore(2, gym::Component::kAgentServer, "single",
                                               std::nullopt, std::nullopt, writer());
  for (auto _ : state) {
    sem->acquire();
    sem->release();
  }
}
void acquire_release_single_guard(benchmark::State& state) {
  static auto* sem = new gym::MeteredSemaphore(2, gym::Component::kAgentServer, "guarded",
                                               std::nullopt, std::nullopt, writer());
  for (auto _ : state) gym::SemaphoreGuard hold(*sem);
}
BENCHMARK(acquire_release_single_before_ages);
BENCHMARK(acquire_release_single_metered);
BENCHMARK(acquire_release_single_guard);

// The scope over an uncontended limit: queued +1/-1, queue duration, active
// +1/-1, duration by outcome, two clock reads.
void operation_scope_registry(benchmark::State& state) {
  static auto* metrics = new gym::OperationMetrics(writer());
  static auto* limit = new std::counting_semaphore<>(64);
  for (auto _ : state) {
    gym::ResourcesOperation op(*limit, gym::Operation::kVerify, gym::Executor::kSubprocess, {},
                               *metrics);
  }
}

struct PromOperation {
  prometheus::Registry registry;
  prometheus::Histogram* queue;
  prometheus::Histogram* duration;
  prometheus::Gauge* queued;
  prometheus::Gauge* active;
  PromOperation() {
    const prometheus::Histogram::BucketBoundaries b = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1,
                                                       5,     10,    30,   60,   300, 1800};
    const prometheus::Labels l = {{"nemo_gym_resources_operation", "verify"},
                                  {"nemo_gym_resources_executor", "subprocess"}};
    queue = &prometheus::BuildHistogram()
                 .Name("gym_resources_operation_queue_duration_seconds")
                 .Register(registry)
                 .Add(l, b);
    auto lo = l;
    lo["nemo_gym_resources_operation_outcome"] = "ok";
    duration = &prometheus::BuildHistogram()
                    .Name("gym_resources_operation_duration_seconds")
                    .Register(registry)
                    .Add(lo, b);
    queued =
        &prometheus::BuildGauge().Name("gym_resources_operation_queued").Register(registry).Add(l);
    active =
        &prometheus::BuildGauge().Name("gym_resources_operation_active").Register(registry).Add(l);
  }
};
void operation_scope_prometheus_cpp(benchmark::State& state) {
  static auto* p = new PromOperation;
  static auto* limit = new std::counting_semaphore<>(64);
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    p->queued->Increment();
    const auto queued_at = Clock::now();
    limit->acquire();
    const auto started = Clock::now();
    p->queue->Observe(std::chrono::duration<double>(started - queued_at).count());
    p->queued->Decrement();
    p->active->Increment();
    const auto ran = Clock::now() - started;
    p->active->Decrement();
    p->duration->Observe(std::chrono::duration<double>(ran).count());
    limit->release();
  }
}
// The same scope through the C ABI (what other languages' bindings call),
// by kind (integers) and by name (strings parsed, doubles rounded, per call).
void operation_scope_abikind(benchmark::State& state) {
  static auto* limit = new std::counting_semaphore<>(64);
  static const int kind = gym_operation_kind("verify", "subprocess");
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    int64_t queued = 0, active = 0;
    gym_operation_queued_k(kind, &queued);
    const auto queued_at = Clock::now();
    limit->acquire();
    const auto started = Clock::now();
    gym_operation_started_k(kind, (started - queued_at).count(), queued, &active);
    gym_operation_finished_k(kind, (Clock::now() - started).count(), GYM_OUTCOME_OK, active);
    limit->release();
  }
}
void operation_scope_abinames(benchmark::State& state) {
  static auto* limit = new std::counting_semaphore<>(64);
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    int64_t queued = 0, active = 0;
    gym_operation_queued_t("verify", "subprocess", &queued);
    const auto queued_at = Clock::now();
    limit->acquire();
    const auto started = Clock::now();
    gym_operation_started_t("verify", "subprocess",
                            std::chrono::duration<double>(started - queued_at).count(), queued,
                            &active);
    gym_operation_finished_t("verify", "subprocess",
                             std::chrono::duration<double>(Clock::now() - started).count(), "ok",
                             active);
    limit->release();
  }
}
BENCHMARK(operation_scope_registry)->Threads(1)->Threads(2);
BENCHMARK(operation_scope_prometheus_cpp)->Threads(1)->Threads(2);
BENCHMARK(operation_scope_abikind)->Threads(1);
BENCHMARK(operation_scope_abinames)->Threads(1);

}  // namespace

BENCHMARK_MAIN();
