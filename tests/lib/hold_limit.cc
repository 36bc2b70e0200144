// gym_hold_limit COMPONENT LIMIT_NAME LIMIT HOLDS: a C++ writer for tests in
// other languages. Opens a MeteredSemaphore in the registry of
// $GYM_METRICS_DIR, takes HOLDS slots, prints "held" and waits to be killed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "gym/metered_semaphore.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: gym_hold_limit COMPONENT LIMIT_NAME LIMIT HOLDS\n");
    return 2;
  }
  const auto component = gym::parse_value<gym::Component>(argv[1], gym::kComponents);
  if (!component) {
    std::fprintf(stderr, "unknown component %s\n", argv[1]);
    return 2;
  }
  gym::MeteredSemaphore sem(std::atoll(argv[3]), *component, argv[2]);
  for (long i = 0; i < std::atol(argv[4]); ++i) sem.acquire();
  std::printf("held\n");
  std::fflush(stdout);
  for (;;) ::pause();
}
