#include "reader/record_copies.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace gym::reader_internal {

using segment::Record;
using segment::RecordHead;

RecordCopies::RecordCopies(const Layout& layout, uint32_t first, uint32_t count,
                           std::vector<char>& strings)
    : layout_(layout), first_(first), strings_(strings) {
  if (count <= first) return;
  heads_.resize(count - first);
  const ssize_t got =
      ::pread(layout_.fd, heads_.data(), heads_.size() * sizeof(RecordHead),
              static_cast<off_t>(layout_.records_offset + uint64_t{first} * sizeof(RecordHead)));
  heads_read_ = got > 0 ? static_cast<uint32_t>(size_t(got) / sizeof(RecordHead)) : 0;
  // The furthest end of a text entry these records name, within the area.
  uint64_t extent = 0;
  for (uint32_t i = 0; i < heads_read_; ++i) {
    const uint64_t end =
        uint64_t{heads_[i].text_offset} + sizeof(segment::TextEntry) + heads_[i].text_bytes;
    if (end <= layout_.string_bytes) extent = std::max(extent, end);
  }
  if (strings.size() < extent) strings.resize(extent);
  const ssize_t read = extent == 0 ? 0
                                   : ::pread(layout_.fd, strings.data(), extent,
                                             static_cast<off_t>(layout_.strings_offset));
  strings_read_ = read > 0 ? uint64_t(read) : 0;
}

bool RecordCopies::head(uint32_t i, Record& rec) const {
  if (i - first_ >= heads_read_) return false;
  std::memcpy(&rec, &heads_[i - first_], sizeof(RecordHead));
  return true;
}

const char* RecordCopies::text(uint32_t i, Record& rec) const {
  // Lengths over the limits are the record's shape's to report.
  if (rec.text_bytes > segment::kTextBytes || rec.bound_count > segment::kMaxBounds) return nullptr;
  const RecordHead& h = heads_[i - first_];
  segment::TextEntry entry{};
  const uint64_t text_at = uint64_t{h.text_offset} + sizeof entry;
  if (text_at + h.text_bytes > strings_read_) return "text out of range";
  std::memcpy(&entry, strings_.data() + h.text_offset, sizeof entry);
  if (entry.text_bytes != h.text_bytes) return "text length disagrees";
  std::memcpy(rec.text, strings_.data() + text_at, h.text_bytes);
  const uint64_t bounds_bytes = uint64_t{h.bound_count} * sizeof(int64_t);
  if (uint64_t{entry.bounds_offset} + bounds_bytes > strings_read_) return "bounds out of range";
  std::memcpy(rec.bounds, strings_.data() + entry.bounds_offset, bounds_bytes);
  return nullptr;
}

}  // namespace gym::reader_internal
