// The registry with no exporter: writers that fork short-lived children for
// a minute keep /dev/shm bounded by their live segments (they fold the
// exited ones themselves), and an exporter's reader started afterwards
// serves exactly what every writer counted, SIGKILLed ones included.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "gym/registry_reader.h"
#include "gym/segment_writer.h"
#include "test_support.h"

namespace gym {
namespace {

using testing::find_series;
using testing::TempDir;
using namespace std::chrono_literals;

const int64_t kBounds[] = {1, 2, 3, 4, 5};

// How long the writers run: 60 s (GYM_TEST_BOUND_SECONDS to try shorter).
double run_seconds() {
  const char* s = std::getenv("GYM_TEST_BOUND_SECONDS");
  return s != nullptr ? std::atof(s) : 60.0;
}

// What a forking writer did, reported through a pipe when it is done.
struct Did {
  uint64_t adds = 0;       // work_total added by its children
  uint64_t forks = 0;      // children, each observed once into work_size
  uint64_t unmetered = 0;  // children that had no segment of their own
  int failed = 0;          // the step that stopped it early (0: none), errno in `why`
  int why = 0;
};

// fork, tried again while the host is short of processes for a moment (the
// suite runs other tests beside this one): EAGAIN is the host's, not ours.
pid_t fork_patiently() {
  for (int attempt = 0;; ++attempt) {
    const pid_t child = ::fork();
    if (child >= 0 || errno != EAGAIN || attempt == 200) return child;
    std::this_thread::sleep_for(10ms);
  }
}

enum class Ending { kExit, kKilled };

// Whether a writer holds its segment's owner lock (an OFD lock on the whole
// file, segment_format.h): a live writer.
bool owner_alive(int fd) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  return ::fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

// A writer that, for `seconds`, forks children that each add 1 to 5 to
// work_total and observe it into work_size, then exit at once or (kKilled)
// wait to be SIGKILLed; it counts its forks into forks_total itself. It
// reports what it did, then exits (kExit) or waits for SIGKILL.
pid_t start_forker(const std::string& dir, double seconds, Ending ending, int report, int seed) {
  return testing::spawn([=] {
    SegmentWriter w(dir);
    Counter work = w.counter("work_total", {});
    Histogram size = w.histogram("work_size", {}, kBounds, 1.0);
    Counter forks = w.counter("forks_total", {});
    std::mt19937 rng{unsigned(seed)};
    Did did;
    // A step that fails still reports, so that the test says which instead
    // of waiting for a report that never comes.
    const auto stop = [&](int step) {
      did.failed = step;
      did.why = errno;
      return ::write(report, &did, sizeof did) == sizeof did ? step : 8;
    };
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < until) {
      const uint64_t k = 1 + rng() % 5;
      int counted[2];
      if (::pipe(counted) != 0) return stop(3);
      const pid_t child = fork_patiently();
      if (child == 0) {
        work.add(k);
        size.observe(int64_t(k));
        if (!w.has_segment()) std::fprintf(stderr, "child unmetered: %s\n", w.error().c_str());
        char c = w.has_segment() ? 'x' : 'u';
        if (ending == Ending::kExit) ::_exit(c == 'x' ? 0 : 9);
        if (::write(counted[1], &c, 1) != 1) ::_exit(4);
        ::pause();
        ::_exit(5);
      }
      if (child < 0) return stop(6);
      bool unmetered = false;
      if (ending == Ending::kKilled) {
        char c;
        if (::read(counted[0], &c, 1) != 1) return stop(7);
        unmetered = c == 'u';
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
        ::kill(child, SIGKILL);
      }
      ::close(counted[0]);
      ::close(counted[1]);
      unmetered = testing::wait_exit(child) == 9 || unmetered;
      did.unmetered += unmetered;
      forks.add(1);
      did.adds += k;
      ++did.forks;
    }
    if (::write(report, &did, sizeof did) != sizeof did) return 8;
    if (ending == Ending::kKilled) ::pause();
    std::exit(0);  // a clean exit: its exit hook folds what it can
  });
}

// The registry directory now: its live segments (owner lock held), exited
// ones, and everything else (the totals, the lock file), in bytes of blocks.
struct Usage {
  int live = 0, exited = 0;
  uint64_t live_bytes = 0, exited_bytes = 0, other_bytes = 0;
};
Usage usage_of(const std::string& dir) {
  Usage u;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    struct stat st {};
    const std::string path = e.path().string();
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      if (fd >= 0) ::close(fd);
      continue;  // removed meanwhile
    }
    const uint64_t bytes = uint64_t(st.st_blocks) * 512;
    const std::string name = e.path().filename().string();
    if (name.ends_with(".seg") && owner_alive(fd)) {
      ++u.live;
      u.live_bytes += bytes;
    } else if (name.ends_with(".seg")) {
      ++u.exited;
      u.exited_bytes += bytes;
    } else {
      u.other_bytes += bytes;
    }
    ::close(fd);
  }
  return u;
}

void run_and_check(Ending ending) {
  TempDir tmp;
  const std::string dir = tmp.sub("registry");
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  constexpr int kWriters = 2;
  std::vector<pid_t> writers;
  for (int i = 0; i < kWriters; ++i)
    writers.push_back(start_forker(dir, run_seconds(), ending, report[1], 7 + i));
  // Watch the directory while they run: exited segments wait for the next
  // writer's fold, which comes once 4 entries (or a quarter of the
  // directory) were added since the last, plus those that exit while a fold
  // runs: a few, unless the folding writer is descheduled while it holds
  // the lock (28 seen with both cores busy compiling, at 1,800 forks a
  // second). Without folding: thousands, a child a millisecond or so.
  int observations = 0, most_exited = 0;
  uint64_t most_other = 0;
  Did total;
  for (int reported = 0; reported < kWriters;) {
    pollfd p{report[0], POLLIN, 0};
    if (::poll(&p, 1, 50) == 1) {
      Did d;
      ASSERT_EQ(::read(report[0], &d, sizeof d), ssize_t(sizeof d));
      total.adds += d.adds;
      total.forks += d.forks;
      total.unmetered += d.unmetered;
      EXPECT_EQ(d.failed, 0) << "a writer stopped at step " << d.failed << ": "
                             << std::strerror(d.why);
      ++reported;
      continue;
    }
    const Usage u = usage_of(dir);
    ++observations;
    most_exited = std::max(most_exited, u.exited);
    most_other = std::max(most_other, u.other_bytes);
    EXPECT_LE(u.exited, 64 + 2 * u.live) << "exited segments beside " << u.live << " live ones";
  }
  if (ending == Ending::kKilled)
    for (pid_t w : writers) ::kill(w, SIGKILL);
  for (pid_t w : writers) EXPECT_EQ(testing::wait_exit(w), ending == Ending::kExit ? 0 : 128 + 9);
  EXPECT_GT(total.forks, uint64_t(run_seconds() * 20)) << "children came and went all along";
  EXPECT_GT(observations, 10);
  EXPECT_EQ(total.unmetered, 0u) << "children that could not make a segment (their error above)";
  EXPECT_LE(most_other, uint64_t{64} << 10) << "the totals and the lock file stay small";
  const Usage after = usage_of(dir);
  EXPECT_EQ(after.live, 0);
  if (ending == Ending::kExit) {
    EXPECT_EQ(after.exited, 0) << "the last writers to exit folded every segment";
  }
  std::cout << "forks " << total.forks << ", most exited segments at once " << most_exited
            << ", most other bytes " << most_other << ", exited left " << after.exited << "\n";

  // An exporter's reader, started now, serves what every writer counted.
  RegistryReader reader(dir);
  const Snapshot& snap = reader.snapshot();
  // What the reader met, for a failure below to be explained by.
  for (const std::string& problem : snap.problems) std::cout << "reader: " << problem << "\n";
  std::cout << "retired " << snap.stats.retired_segments_total << ", damaged "
            << snap.stats.damaged_segments_total << ", rejected " << snap.stats.rejected_files_total
            << ", read errors " << snap.stats.read_errors_total << ", unmetered writers "
            << snap.stats.unmetered_writers << "\n";
  ASSERT_NE(find_series(snap, "work_total"), nullptr);
  EXPECT_EQ(find_series(snap, "work_total")->counter, total.adds);
  EXPECT_EQ(find_series(snap, "work_size")->count(), total.forks);
  EXPECT_EQ(find_series(snap, "forks_total")->counter, total.forks);
  EXPECT_EQ(usage_of(dir).exited, 0) << "the reader folded what was left";
  ::close(report[0]);
  ::close(report[1]);
}

TEST(RegistryBound, WritersForkingForAMinuteWithNoExporterKeepShmBoundedAndLoseNoCount) {
  run_and_check(Ending::kExit);
}

TEST(RegistryBound, WritersAndChildrenSigkilledWithNoExporterKeepShmBoundedAndLoseNoCount) {
  run_and_check(Ending::kKilled);
}

}  // namespace
}  // namespace gym
