// gym_traced_writer SERVER TRACE_ID SPAN_ID: a C++ writer for the exemplar
// test against Prometheus. In the registry of $GYM_METRICS_DIR it declares
// SERVER (a resources server), runs one resources operation (verify,
// thread, outcome ok, 20 ms) and one wait of a MeteredSemaphore
// ("traced_cpp", 1 slot, held 20 ms by another thread) with the trace
// context of the two hex ids, prints "ready" and waits to be killed.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <semaphore>
#include <thread>

#include "gym/metered_semaphore.h"
#include "gym/resources_operation.h"
#include "gym/server_identity.h"
#include "gym/trace_context.h"

int main(int argc, char** argv) {
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
