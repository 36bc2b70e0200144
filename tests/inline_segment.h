// A segment of the current format (8: records of 32 bytes pointing into a
// string area) rewritten in the layout of formats 1 to 6 (records of 1 KiB
// with their bounds and text inline, the values right after them), labelled
// version 6: what a writer of an older release makes. For the tests and the
// segment reader's fuzz target, so that older layouts stay read. Values are
// copied as they are: a histogram with native buckets (a joint array in
// format 8) reads as other numbers in format 6, which a test that needs them
// writes by hand (native_histogram_test.cc).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gym/segment_format.h"

namespace gym::testing {

// The bytes of `v7` (a whole segment file of the current format) in the inline layout; empty when
// they are not a segment of the current format.
inline std::vector<unsigned char> inline_layout(const std::vector<unsigned char>& v7) {
  namespace seg = gym::segment;
  if (v7.size() < seg::kTotalBytes) return {};
  seg::Header h;
  std::memcpy(&h, v7.data(), sizeof h);
  if (h.format_version != seg::kFormatVersion) return {};
  std::vector<unsigned char> out(seg::kInlineTotalBytes, 0);
  const uint32_t count = std::min(h.record_count, seg::kMaxRecords);
  h.format_version = 6;
  h.record_bytes = seg::kInlineRecordBytes;
  h.records_offset = seg::kInlineRecordsOffset;
  h.strings_offset = 0;
  h.string_bytes = 0;
  h.values_offset = seg::kInlineValuesOffset;
  h.total_bytes = seg::kInlineTotalBytes;
  std::memcpy(out.data(), &h, sizeof h);  // the rest of its page: records, not copied
  const unsigned char* strings = v7.data() + seg::kStringsOffset;
  for (uint32_t i = 0; i < count; ++i) {
    seg::RecordHead head;
    std::memcpy(&head, v7.data() + seg::kRecordsOffset + uint64_t{i} * seg::kRecordBytes,
                sizeof head);
    seg::Record r{};
    std::memcpy(&r, &head, sizeof head);
    r.text_offset = 0;
    seg::TextEntry entry{};
    if (head.text_offset + sizeof entry + head.text_bytes <= seg::kStringBytes &&
        head.text_bytes <= seg::kTextBytes) {
      std::memcpy(&entry, strings + head.text_offset, sizeof entry);
      std::memcpy(r.text, strings + head.text_offset + sizeof entry, head.text_bytes);
    }
    if (head.bound_count <= seg::kMaxBounds &&
        entry.bounds_offset + head.bound_count * 8u <= seg::kStringBytes)
      std::memcpy(r.bounds, strings + entry.bounds_offset, head.bound_count * 8u);
    std::memcpy(out.data() + seg::kInlineRecordsOffset + uint64_t{i} * seg::kInlineRecordBytes, &r,
                sizeof r);
  }
  std::memcpy(out.data() + seg::kInlineValuesOffset, v7.data() + seg::kValuesOffset,
              uint64_t{seg::kValueLines} * seg::kLineBytes);
  return out;
}

// The segment file at `path` rewritten so, in place (its inode, and so its
// owner's lock, kept). Its writer must not register or observe afterwards:
// its mapping still has the current layout.
inline bool rewrite_inline(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  std::vector<unsigned char> v7(gym::segment::kTotalBytes);
  bool ok = ::pread(fd, v7.data(), v7.size(), 0) == ssize_t(v7.size());
  const std::vector<unsigned char> out = ok ? inline_layout(v7) : std::vector<unsigned char>{};
  ok = !out.empty() && ::pwrite(fd, out.data(), out.size(), 0) == ssize_t(out.size()) &&
       ::ftruncate(fd, off_t(out.size())) == 0;
  ::close(fd);
  return ok;
}

}  // namespace gym::testing
