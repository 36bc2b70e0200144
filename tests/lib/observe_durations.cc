// gym_observe_durations OUT N SEED: a C++ writer for the native-histogram
// test against Prometheus. In the registry of $GYM_METRICS_DIR it registers
// the operation-duration histogram (native buckets too, as
// ResourcesOperation does) for operation "verify", executor "thread",
// outcome "ok", observes N durations drawn from a log-normal distribution
// (median 50 ms, spread over 1 ms .. minutes), writes each to OUT in seconds
// (one per line, as observed), prints "observed" and waits to be killed.
// N = -1: observes flat out until killed, writing nothing to OUT, after
// printing "observing" (a writer that never pauses, for consistent reads).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gym/contract.h"
#include "gym/families.h"
#include "gym/segment_writer.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: gym_observe_durations OUT N SEED\n");
    return 2;
  }
  std::FILE* out = std::fopen(argv[1], "w");
  if (out == nullptr) {
    std::perror(argv[1]);
    return 1;
  }
  const long n = std::atol(argv[2]);
  std::mt19937_64 rng(std::strtoull(argv[3], nullptr, 10));
  std::lognormal_distribution<double> seconds(std::log(0.05), 1.5);

  gym::SegmentWriter& writer = gym::SegmentWriter::process();
  const gym::Label labels[] = {{gym::label::kOperation, "verify"},
                               {gym::label::kExecutor, "thread"},
                               {gym::label::kOutcome, "ok"}};
  gym::Histogram h = writer.histogram(gym::family::kOperationDuration, labels,
                                      gym::kOperationBoundsNs, double(gym::kNanosPerSecond),
                                      /*native=*/true);
  if (!h.registered()) {
    std::fprintf(stderr, "no segment: %s\n", writer.error().c_str());
    return 1;
  }
  if (n < 0) {
    std::fclose(out);
    std::printf("observing\n");
    std::fflush(stdout);
    for (;;) h.observe(static_cast<int64_t>(seconds(rng) * double(gym::kNanosPerSecond)));
  }
  for (long i = 0; i < n; ++i) {
    const auto ns = static_cast<int64_t>(seconds(rng) * double(gym::kNanosPerSecond));
    h.observe(ns);
    std::fprintf(out, "%.9f\n", double(ns) / double(gym::kNanosPerSecond));
  }
  std::fclose(out);
  std::printf("observed\n");
  std::fflush(stdout);
  for (;;) ::pause();
}
