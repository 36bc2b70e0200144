// What the writer's files (writer/*.cc) share: where a segment's header,
// records and value lines are in its mapping.
//
// Thread-safety: pure functions; the caller holds what it writes.
#pragma once

#include <cstdint>

#include "gym/segment_format.h"

namespace gym::writer_internal {

using segment::Header;
using segment::RecordHead;
using segment::SeriesKind;

inline Header* header_of(unsigned char* base) {
  return reinterpret_cast<Header*>(base);
}
inline RecordHead* record_of(unsigned char* base, uint32_t i) {
  return reinterpret_cast<RecordHead*>(base + segment::kRecordsOffset +
                                       uint64_t{i} * segment::kRecordBytes);
}
inline unsigned char* string_at(unsigned char* base, uint32_t offset) {
  return base + segment::kStringsOffset + offset;
}
inline unsigned char* line_of(unsigned char* base, uint32_t line) {
  return base + segment::kValuesOffset + uint64_t{line} * segment::kLineBytes;
}

// Zeroes a gauge's value or an ages record's words in progress (word by
// word, atomically: a handle being moved may still write them). An ages
// record's lanes, its count of beginnings, are a counter: they stay, for a
// reader to fold however late it comes, and go on counting when the record
// is reused for the same series.
inline void zero_values(RecordHead* r, unsigned char* base) {
  const bool ages = r->kind == static_cast<uint8_t>(SeriesKind::kAges);
  const uint32_t words = ages
                             ? segment::kAgeFirstLane
                             : segment::value_lines_for(static_cast<SeriesKind>(r->kind), 0, 1, 0) *
                                   segment::kLineBytes / 8;
  auto* w = reinterpret_cast<int64_t*>(line_of(base, r->value_line));
  for (uint32_t i = 0; i < words; ++i) segment::store_relaxed(&w[i], int64_t{0});
}

}  // namespace gym::writer_internal
