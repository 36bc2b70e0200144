// The reader's series table (lib/src/reader/series_table.h), built into
// this test from its source: series found by their identity's hash and
// told apart by comparing their records, also when two hashes collide.
#include "reader/series_table.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace gym::reader_internal {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

// A validated record's copy, as a writer publishes it: the family and each
// label's name and value, each ended by a NUL.
segment::Record record(segment::SeriesKind kind, const std::string& family, const Labels& labels,
                       std::vector<int64_t> bounds = {}, double divisor = 1,
                       uint16_t native_words = 0) {
  segment::Record rec{};
  rec.kind = static_cast<uint8_t>(kind);
  rec.label_count = static_cast<uint8_t>(labels.size());
  rec.bound_count = static_cast<uint8_t>(bounds.size());
  rec.unit_divisor = divisor;
  rec.native_words = native_words;
  std::copy(bounds.begin(), bounds.end(), rec.bounds);
  std::string text = family + '\0';
  for (const auto& [name, value] : labels) text += name + '\0' + value + '\0';
  std::memcpy(rec.text, text.data(), text.size());
  rec.text_bytes = static_cast<uint16_t>(text.size());
  return rec;
}

std::unique_ptr<SeriesInfo> info_of(const segment::Record& rec) {
  auto info = std::make_unique<SeriesInfo>();
  info->kind = static_cast<segment::SeriesKind>(rec.kind);
  const char* p = rec.text;
  info->family = p;
  p += info->family.size() + 1;
  std::vector<std::pair<std::string, std::string>> labels;
  for (size_t i = 0; i < rec.label_count; ++i) {
    std::string name = p;
    p += name.size() + 1;
    std::string value = p;
    p += value.size() + 1;
    labels.emplace_back(std::move(name), std::move(value));
  }
  info->labels = SeriesLabels::from(labels);
  info->bounds.assign(rec.bounds, rec.bounds + rec.bound_count);
  info->unit_divisor = rec.unit_divisor;
  info->native_words = rec.native_words;
  return info;
}

using segment::SeriesKind;

TEST(SeriesTable, ARecordIsTheSameSeriesOnlyWhenEveryPartOfItsIdentityIs) {
  const segment::Record base =
      record(SeriesKind::kHistogram, "gym_operation_duration_seconds",
             {{"operation", "verify"}, {"server_name", "math"}}, {1000, 5000}, 1e9, 0);
  const std::unique_ptr<SeriesInfo> info = info_of(base);
  EXPECT_TRUE(same_identity(*info, base));
  const segment::Record others[] = {
      record(SeriesKind::kCounter, "gym_operation_duration_seconds",
             {{"operation", "verify"}, {"server_name", "math"}}),
      record(SeriesKind::kHistogram, "gym_operation_duration_second",
             {{"operation", "verify"}, {"server_name", "math"}}, {1000, 5000}, 1e9),
      record(SeriesKind::kHistogram, "gym_operation_duration_seconds",
             {{"operation", "verify"}, {"server_nam", "math"}}, {1000, 5000}, 1e9),
      record(SeriesKind::kHistogram, "gym_operation_duration_seconds",
             {{"operation", "verify"}, {"server_name", "maths"}}, {1000, 5000}, 1e9),
      record(SeriesKind::kHistogram, "gym_operation_duration_seconds", {{"operation", "verify"}},
             {1000, 5000}, 1e9),
      record(SeriesKind::kHistogram, "gym_operation_duration_seconds",
             {{"operation", "verify"}, {"server_name", "math"}, {"zone", "a"}}, {1000, 5000}, 1e9),
      record(SeriesKind::kHistogram, "gym_operation_duration_seconds",
             {{"operation", "verify"}, {"server_name", "math"}}, {1000, 6000}, 1e9),
      record(SeriesKind::kHistogram, "gym_operation_duration_seconds",
             {{"operation", "verify"}, {"server_name", "math"}}, {1000}, 1e9),
      record(SeriesKind::kHistogram, "gym_operation_duration_seconds",
             {{"operation", "verify"}, {"server_name", "math"}}, {1000, 5000}, 1e6),
      record(SeriesKind::kHistogram, "gym_operation_duration_seconds",
             {{"operation", "verify"}, {"server_name", "math"}}, {1000, 5000}, 1e9, 185),
  };
  for (const segment::Record& other : others) {
    EXPECT_FALSE(same_identity(*info, other)) << std::string(other.text, other.text_bytes);
    EXPECT_NE(identity_hash(other, 7), identity_hash(base, 7));
  }
  // A label's value moved into its name's end: the same bytes but one
  // NUL elsewhere, another series.
  const segment::Record moved = record(SeriesKind::kCounter, "c", {{"ab", "c"}});
  const segment::Record split = record(SeriesKind::kCounter, "c", {{"a", "bc"}});
  EXPECT_FALSE(same_identity(*info_of(moved), split));
  EXPECT_NE(identity_hash(moved, 7), identity_hash(split, 7));
}

TEST(SeriesTable, TheHashDependsOnItsSeedAndOnWhereThePartsEnd) {
  const segment::Record rec = record(SeriesKind::kGauge, "gym_concurrency_limit", {{"a", "b"}});
  EXPECT_EQ(identity_hash(rec, 1), identity_hash(rec, 1));
  EXPECT_NE(identity_hash(rec, 1), identity_hash(rec, 2));
  IdentityHash one{3}, two{3};
  one.add("ab", 2);
  one.add("c", 1);
  two.add("a", 1);
  two.add("bc", 2);
  EXPECT_NE(one.h, two.h);
  // Two tables draw their seeds apart.
  EXPECT_NE(SeriesTable().seed(), SeriesTable().seed());
}

TEST(SeriesTable, SeriesWhoseHashesCollideAreFoundEachByItsOwnIdentity) {
  SeriesTable table;
  const segment::Record a = record(SeriesKind::kCounter, "gym_x_total", {{"l", "a"}});
  const segment::Record b = record(SeriesKind::kCounter, "gym_x_total", {{"l", "b"}});
  const segment::Record c = record(SeriesKind::kCounter, "gym_x_total", {{"l", "c"}});
  const auto same_as = [](const segment::Record& r) {
    return [&r](const SeriesInfo& info) { return same_identity(info, r); };
  };
  constexpr uint64_t kHash = 42;  // one hash for all: a collision forced
  EXPECT_FALSE(table.find(kHash, same_as(a)).has_value());
  const uint32_t ida = table.add(kHash, info_of(a), 1);
  const uint32_t idb = table.add(kHash, info_of(b), 1);
  EXPECT_NE(ida, idb);
  EXPECT_EQ(table.find(kHash, same_as(a)), ida);
  EXPECT_EQ(table.find(kHash, same_as(b)), idb);
  EXPECT_FALSE(table.find(kHash, same_as(c)).has_value());
  EXPECT_FALSE(table.find(kHash + 1, same_as(a)).has_value());
  // Forgetting one leaves the other; the freed id goes to the next series.
  table.forget(ida);
  EXPECT_FALSE(table.find(kHash, same_as(a)).has_value());
  EXPECT_EQ(table.find(kHash, same_as(b)), idb);
  EXPECT_EQ(table.add(kHash, info_of(c), 2), ida);
  EXPECT_EQ(table.find(kHash, same_as(c)), ida);
  EXPECT_EQ(table.find(kHash, same_as(b)), idb);
  EXPECT_EQ(table.live(), 2u);
}

}  // namespace
}  // namespace gym::reader_internal
