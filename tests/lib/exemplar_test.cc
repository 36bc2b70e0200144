// Exemplars: a histogram bucket's latest observation with a trace context,
// from the writer (lazy slots, a seqlock) through the reader (the newest of
// every process, kept after its writer exits), never torn.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "gym/metered_semaphore.h"
#include "gym/registry_reader.h"
#include "gym/resources_operation.h"
#include "gym/segment_writer.h"
#include "gym/trace_context.h"
#include "test_support.h"

namespace gym {
namespace {

using testing::find_series;
using testing::TempDir;

const int64_t kBounds[] = {1000000, 100000000};  // 1 ms, 100 ms: three buckets

// A context whose ids say `n` (every byte, never zero).
TraceContext trace_of(uint8_t n) {
  TraceContext t;
  t.trace_id.fill(n);
  t.span_id.fill(uint8_t(n ^ 0x5a));
  return t;
}

// The first series of `family` whose labels include `want`.
const SeriesSample* find_with(const Snapshot& snap, std::string_view family,
                              const std::vector<std::pair<std::string, std::string>>& want) {
  for (const auto& s : snap.series) {
    if (s.info->family != family) continue;
    bool all = true;
    for (const auto& [name, value] : want)
      all = all && std::find(s.info->labels.begin(), s.info->labels.end(),
                             SeriesLabels::value_type(name, value)) != s.info->labels.end();
    if (all) return &s;
  }
  return nullptr;
}

void sleep_a_clock_tick() {  // CLOCK_REALTIME_COARSE moves at least once
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

TEST(TraceContext, FromHexAsOpenTelemetryWritesIdsAndRefusesAnythingElse) {
  const auto t = TraceContext::from_hex("0af7651916cd43dd8448eb211c80319c", "B7AD6B7169203331");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->trace_id[0], 0x0a);
  EXPECT_EQ(t->trace_id[15], 0x9c);
  EXPECT_EQ(t->span_id[0], 0xb7);
  EXPECT_TRUE(t->valid());
  std::string hex;
  t->append_trace_hex(hex);
  t->append_span_hex(hex);
  EXPECT_EQ(hex, "0af7651916cd43dd8448eb211c80319cb7ad6b7169203331");
  EXPECT_FALSE(TraceContext::from_hex("0af7651916cd43dd8448eb211c80319", "b7ad6b7169203331"));
  EXPECT_FALSE(TraceContext::from_hex("0af7651916cd43dd8448eb211c80319g", "b7ad6b7169203331"));
  EXPECT_FALSE(TraceContext::from_hex("0af7651916cd43dd8448eb211c80319c", ""));
  EXPECT_FALSE(TraceContext::from_hex(std::string(32, '0'), "b7ad6b7169203331")->valid())
      << "an all-zero trace id is no trace";
  EXPECT_FALSE(TraceContext().valid());
}

TEST(Exemplars, AnObservationWithATraceIsItsBucketsLatestExemplarAndOthersHaveNone) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  Histogram h = w.histogram("op_seconds", {}, kBounds, 1e9);
  Histogram plain = w.histogram("plain_seconds", {}, kBounds, 1e9);
  RegistryReader reader(tmp.path());
  h.observe(5000000);
  plain.observe(5000000, TraceContext());  // no trace: no exemplar, no slots
  const SeriesSample* s = find_series(reader.snapshot(), "op_seconds");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->exemplars.empty()) << "an observation without a trace keeps none";
  h.observe(5000000, trace_of(1));  // the middle bucket
  sleep_a_clock_tick();
  h.observe(7000000, trace_of(2));    // the same bucket, later: it replaces the first
  h.observe(200000000, trace_of(3));  // +Inf
  const Snapshot& snap = reader.snapshot();
  s = find_series(snap, "op_seconds");
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->exemplars.size(), 3u);
  EXPECT_EQ(s->exemplars[0].unix_ns, 0) << "the first bucket has none";
  EXPECT_EQ(s->exemplars[1].value, 7000000);
  EXPECT_EQ(s->exemplars[1].trace.trace_id, trace_of(2).trace_id);
  EXPECT_EQ(s->exemplars[1].trace.span_id, trace_of(2).span_id);
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  EXPECT_GT(s->exemplars[1].unix_ns, now - int64_t{10} * 1000000000);
  EXPECT_LE(s->exemplars[1].unix_ns, now);
  EXPECT_EQ(s->exemplars[2].value, 200000000);
  EXPECT_EQ(s->count(), 4u) << "every observation counts, with an exemplar or not";
  const SeriesSample* p = find_series(snap, "plain_seconds");
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->exemplars.empty());
}

TEST(Exemplars, TheNewestOfEveryProcessWinsAndOutlivesItsWriter) {
  TempDir tmp;
  RegistryReader reader(tmp.path());
  testing::Ready ready;
  const pid_t child = testing::spawn([&] {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    SegmentWriter w(tmp.path());
    w.histogram("op_seconds", {}, kBounds, 1e9).observe(50000000, trace_of(7));
    ready.signal();
    for (;;) ::pause();
    return 0;
  });
  ready.wait(1);
  auto middle = [&] {
    const SeriesSample* s = find_series(reader.snapshot(), "op_seconds");
    return s != nullptr && s->exemplars.size() == 3 ? s->exemplars[1] : Exemplar{};
  };
  EXPECT_EQ(middle().trace.trace_id, trace_of(7).trace_id);
  sleep_a_clock_tick();
  SegmentWriter w(tmp.path());
  Histogram h = w.histogram("op_seconds", {}, kBounds, 1e9);
  h.observe(60000000, trace_of(8));
  EXPECT_EQ(middle().trace.trace_id, trace_of(8).trace_id) << "the newer, of another process";
  EXPECT_EQ(middle().value, 60000000);
  ::kill(child, SIGKILL);
  EXPECT_EQ(testing::wait_exit(child), 128 + SIGKILL);
  EXPECT_EQ(middle().trace.trace_id, trace_of(8).trace_id);
  // A writer that exits keeps its exemplar served until a newer one comes.
  TempDir other;
  RegistryReader reader2(other.path());
  const pid_t gone = testing::spawn([&] {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    SegmentWriter w2(other.path());
    w2.histogram("op_seconds", {}, kBounds, 1e9).observe(50000000, trace_of(9));
    ready.signal();
    for (;;) ::pause();
    return 0;
  });
  ready.wait(1);
  ASSERT_NE(find_series(reader2.snapshot(), "op_seconds"), nullptr);
  ::kill(gone, SIGKILL);
  EXPECT_EQ(testing::wait_exit(gone), 128 + SIGKILL);
  const SeriesSample* s = find_series(reader2.snapshot(), "op_seconds");
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->exemplars.size(), 3u);
  EXPECT_EQ(s->exemplars[1].trace.trace_id, trace_of(9).trace_id) << "after its writer exited";
}

TEST(Exemplars, AForkedChildKeepsItsOwnAndNeverWritesIntoItsParents) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  Histogram h = w.histogram("op_seconds", {}, kBounds, 1e9);
  h.observe(500000, trace_of(1));  // the first bucket, in the parent
  testing::Ready ready;
  const pid_t child = testing::spawn([&] {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    sleep_a_clock_tick();
    h.observe(600000, trace_of(2));  // the same bucket, newer, in the child's segment
    ready.signal();
    for (;;) ::pause();
    return 0;
  });
  ready.wait(1);
  // The parent's segment still has its own: read it alone, as the only
  // live writer, once the child is gone and its exemplar stays in a reader
  // that saw it.
  RegistryReader reader(tmp.path());
  const SeriesSample* s = find_series(reader.snapshot(), "op_seconds");
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->exemplars.size(), 3u);
  EXPECT_EQ(s->exemplars[0].trace.trace_id, trace_of(2).trace_id) << "the child's is newer";
  ::kill(child, SIGKILL);
  testing::wait_exit(child);
  // A new reader sees only the parent's segment (the child's was folded
  // and exemplars are not kept in the totals): the parent's own, untouched.
  std::filesystem::remove(std::filesystem::path(tmp.path()) / RegistryReader::kTotalsFile);
  reader.snapshot();  // retires the child's segment
  RegistryReader fresh(tmp.path());
  s = find_series(fresh.snapshot(), "op_seconds");
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->exemplars.size(), 3u);
  EXPECT_EQ(s->exemplars[0].trace.trace_id, trace_of(1).trace_id);
  EXPECT_EQ(s->exemplars[0].value, 500000);
}

// The seqlock by hand: a slot whose seq is odd (a write in progress, or a
// writer killed in the middle of one) is served by no reader and written by
// no other thread; once even again, what it holds is served.
TEST(Exemplars, ASlotBeingWrittenIsNeitherServedNorOverwritten) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  Histogram h = w.histogram("op_seconds", {}, kBounds, 1e9);
  h.observe(5000000, trace_of(1));
  const int fd = ::open(w.path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* map = ::mmap(nullptr, segment::kTotalBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto* base = static_cast<unsigned char*>(map);
  const auto* record = reinterpret_cast<const segment::RecordHead*>(base + segment::kRecordsOffset);
  ASSERT_NE(record->exemplar_line, 0u);
  ASSERT_NE(record->exemplar_line, segment::kNoExemplarLine);
  auto* slot = reinterpret_cast<segment::ExemplarSlot*>(
      base + segment::kValuesOffset + uint64_t{record->exemplar_line + 1} * segment::kLineBytes);
  ASSERT_EQ(__atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE), 2u) << "one write: 0, 1, 2";
  auto middle = [&] {
    RegistryReader reader(tmp.path());
    const SeriesSample* s = find_series(reader.snapshot(), "op_seconds");
    return s != nullptr && s->exemplars.size() == 3 ? s->exemplars[1] : Exemplar{};
  };
  EXPECT_EQ(middle().trace.trace_id, trace_of(1).trace_id);
  __atomic_store_n(&slot->seq, uint64_t{3}, __ATOMIC_RELEASE);
  EXPECT_EQ(middle().unix_ns, 0) << "odd: torn, not served";
  h.observe(6000000, trace_of(2));
  EXPECT_EQ(__atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE), 3u) << "not written over";
  EXPECT_EQ(slot->value, 5000000);
  __atomic_store_n(&slot->seq, uint64_t{4}, __ATOMIC_RELEASE);
  EXPECT_EQ(middle().trace.trace_id, trace_of(1).trace_id) << "even again: served";
  h.observe(6000000, trace_of(2));
  EXPECT_EQ(__atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE), 6u);
  EXPECT_EQ(middle().trace.trace_id, trace_of(2).trace_id);
  // A value outside its bucket (a corrupt segment) is not served either.
  __atomic_store_n(&slot->value, int64_t{1}, __ATOMIC_RELAXED);
  EXPECT_EQ(middle().unix_ns, 0);
  ::munmap(map, segment::kTotalBytes);
  ::close(fd);
}

TEST(Exemplars, TheOperationScopeAndTheSemaphoresWaitRecordTheirTrace) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  OperationMetrics metrics(w);
  MeteredSemaphore sem(1, Component::kResourcesServer, "verify", std::nullopt, std::nullopt, w);
  { ResourcesOperation op(sem, Operation::kVerify, Executor::kInline, trace_of(5), {}, metrics); }
  // A wait: the slot held by this thread while another waits for it.
  sem.acquire();
  std::thread waiter([&] {
    sem.acquire(trace_of(6));
    sem.release();
  });
  while (sem.queued() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  sem.release();
  waiter.join();
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  const SeriesSample* op =
      find_with(snap, family::kOperationDuration,
                {{std::string(label::kOutcome), "ok"}, {std::string(label::kOperation), "verify"}});
  ASSERT_NE(op, nullptr);
  bool found = false;
  for (const Exemplar& x : op->exemplars)
    found = found || (x.unix_ns != 0 && x.trace.trace_id == trace_of(5).trace_id);
  EXPECT_TRUE(found) << "the operation's duration";
  const SeriesSample* wait = find_with(snap, family::kConcurrencyWaitDuration,
                                       {{std::string(label::kWaitOutcome), "admitted"}});
  ASSERT_NE(wait, nullptr);
  found = false;
  for (const Exemplar& x : wait->exemplars)
    found = found || (x.unix_ns != 0 && x.trace.span_id == trace_of(6).span_id);
  EXPECT_TRUE(found) << "the semaphore's wait";
}

// Writers in two processes, four threads each, observe flat out with
// exemplars whose ids say their value while the reader snapshots: every
// exemplar served lies in its bucket and carries the ids written with its
// value (a torn one would mix two writes).
TEST(Exemplars, NoneIsTornWhileThreadsAndProcessesWriteFlatOut) {
  const int kScrapes = std::getenv("GYM_SANITIZE") != nullptr ? 2000 : 20000;
  TempDir tmp;
  testing::Ready ready;
  auto writer = [&] {
    return testing::spawn([&] {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      SegmentWriter w(tmp.path());
      Histogram h = w.histogram("op_seconds", {}, kBounds, 1e9);
      std::vector<std::thread> threads;
      for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
          for (uint64_t i = uint64_t(t);; i += 4) {
            const uint8_t n = uint8_t(1 + i % 200);
            // The value's bucket varies with n: 0.5 ms, 50 ms or 500 ms.
            const int64_t v = int64_t{n} * (n % 3 == 0 ? 2500 : n % 3 == 1 ? 250000 : 2500000);
            h.observe(v, trace_of(n));
            if (i == uint64_t(t) && t == 0) ready.signal();
          }
        });
      for (auto& th : threads) th.join();
      return 0;
    });
  };
  const pid_t a = writer();
  const pid_t b = writer();
  struct Stop {
    pid_t pid;
    ~Stop() {
      ::kill(pid, SIGKILL);
      testing::wait_exit(pid);
    }
  } stop_a{a}, stop_b{b};
  ready.wait(2);
  RegistryReader reader(tmp.path());
  int checked = 0;
  for (int scrape = 0; scrape < kScrapes; ++scrape) {
    const SeriesSample* s = find_series(reader.snapshot(), "op_seconds");
    ASSERT_NE(s, nullptr);
    for (size_t b = 0; b < s->exemplars.size(); ++b) {
      const Exemplar& x = s->exemplars[b];
      if (x.unix_ns == 0) continue;
      ++checked;
      if (b > 0) {
        ASSERT_GT(x.value, kBounds[b - 1]) << "bucket " << b;
      }
      if (b < 2) {
        ASSERT_LE(x.value, kBounds[b]) << "bucket " << b;
      }
      const uint8_t n = x.trace.trace_id[0];
      ASSERT_EQ(x.trace.trace_id, trace_of(n).trace_id) << "a torn trace id";
      ASSERT_EQ(x.trace.span_id, trace_of(n).span_id) << "a span id of another write";
      ASSERT_EQ(x.value, int64_t{n} * (n % 3 == 0   ? 2500
                                       : n % 3 == 1 ? 250000
                                                    : 2500000))
          << "a value of another write";
    }
  }
  EXPECT_GT(checked, 1000);
}

}  // namespace
}  // namespace gym
