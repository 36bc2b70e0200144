// The registry reader's limits spread over processes (LimitSpread): which
// series are a limit's parts, each live segment's values of them, and what
// the processes of one snapshot add up to.
#include "reader/core.h"

namespace gym {

using reader_internal::ReaderCore;
namespace {

// A series' part in a limit (the low three bits of limit_part_).
enum LimitPart : uint32_t { kNoPart = 0, kLimitPart, kAvailablePart, kHoldsPart, kQueuedPart };

LimitPart part_of(std::string_view family) {
  if (family == family::kConcurrencyLimit) return kLimitPart;
  if (family == family::kConcurrencyAvailable) return kAvailablePart;
  if (family == family::kConcurrencyOldestHold) return kHoldsPart;
  if (family == family::kConcurrencyQueueDepth) return kQueuedPart;
  return kNoPart;
}

}  // namespace

// The four series a LimitMeter writes share their labels (text, sorted):
// they are one limit's parts.
void ReaderCore::note_limit_part(uint32_t id, std::string_view family, std::string_view labels) {
  if (limit_part_.size() <= id) limit_part_.resize(id + 1, 0);
  const LimitPart part = part_of(family);
  if (part == kNoPart) {
    limit_part_[id] = 0;
    return;
  }
  auto [it, fresh] = limit_index_.try_emplace(std::string(labels), uint32_t(limit_tallies_.size()));
  if (fresh) limit_tallies_.emplace_back();
  limit_part_[id] = (it->second << 3) | part;
}

// Stamps count this snapshot's segments from 1 (0: none noted yet).
void ReaderCore::begin_limits() {
  for (LimitTally& t : limit_tallies_) t = LimitTally{};
  limit_touched_.clear();
  limit_stamp_ = 1;
}

// A live record's value in the segment being read (gauges; holds: how many
// are held).
void ReaderCore::note_limit_value(uint32_t id, int64_t value) {
  const uint32_t code = id < limit_part_.size() ? limit_part_[id] : 0;
  if (code == 0) return;
  LimitTally& t = limit_tallies_[code >> 3];
  if (t.stamp != limit_stamp_) {
    t = LimitTally{limit_stamp_,       false,          0, 0, 0, 0, t.processes,
                   t.queued_processes, t.unqueued_free};
    limit_touched_.push_back(code >> 3);
  }
  switch (code & 7u) {
    case kLimitPart:
      t.held = true;
      t.limit = value;
      break;
    case kAvailablePart:
      t.available = value;
      break;
    case kHoldsPart:
      t.holds = value;
      break;
    case kQueuedPart:
      t.queued = value;
      break;
  }
}

// The segment just read holds the limits it has a live limit record of:
// one process more each, and its free slots (limit_slots()) count as
// stranded if it has no caller queued.
void ReaderCore::close_segment_limits() {
  for (uint32_t k : limit_touched_) {
    LimitTally& t = limit_tallies_[k];
    if (!t.held) continue;
    ++t.processes;
    if (t.queued > 0) {
      ++t.queued_processes;
    } else {
      const int64_t free = limit_slots(t.limit, t.available, t.holds).free;
      if (free > 0) t.unqueued_free = segment::wrapping_add(t.unqueued_free, free);
    }
  }
  limit_touched_.clear();
  ++limit_stamp_;
}

void ReaderCore::add_limit_spread(uint32_t id, size_t series) {
  const uint32_t code = id < limit_part_.size() ? limit_part_[id] : 0;
  if ((code & 7u) != kLimitPart) return;
  const LimitTally& t = limit_tallies_[code >> 3];
  if (t.processes == 0) return;
  snapshot_.limits.push_back(
      {series, t.processes, t.queued_processes > 0 ? t.unqueued_free : int64_t{0}});
}

}  // namespace gym
