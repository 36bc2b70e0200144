// gym_declare_server NAME SERVER_TYPE MEGABYTES CPU_SECONDS: a writer that
// declares a server identity in the registry of $GYM_METRICS_DIR, touches
// MEGABYTES of memory, uses CPU_SECONDS of CPU, prints "ready <pid as it
// sees itself>" and waits to be killed. For tests of what a server is (in
// another pid namespace, say).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "gym/server_identity.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: gym_declare_server NAME SERVER_TYPE MEGABYTES CPU_SECONDS\n");
    return 2;
  }
  gym::declare_server(argv[1], argv[2]);
  std::vector<char> memory(size_t(std::atol(argv[3])) << 20);
  for (size_t i = 0; i < memory.size(); i += 4096) memory[i] = 1;
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(std::atof(argv[4]));
  volatile uint64_t spin = 0;
  while (std::chrono::steady_clock::now() < until) spin = spin + 1;
  std::printf("ready %d\n", int(::getpid()));
  std::fflush(stdout);
  for (;;) ::pause();
}
