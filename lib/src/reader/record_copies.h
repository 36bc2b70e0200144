// The registry reader's copies of a segment's new records: read with pread
// (a hole or a truncated file reads as zeros or short, never faults), so
// that nothing is read from shared memory twice.
//
// Thread-safety: one reader's, on its thread.
#pragma once

#include <cstdint>
#include <vector>

#include "gym/segment_format.h"

namespace gym::reader_internal {

// Records [first, count) of the segment open as `fd`: their heads in one
// read, and the string area up to the furthest text entry they point to in
// another (into `strings`, a buffer kept by the caller).
class RecordCopies {
 public:
  struct Layout {
    int fd;
    uint64_t records_offset;
    uint64_t strings_offset;
    uint32_t string_bytes;
  };
  RecordCopies(const Layout& layout, uint32_t first, uint32_t count, std::vector<char>& strings);
  // Record i's fields (its head) into `rec`; false when it cannot be read.
  bool head(uint32_t i, segment::Record& rec) const;
  // Record i's bounds and text into `rec` (its head read already); nullptr,
  // or why they cannot be had.
  const char* text(uint32_t i, segment::Record& rec) const;

 private:
  Layout layout_;
  uint32_t first_;
  std::vector<segment::RecordHead> heads_;
  uint32_t heads_read_ = 0;
  const std::vector<char>& strings_;
  uint64_t strings_read_ = 0;
};

}  // namespace gym::reader_internal
