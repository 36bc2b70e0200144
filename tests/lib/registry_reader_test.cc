#include "gym/registry_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "../lib/src/common/process_identity.h"
#include "gym/segment_writer.h"
#include "test_support.h"

namespace gym {
namespace {

using testing::find_series;
using testing::TempDir;
using Labels = std::vector<std::pair<std::string, std::string>>;

// A header as a writer would make it, for hand-made files.
segment::Header valid_header() {
  segment::Header h{};
  h.magic = segment::magic_word();
  h.format_version = segment::kFormatVersion;
  h.header_bytes = segment::kHeaderBytes;
  h.record_bytes = segment::kRecordBytes;
  h.max_records = segment::kMaxRecords;
  h.line_bytes = segment::kLineBytes;
  h.value_lines = segment::kValueLines;
  h.records_offset = segment::kRecordsOffset;
  h.strings_offset = segment::kStringsOffset;
  h.string_bytes = segment::kStringBytes;
  h.values_offset = segment::kValuesOffset;
  h.total_bytes = segment::kTotalBytes;
  h.owner_pid = 1;
  return h;
}

void write_file(const std::string& path, const void* data, size_t size, uint64_t total) {
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, data, size, 0), static_cast<ssize_t>(size));
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(total)), 0);
  ::close(fd);
}

TEST(RegistryReader, InvalidFilesAreSkippedAndCountedOnceEach) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  writer.counter("good_total", {}).add(4);

  std::ofstream(tmp.sub("notes.txt")) << "not a segment";
  std::vector<char> garbage(8192);
  std::mt19937 rng(7);
  for (char& c : garbage) c = static_cast<char>(rng());
  write_file(tmp.sub("gym-garbage.seg"), garbage.data(), garbage.size(), garbage.size());
  write_file(tmp.sub("gym-short.seg"), garbage.data(), 100, 100);
  write_file(tmp.sub("gym-empty.seg"), garbage.data(), 0, 0);
  segment::Header h = valid_header();
  h.format_version = 99;
  write_file(tmp.sub("gym-version.seg"), &h, sizeof h, segment::kTotalBytes);
  h = valid_header();
  h.total_bytes = uint64_t{1} << 40;
  write_file(tmp.sub("gym-layout.seg"), &h, sizeof h, segment::kTotalBytes);
  h = valid_header();
  h.max_records = 0xffffffff;  // offsets that do not add up
  write_file(tmp.sub("gym-records.seg"), &h, sizeof h, segment::kTotalBytes);
  h = valid_header();
  write_file(tmp.sub("gym-cut.seg"), &h, sizeof h, 8192);  // shorter than its layout
  ASSERT_EQ(::mkfifo(tmp.sub("gym-fifo.seg").c_str(), 0600), 0);
  ASSERT_EQ(::mkdir(tmp.sub("gym-dir.seg").c_str(), 0700), 0);
  ASSERT_EQ(::symlink(writer.path().c_str(), tmp.sub("gym-link.seg").c_str()), 0);

  RegistryReader reader(tmp.path());
  for (int round = 0; round < 3; ++round) {
    const Snapshot& snap = reader.snapshot();
    EXPECT_EQ(snap.stats.rejected_files_total, 11u);
    EXPECT_EQ(snap.problems.size(), round == 0 ? 11u : 0u) << "each problem is reported once";
    EXPECT_EQ(snap.stats.live_segments, 1u);
    ASSERT_NE(find_series(snap, "good_total"), nullptr);
    EXPECT_EQ(find_series(snap, "good_total")->counter, 4u);
  }
  // Foreign files are not the reader's to remove.
  EXPECT_TRUE(std::filesystem::exists(tmp.sub("notes.txt")));
  EXPECT_TRUE(std::filesystem::exists(tmp.sub("gym-fifo.seg")));

  // A new bad file under an old name is a new file: counted again.
  std::filesystem::remove(tmp.sub("gym-short.seg"));
  write_file(tmp.sub("gym-short.seg"), garbage.data(), 10, 10);
  EXPECT_EQ(reader.snapshot().stats.rejected_files_total, 12u);
}

TEST(RegistryReader, SegmentWithGarbageRecordsIsReadWithinItsBounds) {
  TempDir tmp;
  std::vector<unsigned char> file(segment::kTotalBytes);
  std::mt19937 rng(11);
  for (auto& b : file) b = static_cast<unsigned char>(rng());
  segment::Header h = valid_header();
  h.record_count = 0xffffffff;  // more than max_records: clamped
  std::memcpy(file.data(), &h, sizeof h);
  for (uint32_t i = 0; i < segment::kMaxRecords; ++i) {
    auto* r = reinterpret_cast<segment::RecordHead*>(file.data() + segment::kRecordsOffset +
                                                     uint64_t{i} * segment::kRecordBytes);
    r->state = segment::kRecordLive;
  }
  write_file(tmp.sub("gym-1-1-1.seg"), file.data(), file.size(), file.size());
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  // Nobody holds its lock: it is retired (and parsed while being folded).
  EXPECT_EQ(snap.stats.retired_segments_total, 1u);
  EXPECT_EQ(snap.stats.invalid_records_total, segment::kMaxRecords);
  EXPECT_TRUE(snap.series.empty());
  EXPECT_TRUE(tmp.files().empty());
}

TEST(RegistryReader, CorruptRecordInALiveSegmentIsSkippedAndCountedOnce) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  writer.counter("first_total", {}).add(1);
  writer.counter("second_total", {}).add(2);
  {
    int fd = ::open(writer.path().c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    uint8_t too_many_labels = 200;
    ASSERT_EQ(::pwrite(fd, &too_many_labels, 1,
                       segment::kRecordsOffset + offsetof(segment::RecordHead, label_count)),
              1);
    ::close(fd);
  }
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(snap.stats.invalid_records_total, 1u);
  EXPECT_EQ(find_series(snap, "first_total"), nullptr);
  ASSERT_NE(find_series(snap, "second_total"), nullptr);
  EXPECT_EQ(reader.snapshot().stats.invalid_records_total, 1u);
}

TEST(RegistryReader, SeriesOfOneFamilyWithAnotherKindIsRejected) {
  TempDir tmp;
  SegmentWriter a(tmp.path());
  SegmentWriter b(tmp.path());
  a.counter("mixed", {}).add(1);
  Gauge g = b.gauge("mixed", {});
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(testing::count_family(snap, "mixed"), 1u);
  EXPECT_EQ(snap.stats.invalid_records_total, 1u);
}

TEST(RegistryReader, DeadOwnerKeepsCountersDropsGaugesAndLosesItsFile) {
  TempDir tmp;
  pid_t pid = testing::spawn([&] {
    SegmentWriter writer(tmp.path());
    writer.counter("done_total", {}).add(3);
    const int64_t bounds[] = {5};
    writer.histogram("h", {}, bounds, 1.0).observe(7);
    Gauge g = writer.gauge("g", {});
    g.set(9);
    std::fflush(nullptr);
    ::_exit(0);  // no destructors: as if killed
    return 0;
  });
  ASSERT_EQ(testing::wait_exit(pid), 0);
  ASSERT_EQ(tmp.files().size(), 1u);
  RegistryReader reader(tmp.path());
  for (int i = 0; i < 2; ++i) {
    const Snapshot& snap = reader.snapshot();
    EXPECT_EQ(snap.stats.live_segments, 0u);
    EXPECT_EQ(snap.stats.retired_segments_total, 1u);
    ASSERT_NE(find_series(snap, "done_total"), nullptr);
    EXPECT_EQ(find_series(snap, "done_total")->counter, 3u);
    ASSERT_NE(find_series(snap, "h"), nullptr);
    EXPECT_EQ(find_series(snap, "h")->cumulative_buckets, (std::vector<uint64_t>{0, 1}));
    EXPECT_EQ(find_series(snap, "g"), nullptr);
    EXPECT_TRUE(tmp.files().empty());
  }
}

TEST(RegistryReader, DeadOwnerWhosePidNowBelongsToAnotherProcessIsRetired) {
  TempDir tmp;
  testing::Ready ready;
  pid_t writer_pid = testing::spawn([&] {
    SegmentWriter writer(tmp.path());
    writer.counter("before_reuse_total", {}).add(6);
    return 0;
  });
  ASSERT_EQ(testing::wait_exit(writer_pid), 0);
  ::usleep(30000);  // a later clock tick, so that start times differ too

  // Make the kernel hand the dead writer's pid to a new process.
  testing::Gate gate;
  const pid_t reused = testing::spawn_with_pid(writer_pid, gate);
  if (reused != writer_pid) GTEST_SKIP() << "cannot steer pid allocation here (needs root)";

  // Both ways of deciding liveness call the owner gone: no lock is held, and
  // the pid's start time is not the owner's.
  auto segment_file = tmp.sub(tmp.files().at(0));
  segment::Header h{};
  int fd = ::open(segment_file.c_str(), O_RDONLY);
  ASSERT_EQ(::pread(fd, &h, sizeof h, 0), static_cast<ssize_t>(sizeof h));
  ::close(fd);
  EXPECT_EQ(h.owner_pid, reused);
  EXPECT_FALSE(detail::process_matches(h.owner_pid, h.owner_start_ticks));

  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  EXPECT_EQ(snap.stats.live_segments, 0u);
  EXPECT_EQ(snap.stats.retired_segments_total, 1u);
  ASSERT_NE(find_series(snap, "before_reuse_total"), nullptr);
  EXPECT_EQ(find_series(snap, "before_reuse_total")->counter, 6u);
  EXPECT_TRUE(tmp.files().empty());
  gate.open();
  testing::wait_exit(reused);
}

TEST(RegistryReader, RegistrationRacingASnapshotNeverShowsAHalfRegisteredSeries) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  std::atomic<bool> done{false};
  std::thread registrar([&] {
    for (int i = 0; i < 1000; ++i) {
      std::string n = std::to_string(i);
      std::string check = std::to_string(i * 7);
      Label labels[] = {{"n", n}, {"check", check}};
      writer.counter("raced_total", labels).add(uint64_t(i));
    }
    done = true;
  });
  RegistryReader reader(tmp.path());
  size_t seen = 0;
  do {
    const Snapshot& snap = reader.snapshot();
    seen = 0;
    for (const SeriesSample& s : snap.series) {
      ASSERT_EQ(s.info->family, "raced_total");
      ASSERT_EQ(s.info->labels.size(), 2u);
      ASSERT_EQ(s.info->labels[0].first, "check");
      const int n = std::stoi(std::string(s.info->labels[1].second));
      ASSERT_EQ(s.info->labels[0].second, std::to_string(n * 7));
      ASSERT_TRUE(s.counter == 0 || s.counter == uint64_t(n));
      ++seen;
    }
  } while (!done.load());
  registrar.join();
  EXPECT_EQ(testing::count_family(reader.snapshot(), "raced_total"), 1000u);
}

TEST(RegistryReader, SegmentsOfUntrustedUsersAreSkippedAndCounted) {
  TempDir tmp;
  SegmentWriter writer(tmp.path());
  writer.counter("mine_total", {}).add(1);
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to another user needs root";
  ASSERT_EQ(::chown(writer.path().c_str(), 4242, 4242), 0);
  RegistryReader by_default(tmp.path());
  const Snapshot& snap = by_default.snapshot();
  EXPECT_EQ(snap.stats.rejected_files_total, 1u);
  EXPECT_EQ(find_series(snap, "mine_total"), nullptr);
  ASSERT_EQ(snap.problems.size(), 1u);
  EXPECT_NE(snap.problems[0].find("untrusted user 4242"), std::string::npos);
  // Trusted by configuration: read.
  RegistryReader trusting(tmp.path(), ReaderOptions{.trusted_uids = {0, 4242}});
  EXPECT_NE(find_series(trusting.snapshot(), "mine_total"), nullptr);
}

TEST(RegistryReader, MissingDirectoryIsReportedNotFatal) {
  TempDir tmp;
  RegistryReader reader(tmp.sub("absent"));
  const Snapshot& snap = reader.snapshot();
  EXPECT_NE(snap.directory_error.find("absent"), std::string::npos);
  EXPECT_TRUE(snap.series.empty());
  // It appears later: read from then on.
  SegmentWriter writer(tmp.sub("absent"));
  writer.counter("late_total", {}).add(1);
  EXPECT_TRUE(reader.snapshot().directory_error.empty());
  EXPECT_NE(find_series(reader.snapshot(), "late_total"), nullptr);
}

TEST(ProcessIdentity, StartTicksAreParsedAfterTheLastParenthesis) {
  const std::string stat =
      "42 (a) b (c) d) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10";
  EXPECT_EQ(detail::parse_stat_start_ticks(stat), 123456u);
  EXPECT_EQ(detail::parse_stat_start_ticks("42 (x) S 1"), std::nullopt);
  EXPECT_EQ(detail::parse_stat_start_ticks("garbage"), std::nullopt);
  EXPECT_TRUE(detail::process_matches(::getpid(), *detail::process_start_ticks(::getpid())));
  EXPECT_FALSE(detail::process_matches(::getpid(), 1 + *detail::process_start_ticks(::getpid())));
}

}  // namespace
}  // namespace gym
