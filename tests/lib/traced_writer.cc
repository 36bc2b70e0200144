// gym_traced_writer SERVER TRACE_ID SPAN_ID: a C++ writer for the exemplar
// test against Prometheus. In the registry of $GYM_METRICS_DIR it declares
// SERVER (a resources server), runs one resources operation (verify,
// thread, outcome ok, 20 ms) and one wait of a MeteredSemaphore
// ("traced_cpp", 1 slot, held 20 ms by another thread) with the trace
// context of the two hex ids, prints "ready" and waits to be killed.
//
// gym_traced_writer --flat: observes the operation-duration histogram
// (verify, thread, ok; native buckets too) flat out on four threads until
// killed, each value n ms (n in 1..200) with a trace id of 16 bytes n and a
// span id of 8 bytes n ^ 0x5a, after printing "observing": every exemplar
// says what its value must be.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <semaphore>
#include <string_view>
#include <thread>
#include <vector>

#include "gym/contract.h"
#include "gym/segment_writer.h"

#include "gym/metered_semaphore.h"
#include "gym/resources_operation.h"
#include "gym/server_identity.h"
#include "gym/trace_context.h"

namespace {
int observe_flat_out() {
  const gym::Label labels[] = {{gym::label::kOperation, "verify"},
                               {gym::label::kExecutor, "thread"},
                               {gym::label::kOutcome, "ok"}};
  gym::Histogram h = gym::SegmentWriter::process().histogram(
      gym::family::kOperationDuration, labels, gym::kOperationBoundsNs, 1e9, /*native=*/true);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&h, t] {
      for (uint64_t i = uint64_t(t);; i += 4) {
        const uint8_t n = uint8_t(1 + i % 200);
        gym::TraceContext trace;
        trace.trace_id.fill(n);
        trace.span_id.fill(uint8_t(n ^ 0x5a));
        h.observe(int64_t{n} * 1000000, trace);
        if (i == 0) {
          std::printf("observing\n");
          std::fflush(stdout);
        }
      }
    });
  for (auto& t : threads) t.join();
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string_view(argv[1]) == "--flat") return observe_flat_out();
  if (argc != 4) {
    std::fprintf(stderr, "usage: gym_traced_writer SERVER TRACE_ID SPAN_ID\n");
    return 2;
  }
  const auto trace = gym::TraceContext::from_hex(argv[2], argv[3]);
  if (!trace) {
    std::fprintf(stderr, "gym_traced_writer: ids must be 32 and 16 hex digits\n");
    return 2;
  }
  gym::declare_server(argv[1], "resources_server");
  std::counting_semaphore<> limit(1);
  {
    gym::ResourcesOperation op(limit, gym::Operation::kVerify, gym::Executor::kThread, *trace);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  gym::MeteredSemaphore sem(1, gym::Component::kResourcesServer, "traced_cpp", argv[1]);
  sem.acquire();
  std::thread waiter([&] {
    sem.acquire(*trace);
    sem.release();
  });
  while (sem.queued() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  sem.release();
  waiter.join();
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) ::pause();
}
