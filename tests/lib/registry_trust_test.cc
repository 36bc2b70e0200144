// Registry trust: whatever /dev/shm, a fork or another process of the user
// does, no writer, forked child or reader dies, and no number is wrong:
// full tmpfs mounts, segments truncated and rewritten under live processes,
// forks with held slots, bad label bytes, wrapping counters, readers killed
// and run side by side, churn of label sets.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "gym/metered_semaphore.h"
#include "gym/registry_reader.h"
#include "gym/segment_format.h"
#include "gym/segment_writer.h"
#include "test_support.h"

namespace gym {
namespace {

using namespace std::chrono_literals;
using testing::find_series;
using testing::free_slots;
using testing::TempDir;
using testing::TmpfsMount;
using Labels = std::vector<std::pair<std::string, std::string>>;

const int64_t kBounds[] = {1, 5, 10, 50, 100};

// A counter with one label.
Counter counter_with(SegmentWriter& w, const char* family, const char* name,
                     const std::string& value) {
  const Label l[] = {{name, value}};
  return w.counter(family, l);
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  return out;
}

std::string segment_of(const std::string& dir) {
  for (const auto& n : names_in(dir))
    if (n.ends_with(".seg")) return dir + "/" + n;
  return "";
}

// A process that registers `series` counters and a histogram and a
// semaphore, forks a child that does the same, and keeps both running until
// the gate opens. Exits 0 only if the child exited 0 too.
int writer_with_child(const std::string& dir, int series, testing::Ready& ready,
                      testing::Gate& gate) {
  SegmentWriter w(dir);
  std::vector<Counter> counters;
  for (int i = 0; i < series; ++i)
    counters.push_back(counter_with(w, "work_total", "n", std::to_string(i)));
  Histogram h = w.histogram("work_size", {}, kBounds, 1.0);
  MeteredSemaphore sem(2, Component::kOther, "slots", std::nullopt, std::nullopt, w);
  sem.acquire();
  for (Counter& c : counters) c.add(3);
  h.observe(7);
  pid_t child = ::fork();
  if (child == 0) {
    for (Counter& c : counters) c.add(1);
    h.observe(70);
    sem.release();
    Counter own = w.counter("child_total", {});
    own.add(1);
    ready.signal();
    gate.wait();
    ::_exit(0);
  }
  ready.signal();
  gate.wait();
  for (Counter& c : counters) c.add(1);
  sem.release();
  return testing::wait_exit(child);
}

TEST(RegistryTrust, FullTmpfsLeavesWritersAndForkedChildrenRunningUnmeteredAndCounted) {
  TmpfsMount fs("1m");
  if (!fs.ok()) GTEST_SKIP() << "mounting a tmpfs needs root";
  fs.fill();
  const std::string dir = fs.path() + "/registry";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  constexpr int kWriters = 8;
  testing::Ready ready;
  testing::Gate gate;
  std::vector<pid_t> pids;
  for (int i = 0; i < kWriters; ++i)
    pids.push_back(testing::spawn([&] { return writer_with_child(dir, 20, ready, gate); }));
  ready.wait(2 * kWriters);
  RegistryReader reader(dir);
  {
    const Snapshot& snap = reader.snapshot();
    EXPECT_EQ(snap.stats.live_segments, 0u) << "no page to be had";
    EXPECT_EQ(snap.stats.unmetered_writers, uint64_t{2 * kWriters})
        << "every process, parent and forked child, is seen running unmetered";
  }
  gate.open();
  for (pid_t p : pids) EXPECT_EQ(testing::wait_exit(p), 0) << "no SIGBUS (135), no abort";
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(snap.stats.unmetered_writers, 0u);
  for (const auto& n : names_in(dir)) EXPECT_FALSE(n.ends_with(".unmetered")) << n;
}

TEST(RegistryTrust, NearlyFullTmpfsMakesRegistrationsCountedDropsNeverSignals) {
  TmpfsMount fs("2m");
  if (!fs.ok()) GTEST_SKIP() << "mounting a tmpfs needs root";
  const std::string dir = fs.path() + "/registry";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  fs.fill("filler", 96 * 1024);  // room for a few segments' first pages
  constexpr int kWriters = 12;
  testing::Ready ready;
  testing::Gate gate;
  std::vector<pid_t> pids;
  for (int i = 0; i < kWriters; ++i)
    pids.push_back(testing::spawn([&] { return writer_with_child(dir, 200, ready, gate); }));
  ready.wait(2 * kWriters);
  RegistryReader reader(dir);
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(snap.stats.live_segments + snap.stats.unmetered_writers, uint64_t{2 * kWriters})
      << "each live process is read or counted as unmetered";
  EXPECT_GT(snap.stats.dropped_series_total + snap.stats.unmetered_writers, 0u);
  gate.open();
  for (pid_t p : pids) EXPECT_EQ(testing::wait_exit(p), 0) << "no SIGBUS (135), no abort";
  const Snapshot& after = reader.snapshot();
  EXPECT_EQ(after.stats.live_segments, 0u);
  EXPECT_EQ(after.stats.unmetered_writers, 0u);
}

TEST(RegistryTrust, ReaderOnAFullTmpfsSurvivesAHoleUnderALiveSegment) {
  TmpfsMount fs("4m");
  if (!fs.ok()) GTEST_SKIP() << "mounting a tmpfs needs root";
  const std::string dir = fs.path();
  testing::Ready ready;
  testing::Gate gate;
  testing::Gate gate2;
  pid_t pid = testing::spawn([&] {
    SegmentWriter w(dir);
    Counter c = w.counter("work_total", {});
    c.add(5);
    ready.signal();
    gate.wait();
    c.add(1);  // its page is gone and none can be had: the writer goes on unmetered
    ready.signal();
    gate2.wait();
    return 0;
  });
  ready.wait(1);
  RegistryReader reader(dir);
  EXPECT_EQ(find_series(reader.snapshot(), "work_total")->counter, 5u);
  const std::string seg = segment_of(dir);
  int fd = ::open(seg.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(
      ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(segment::kValuesOffset),
                  off_t(segment::kValueLines) * segment::kLineBytes),
      0);
  ::close(fd);
  fs.fill();
  const Snapshot& snap = reader.snapshot();
  const SeriesSample* s = find_series(snap, "work_total");
  ASSERT_NE(s, nullptr);
  EXPECT_GE(s->counter, 5u) << "a counter never falls";
  gate.open();
  ready.wait(1);
  reader.snapshot();
  gate2.open();
  EXPECT_EQ(testing::wait_exit(pid), 0) << "the writer was not killed by SIGBUS";
}

class Truncation : public ::testing::TestWithParam<uint64_t> {};

TEST_P(Truncation, TruncatedLiveSegmentNeverKillsTheWriterOrTheReaderNorLowersACounter) {
  TempDir tmp;
  testing::Ready ready;
  testing::Gate gate;
  std::atomic<bool>* stop = static_cast<std::atomic<bool>*>(
      ::mmap(nullptr, sizeof(std::atomic<bool>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
             -1, 0));
  new (stop) std::atomic<bool>(false);
  pid_t pid = testing::spawn([&] {
    SegmentWriter w(tmp.path());
    Counter c = w.counter("busy_total", {});
    Histogram h = w.histogram("busy_size", {}, kBounds, 1.0);
    Gauge g = w.gauge("busy", {});
    ready.signal();
    uint64_t n = 0;
    while (!stop->load()) {
      c.add();
      h.observe(int64_t(n++ % 120));
      g.set(int64_t(n));
    }
    // Registrations after the loss are counted drops, not crashes.
    w.counter("late_total", {}).add();
    return w.unmetered() ? 0 : 3;
  });
  ready.wait(1);
  RegistryReader reader(tmp.path());
  const std::string seg = segment_of(tmp.path());
  ASSERT_FALSE(seg.empty());
  uint64_t last = 0;
  for (int i = 0; i < 40; ++i) {
    if (i == 10) {
      ASSERT_EQ(::truncate(seg.c_str(), off_t(GetParam())), 0);
    }
    const Snapshot& snap = reader.snapshot();
    if (const SeriesSample* s = find_series(snap, "busy_total")) {
      EXPECT_GE(s->counter, last) << "snapshot " << i;
      last = s->counter;
    }
    if (i > 10) {
      EXPECT_EQ(snap.stats.damaged_segments_total, 1u);
      EXPECT_EQ(snap.stats.unmetered_writers, 1u) << "a live writer with a damaged segment";
      EXPECT_EQ(find_series(snap, "busy"), nullptr) << "no gauge from a segment we cannot read";
    }
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_GT(last, 0u);
  stop->store(true);
  EXPECT_EQ(testing::wait_exit(pid), 0) << "the writer ran on, unmetered, and was not killed";
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(snap.stats.live_segments, 0u);
  EXPECT_GE(find_series(snap, "busy_total")->counter, last);
  EXPECT_TRUE(tmp.files().empty());
  ::munmap(stop, sizeof(std::atomic<bool>));
}

INSTANTIATE_TEST_SUITE_P(ToZeroHalfAndOnePage, Truncation,
                         ::testing::Values(uint64_t{0}, segment::kTotalBytes / 2,
                                           uint64_t{segment::kPageBytes}));

TEST(RegistryTrust, ForkAfterTheSegmentWasTruncatedLeavesTheChildRunningUnmetered) {
  TempDir tmp;
  testing::Ready ready;
  testing::Gate truncated;
  testing::Gate done;
  pid_t pid = testing::spawn([&] {
    done.close_write();  // only the test opens it
    SegmentWriter w(tmp.path());
    Counter c = w.counter("work_total", {});
    c.add(1);
    ready.signal();
    truncated.wait();
    pid_t child = ::fork();  // copies from a segment that has lost its pages
    if (child == 0) {
      c.add(1);
      w.counter("child_total", {}).add(1);
      ready.signal();
      done.wait();
      ::_exit(w.unmetered() ? 0 : 3);
    }
    c.add(1);
    const int rc = testing::wait_exit(child);
    return rc;
  });
  ready.wait(1);
  ASSERT_EQ(::truncate(segment_of(tmp.path()).c_str(), 0), 0);
  truncated.open();
  ready.wait(1);
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(snap.stats.unmetered_writers, 2u) << "the damaged parent and its child";
  done.open();
  EXPECT_EQ(testing::wait_exit(pid), 0) << "neither died of SIGBUS";
}

// Patches `len` bytes at `offset` of a file.
void patch(const std::string& path, uint64_t offset, const void* data, size_t len) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, data, len, off_t(offset)), ssize_t(len));
  ::close(fd);
}

uint64_t record_offset(uint32_t i) {
  return segment::kRecordsOffset + uint64_t{i} * segment::kRecordBytes;
}

TEST(RegistryTrust, RecordRewrittenAfterTheFirstScrapeIsReadWhereItWasValidated) {
  TempDir tmp;
  testing::Ready ready;
  testing::Gate step;
  testing::Gate done;
  pid_t pid = testing::spawn([&] {
    SegmentWriter w(tmp.path());
    w.counter("first_total", {}).add(42);
    ready.signal();
    step.wait();
    w.counter("second_total", {}).add(7);
    ready.signal();
    done.wait();
    return 0;
  });
  ready.wait(1);
  RegistryReader reader(tmp.path());
  EXPECT_EQ(find_series(reader.snapshot(), "first_total")->counter, 42u);
  const std::string seg = segment_of(tmp.path());
  const uint32_t far = 0x7FFFFFF0;
  patch(seg, record_offset(0) + offsetof(segment::RecordHead, value_line), &far, sizeof far);
  const uint8_t kind = uint8_t(segment::SeriesKind::kHistogram);
  patch(seg, record_offset(0) + offsetof(segment::RecordHead, kind), &kind, 1);
  step.open();
  ready.wait(1);
  // The second record is rewritten before the reader ever saw it.
  patch(seg, record_offset(1) + offsetof(segment::RecordHead, value_line), &far, sizeof far);
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(find_series(snap, "first_total")->counter, 42u) << "read where it was validated";
  EXPECT_EQ(find_series(snap, "second_total"), nullptr);
  EXPECT_EQ(snap.stats.invalid_records_total, 1u);
  done.open();
  EXPECT_EQ(testing::wait_exit(pid), 0);
}

// Format 7: a record's text and bounds are read from the string area only
// where they lie inside it and agree with the record; one that points
// outside it, or at an entry of another length, is a counted skip, and the
// segment's other records are read.
TEST(RegistryTrust, ATextEntryOutsideTheStringAreaOrDisagreeingIsSkippedAndCounted) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  w.counter("a_total", {}).add(1);
  w.counter("b_total", {}).add(2);
  const int64_t bounds[] = {10, 20};
  w.histogram("h_seconds", {}, bounds, 1.0).observe(15);
  const std::string seg = w.path();
  auto head_of = [&](uint32_t i) {
    segment::RecordHead h{};
    const int fd = ::open(seg.c_str(), O_RDONLY);
    EXPECT_EQ(::pread(fd, &h, sizeof h, off_t(record_offset(i))), ssize_t(sizeof h));
    ::close(fd);
    return h;
  };
  const segment::RecordHead a = head_of(0), h = head_of(2);
  const uint64_t a_entry = segment::kStringsOffset + a.text_offset;
  const uint64_t h_entry = segment::kStringsOffset + h.text_offset;
  struct Case {
    uint64_t at;
    uint32_t bad, good;
    const char* why;
    const char* family;
  } cases[] = {
      {record_offset(0) + offsetof(segment::RecordHead, text_offset), segment::kStringBytes - 8,
       a.text_offset, "text out of range", "a_total"},
      {a_entry + offsetof(segment::TextEntry, text_bytes), a.text_bytes + 1u, a.text_bytes,
       "text length disagrees", "a_total"},
      {h_entry + offsetof(segment::TextEntry, bounds_offset), segment::kStringBytes - 8, 0,
       "bounds out of range", "h_seconds"},
  };
  // The histogram's bounds_offset as written (restored after its case).
  {
    const int fd = ::open(seg.c_str(), O_RDONLY);
    ASSERT_EQ(::pread(fd, &cases[2].good, 4, off_t(cases[2].at)), 4);
    ::close(fd);
  }
  for (const Case& c : cases) {
    patch(seg, c.at, &c.bad, sizeof c.bad);
    {
      RegistryReader reader(tmp.path());
      const Snapshot& snap = reader.snapshot();
      EXPECT_EQ(snap.stats.invalid_records_total, 1u) << c.why;
      EXPECT_EQ(find_series(snap, c.family), nullptr) << c.why;
      EXPECT_EQ(find_series(snap, "b_total")->counter, 2u) << c.why;
      ASSERT_FALSE(snap.problems.empty());
      EXPECT_NE(snap.problems[0].find(c.why), std::string::npos) << snap.problems[0];
    }
    patch(seg, c.at, &c.good, sizeof c.good);
  }
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(snap.stats.invalid_records_total, 0u);
  EXPECT_EQ(find_series(snap, "a_total")->counter, 1u);
  ASSERT_NE(find_series(snap, "h_seconds"), nullptr);
  EXPECT_EQ(find_series(snap, "h_seconds")->info->bounds, (std::vector<int64_t>{10, 20}));
}

TEST(RegistryTrust, ForkWithAHeldSlotReportsTheLimitAndActiveOnce) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  MeteredSemaphore sem(4, Component::kResourcesServer, "verifiers", "math", std::nullopt, w);
  sem.acquire();
  testing::Ready ready;
  testing::Gate gate;
  pid_t child = testing::spawn([&] {
    // The child's copy of the semaphore works on the child's own state.
    if (!sem.try_acquire() || sem.active() != 2) return 2;
    MeteredSemaphore own(2, Component::kResourcesServer, "child_only", "math", std::nullopt, w);
    own.acquire();
    ready.signal();
    gate.wait();
    return 0;
  });
  ready.wait(1);
  RegistryReader reader(tmp.path());
  const Labels labels = {{"nemo_gym_concurrency_component", "resources_server"},
                         {"nemo_gym_concurrency_limit_name", "verifiers"},
                         {"nemo_gym_server_name", "math"}};
  for (int i = 0; i < 5; ++i) {
    const Snapshot& snap = reader.snapshot();
    EXPECT_EQ(snap.stats.live_segments, 2u);
    ASSERT_NE(find_series(snap, "gym_concurrency_limit", labels), nullptr);
    EXPECT_EQ(find_series(snap, "gym_concurrency_limit", labels)->gauge, 4) << "not 8";
    EXPECT_EQ(free_slots(snap, labels), 3) << "the parent's one held slot, not the child's copy";
    EXPECT_EQ(find_series(snap, "gym_concurrency_queue_depth", labels)->gauge, 0);
    const Labels own = {{"nemo_gym_concurrency_component", "resources_server"},
                        {"nemo_gym_concurrency_limit_name", "child_only"},
                        {"nemo_gym_server_name", "math"}};
    ASSERT_NE(find_series(snap, "gym_concurrency_available", own), nullptr);
    EXPECT_EQ(free_slots(snap, own), 1) << "a limit the child made itself is the child's to report";
  }
  gate.open();
  EXPECT_EQ(testing::wait_exit(child), 0);
  sem.release();
}

TEST(RegistryTrust, LabelValuesThatAreNotUtf8AreDroppedByWritersAndSkippedByTheReader) {
  TempDir tmp;
  testing::Ready ready;
  testing::Gate gate;
  pid_t pid = testing::spawn([&] {
    SegmentWriter w(tmp.path());
    const Label bad[] = {{"server", "\xff\xfe"}};
    const Label overlong[] = {{"server", "\xc0\xaf"}};
    if (w.counter("bad_total", bad).registered()) return 2;
    if (w.counter("bad_total", overlong).registered()) return 3;
    if (w.dropped_series() != 2) return 4;
    const Label ok[] = {{"server", "m\xc3\xa4th"}};  // "mäth"
    w.counter("good_total", ok).add(1);
    const Label planted[] = {{"server", "abc"}};
    w.counter("planted_total", planted).add(1);
    ready.signal();
    gate.wait();
    return 0;
  });
  ready.wait(1);
  // Another process rewrites the planted value's first byte to 0xFF.
  const std::string seg = segment_of(tmp.path());
  std::string text(4096, '\0');  // the string area's first page
  int fd = ::open(seg.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pread(fd, text.data(), text.size(), off_t(segment::kStringsOffset)),
            ssize_t(text.size()));
  const size_t at = text.find("abc");
  ASSERT_NE(at, std::string::npos);
  const char ff = '\xff';
  ASSERT_EQ(::pwrite(fd, &ff, 1, off_t(segment::kStringsOffset + at)), 1);
  ::close(fd);
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(snap.stats.dropped_series_total, 2u);
  EXPECT_EQ(snap.stats.invalid_records_total, 1u);
  EXPECT_NE(find_series(snap, "good_total", {{"server", "m\xc3\xa4th"}}), nullptr);
  EXPECT_EQ(testing::count_family(snap, "planted_total"), 0u);
  gate.open();
  EXPECT_EQ(testing::wait_exit(pid), 0);
}

TEST(RegistryTrust, ACounterThatWrapsNeverFallsAndCountsAsAReset) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  Counter c = w.counter("planted_total", {});
  Histogram h = w.histogram("planted_size", {}, kBounds, 1.0);
  c.add(UINT64_MAX - 4);  // 2^64 - 5
  h.observe(3);
  RegistryReader reader(tmp.path());
  const SeriesSample* s = find_series(reader.snapshot(), "planted_total");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->counter, UINT64_MAX - 4);
  c.add(10);  // wraps to 5 in the segment
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(find_series(snap, "planted_total")->counter, UINT64_MAX) << "saturates, never falls";
  EXPECT_EQ(snap.stats.counter_resets_total, 1u);
  EXPECT_EQ(find_series(snap, "planted_size")->count(), 1u);
}

TEST(RegistryTrust, FoldedTotalsSurviveAReaderKilledWithSigkill) {
  TempDir tmp;
  for (int i = 0; i < 3; ++i) {
    pid_t pid = testing::spawn([&] {
      SegmentWriter w(tmp.path());
      w.counter("done_total", {}).add(1000);
      w.histogram("done_size", {}, kBounds, 1.0).observe(20);
      return 0;
    });
    ASSERT_EQ(testing::wait_exit(pid), 0);
  }
  pid_t reader_pid = testing::spawn([&] {
    RegistryReader reader(tmp.path());
    const SeriesSample* s = find_series(reader.snapshot(), "done_total");
    if (s == nullptr || s->counter != 3000) return 2;
    ::raise(SIGKILL);
    return 3;
  });
  EXPECT_EQ(testing::wait_exit(reader_pid), 128 + SIGKILL);
  EXPECT_TRUE(tmp.files().empty()) << "folded segments were removed after the totals were kept";
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  ASSERT_NE(find_series(snap, "done_total"), nullptr);
  EXPECT_EQ(find_series(snap, "done_total")->counter, 3000u);
  EXPECT_EQ(find_series(snap, "done_size")->cumulative_buckets,
            (std::vector<uint64_t>{0, 0, 0, 3, 3, 3}));
}

TEST(RegistryTrust, FoldedSegmentsStayUntilTheirTotalsAreWritten) {
  TmpfsMount fs("1m");
  if (!fs.ok()) GTEST_SKIP() << "mounting a tmpfs needs root";
  const std::string dir = fs.path();
  pid_t pid = testing::spawn([&] {
    SegmentWriter w(dir);
    w.counter("done_total", {}).add(5);
    return 0;
  });
  ASSERT_EQ(testing::wait_exit(pid), 0);
  fs.fill();
  uint64_t errors = 0;
  {
    RegistryReader reader(dir);
    const Snapshot& snap = reader.snapshot();
    EXPECT_EQ(find_series(snap, "done_total")->counter, 5u);
    errors = snap.stats.totals_write_errors_total;
    EXPECT_FALSE(segment_of(dir).empty()) << "kept: the totals could not be written";
    const Snapshot& again = reader.snapshot();
    EXPECT_EQ(find_series(again, "done_total")->counter, 5u) << "not folded twice";
  }
  EXPECT_GT(errors, 0u);
  ASSERT_EQ(::unlink((dir + "/filler").c_str()), 0);
  RegistryReader next(dir);  // a restart: the kept segment is folded again, once
  EXPECT_EQ(find_series(next.snapshot(), "done_total")->counter, 5u);
  EXPECT_TRUE(segment_of(dir).empty());
  RegistryReader third(dir);
  EXPECT_EQ(find_series(third.snapshot(), "done_total")->counter, 5u);
}

TEST(RegistryTrust, AHolderThatHasNotYetSaidWhoItIsIsWaitedForNotTakenForAnExporter) {
  // A process holds the lock file before writing its pid into it, as a
  // writer folding segments does for a moment (gym-demo starting beside an
  // exporter that was refused at start with "pid unknown"), then lets go.
  TempDir tmp;
  const std::string lock = tmp.path() + "/" + RegistryReader::kLockFile;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  // A child that takes the lock with nothing in it, says so on `ready`, and
  // holds it for 300 ms (the lock goes with the process) or for ever.
  auto silent_holder = [&](bool forever) {
    return testing::spawn([&, forever] {
      const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
      struct flock fl {};
      fl.l_type = F_WRLCK;
      fl.l_whence = SEEK_SET;
      if (fd < 0 || ::fcntl(fd, F_OFD_SETLK, &fl) != 0) return 1;
      if (::write(ready[1], "x", 1) != 1) return 2;
      if (forever) ::pause();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return 0;
    });
  };
  pid_t holder = silent_holder(false);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  std::string why;
  {
    RegistryReader reader(tmp.path());
    EXPECT_TRUE(reader.claim(&why)) << why;
    EXPECT_EQ(testing::wait_exit(holder), 0);
  }  // lets the lock go
  // One that never says who it is: refused once patience ends.
  holder = silent_holder(true);
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  RegistryReader late(tmp.path());
  EXPECT_FALSE(late.claim(&why, std::chrono::milliseconds(100)));
  EXPECT_NE(why.find("pid unknown"), std::string::npos) << why;
  ::kill(holder, SIGKILL);
  testing::wait_exit(holder);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST(RegistryTrust, OneRetiringReaderPerDirectoryTheOtherReadsOnly) {
  TempDir tmp;
  RegistryReader first(tmp.path());
  std::string why;
  ASSERT_TRUE(first.claim(&why)) << why;
  RegistryReader second(tmp.path());
  EXPECT_FALSE(second.claim(&why));
  EXPECT_NE(why.find("pid " + std::to_string(::getpid())), std::string::npos) << why;
  pid_t pid = testing::spawn([&] {
    SegmentWriter w(tmp.path());
    w.counter("done_total", {}).add(9);
    return 0;
  });
  ASSERT_EQ(testing::wait_exit(pid), 0);
  const Snapshot& ro = second.snapshot();
  EXPECT_FALSE(ro.stats.retiring);
  EXPECT_EQ(find_series(ro, "done_total")->counter, 9u) << "a dead writer not yet folded";
  EXPECT_EQ(tmp.files().size(), 1u) << "the read-only reader removed nothing";
  const Snapshot& rw = first.snapshot();
  EXPECT_TRUE(rw.stats.retiring);
  EXPECT_EQ(find_series(rw, "done_total")->counter, 9u);
  EXPECT_TRUE(tmp.files().empty());
  EXPECT_EQ(find_series(second.snapshot(), "done_total")->counter, 9u)
      << "from the retiring reader's totals, not counted twice";
}

// The value word `from` in a segment's values, rewritten to `to`; false when
// it is not there.
bool rewrite_value(const std::string& path, uint64_t from, uint64_t to) {
  int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) return false;
  void* map = ::mmap(nullptr, segment::kTotalBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return false;
  auto* words = static_cast<uint64_t*>(map);
  bool found = false;
  for (uint64_t i = segment::kValuesOffset / 8; i < segment::kTotalBytes / 8 && !found; ++i)
    if (words[i] == from) found = (words[i] = to, true);
  ::munmap(map, segment::kTotalBytes);
  return found;
}

bool mapped(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.ends_with(path)) return true;
  return false;
}

TEST(RegistryTrust, AReadOnlyReaderReadsADeadWritersSegmentOnceAndCountsItOnce) {
  TempDir tmp;
  constexpr uint64_t kDone = 0x5EED5EED;
  pid_t pid = testing::spawn([&] {
    SegmentWriter w(tmp.path());
    w.counter("done_total", {}).add(kDone);
    return 0;
  });
  ASSERT_EQ(testing::wait_exit(pid), 0);
  const std::string seg = segment_of(tmp.path());
  RegistryReader ro(tmp.path(),
                    ReaderOptions{.trusted_uids = {}, .mode = ReaderOptions::Mode::kReadOnly});
  EXPECT_EQ(find_series(ro.snapshot(), "done_total")->counter, kDone);
  EXPECT_FALSE(mapped(seg)) << "a dead owner's segment is let go of once it is folded";
  // Its values cannot change any more: what a same-user process writes into
  // it afterwards is not read (an earlier reader read every dead segment at
  // every snapshot, a cost that grew with the segments no exporter removed).
  ASSERT_TRUE(rewrite_value(seg, kDone, kDone + 100));
  const Snapshot& again = ro.snapshot();
  EXPECT_EQ(find_series(again, "done_total")->counter, kDone);
  EXPECT_EQ(tmp.files().size(), 1u) << "the read-only reader removed nothing";
  struct stat st {};
  ASSERT_EQ(::stat(seg.c_str(), &st), 0);
  EXPECT_GE(again.stats.registry_bytes, uint64_t(st.st_blocks) * 512)
      << "a segment not read again still takes the directory's memory";
  ASSERT_TRUE(rewrite_value(seg, kDone + 100, kDone));
  // The holder folds it into its totals and removes it: still counted once.
  RegistryReader holder(tmp.path());
  EXPECT_EQ(find_series(holder.snapshot(), "done_total")->counter, kDone);
  EXPECT_TRUE(tmp.files().empty());
  EXPECT_EQ(find_series(ro.snapshot(), "done_total")->counter, kDone);
  // A holder's totals that do not hold it yet: it is read again beside them.
  pid = testing::spawn([&] {
    SegmentWriter w(tmp.path());
    w.counter("done_total", {}).add(1);
    return 0;
  });
  ASSERT_EQ(testing::wait_exit(pid), 0);
  EXPECT_EQ(find_series(ro.snapshot(), "done_total")->counter, kDone + 1);
  EXPECT_EQ(find_series(ro.snapshot(), "done_total")->counter, kDone + 1);
  EXPECT_EQ(find_series(holder.snapshot(), "done_total")->counter, kDone + 1);
  EXPECT_EQ(find_series(ro.snapshot(), "done_total")->counter, kDone + 1);
}

TEST(RegistryTrust, SeriesOfGoneWritersExpireAfterTheTtlAndMaxSeriesBoundsTheRest) {
  TempDir tmp;
  constexpr int kWriters = 20;
  constexpr int kSeries = 1000;  // 20,000 label sets
  for (int p = 0; p < kWriters; ++p) {
    pid_t pid = testing::spawn([&] {
      SegmentWriter w(tmp.path());
      for (int i = 0; i < kSeries; ++i)
        counter_with(w, "churn_total", "id", std::to_string(p * kSeries + i)).add(1);
      return w.dropped_series() == 0 ? 0 : 2;
    });
    ASSERT_EQ(testing::wait_exit(pid), 0);
  }
  {
    ReaderOptions capped;
    capped.mode = ReaderOptions::Mode::kReadOnly;
    capped.max_series = 500;
    RegistryReader reader(tmp.path(), capped);
    const Snapshot& snap = reader.snapshot();
    EXPECT_EQ(snap.stats.series, 500u);
    EXPECT_EQ(snap.stats.series_over_limit_total, uint64_t{kWriters * kSeries - 500});
    EXPECT_EQ(testing::count_family(snap, "churn_total"), 500u);
  }
  ReaderOptions options;
  options.retired_series_ttl = 300ms;
  RegistryReader reader(tmp.path(), options);
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(snap.stats.series, uint64_t{kWriters * kSeries});
  // Folded by the writers that came after them (no exporter ran) or now.
  EXPECT_LE(snap.stats.retired_segments_total, uint64_t{kWriters});
  EXPECT_TRUE(tmp.files().empty());
  const uint64_t epoch = snap.series_epoch;
  std::this_thread::sleep_for(400ms);
  const Snapshot& later = reader.snapshot();
  EXPECT_NE(later.series_epoch, epoch) << "holders of SeriesInfo pointers must rebuild";
  EXPECT_EQ(later.stats.series, 0u);
  EXPECT_EQ(later.stats.expired_series_total, uint64_t{kWriters * kSeries});
  EXPECT_TRUE(later.series.empty());
  RegistryReader restarted(tmp.path(), options);
  EXPECT_EQ(restarted.snapshot().stats.series, 0u) << "expired series are gone from the totals";
}

// A writer that counted early_total 3 and exited, folded as the next
// writer would (no exporter running).
void fold_one_exited_writer(const TempDir& tmp) {
  pid_t pid = testing::spawn([&] {
    SegmentWriter w(tmp.path());
    w.counter("early_total", {}).add(3);
    return 0;
  });
  ASSERT_EQ(testing::wait_exit(pid), 0);
  EXPECT_EQ(RegistryReader::fold_exited(tmp.path()), 1u);
}

// Writers fold exited segments while no exporter runs; an exporter started
// long after serves what they counted for its TTL from its own start.
TEST(RegistryTrust, SeriesTheWritersFoldedAreServedForTheTtlFromTheReadersStart) {
  TempDir tmp;
  fold_one_exited_writer(tmp);
  EXPECT_TRUE(tmp.files().empty());
  std::this_thread::sleep_for(400ms);  // longer ago than the TTL
  ReaderOptions options;
  options.retired_series_ttl = 300ms;
  auto reader = std::make_unique<RegistryReader>(tmp.path(), options);
  ASSERT_NE(find_series(reader->snapshot(), "early_total"), nullptr) << "served once it starts";
  EXPECT_EQ(find_series(reader->snapshot(), "early_total")->counter, 3u);
  reader.reset();  // restarted within the TTL: it began at the first start
  std::this_thread::sleep_for(400ms);
  RegistryReader again(tmp.path(), options);
  EXPECT_EQ(find_series(again.snapshot(), "early_total"), nullptr) << "then its TTL ran out";
}

// (The rest of the TTL's course, served then expired within one reader.)
TEST(RegistryTrust, ASeriesTheWritersFoldedExpiresOnceServedForTheTtl) {
  TempDir tmp;
  fold_one_exited_writer(tmp);
  ReaderOptions options;
  options.retired_series_ttl = 300ms;
  RegistryReader reader(tmp.path(), options);
  ASSERT_NE(find_series(reader.snapshot(), "early_total"), nullptr);
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(find_series(reader.snapshot(), "early_total"), nullptr) << "then its TTL runs";
}

// The format floor (docs/registry.md): formats 7 and 8 are read; a segment
// of an older format (written only by builds before the floor) or a newer
// one is refused, counted once and logged, and its writer reads as none.
TEST(RegistryTrust, FormatsBelowTheFloorAndANewerOneAreRefusedTheOldestKeptIsRead) {
  TempDir tmp;
  testing::Ready ready;
  testing::Gate gate;
  pid_t pid = testing::spawn([&] {
    SegmentWriter w(tmp.path());
    w.counter("old_total", {}).add(4);
    ready.signal();
    gate.wait();
    return 0;
  });
  ready.wait(1);
  const std::string seg = segment_of(tmp.path());
  const uint32_t oldest = segment::kMinFormatVersion;
  ASSERT_EQ(oldest, 7u);
  patch(seg, offsetof(segment::Header, format_version), &oldest, sizeof oldest);
  {
    RegistryReader reader(tmp.path());
    const Snapshot& snap = reader.snapshot();
    EXPECT_EQ(snap.stats.live_segments_by_version[oldest], 1u);
    EXPECT_EQ(snap.stats.live_segments_by_version[segment::kFormatVersion], 0u);
    ASSERT_NE(find_series(snap, "old_total"), nullptr);
    EXPECT_EQ(find_series(snap, "old_total")->counter, 4u);
  }
  for (const uint32_t refused : {1u, 6u, segment::kFormatVersion + 1}) {
    patch(seg, offsetof(segment::Header, format_version), &refused, sizeof refused);
    RegistryReader reader(
        tmp.path(), ReaderOptions{.trusted_uids = {}, .mode = ReaderOptions::Mode::kReadOnly});
    for (int scrape = 0; scrape < 2; ++scrape) {
      const Snapshot& snap = reader.snapshot();
      EXPECT_EQ(snap.stats.live_segments, 0u) << refused;
      EXPECT_EQ(snap.stats.rejected_files_total, 1u) << "counted once: " << refused;
      EXPECT_EQ(find_series(snap, "old_total"), nullptr);
      if (scrape == 1) {
        EXPECT_TRUE(snap.problems.empty()) << "logged once";
        continue;
      }
      ASSERT_EQ(snap.problems.size(), 1u);
      EXPECT_NE(snap.problems[0].find("unsupported format version " + std::to_string(refused) +
                                      " (this reader reads 7 to 8)"),
                std::string::npos)
          << snap.problems[0];
    }
  }
  gate.open();
  EXPECT_EQ(testing::wait_exit(pid), 0);
}

TEST(RegistryTrust, EachBadFileOrRecordIsLoggedOnceThenCounted) {
  TempDir tmp;
  testing::Ready ready;
  testing::Gate gate;
  pid_t pid = testing::spawn([&] {
    SegmentWriter w(tmp.path());
    for (int i = 0; i < 300; ++i) counter_with(w, "many_total", "i", std::to_string(i)).add(1);
    ready.signal();
    gate.wait();
    return 0;
  });
  ready.wait(1);
  const std::string seg = segment_of(tmp.path());
  const uint8_t bad_kind = 9;
  for (uint32_t i = 0; i < 300; ++i)
    patch(seg, record_offset(i) + offsetof(segment::RecordHead, kind), &bad_kind, 1);
  // A socket where a segment should be: it cannot be opened at all.
  int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock_path = tmp.sub("gym-1-1-1.seg");
  std::strncpy(addr.sun_path, sock_path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  RegistryReader reader(tmp.path());
  const Snapshot& first = reader.snapshot();
  EXPECT_EQ(first.stats.invalid_records_total, 300u);
  EXPECT_EQ(first.stats.read_errors_total, 1u);
  EXPECT_EQ(first.problems.size(), 3u) << "one record, a summary of the rest, one file";
  for (int i = 0; i < 3; ++i) {
    const Snapshot& snap = reader.snapshot();
    EXPECT_TRUE(snap.problems.empty());
    EXPECT_EQ(snap.stats.read_errors_total, uint64_t(2 + i)) << "counted, not logged";
  }
  ::close(sock);
  gate.open();
  EXPECT_EQ(testing::wait_exit(pid), 0);
}

}  // namespace
}  // namespace gym
