#include "reader/limits.h"

#include <algorithm>

#include "gym/contract.h"

namespace gym::reader_internal {

LimitTable::Part LimitTable::part_of(std::string_view family) {
  if (family == family::kConcurrencyLimit) return kLimitPart;
  if (family == family::kConcurrencyAvailable) return kAvailablePart;
  if (family == family::kConcurrencyOldestHold) return kHoldsPart;
  if (family == family::kConcurrencyQueueDepth) return kQueuedPart;
  if (family == family::kAdmissionTimeouts) return kTimeoutsPart;
  if (family == family::kAdmissionCancelled) return kCancelledPart;
  return kNoPart;
}

void LimitTable::note_part(uint32_t id, std::string_view family, std::string_view labels) {
  if (part_.size() <= id) part_.resize(id + 1, 0);
  const Part part = part_of(family);
  if (part == kNoPart) {
    part_[id] = 0;
    return;
  }
  auto [it, fresh] = index_.try_emplace(std::string(labels), uint32_t(tallies_.size()));
  if (fresh) tallies_.emplace_back();
  part_[id] = (it->second << 3) | part;
}

// Stamps count this snapshot's segments from 1 (0: none noted yet).
void LimitTable::begin() {
  for (Tally& t : tallies_) t = Tally{};
  touched_.clear();
  stamp_ = 1;
}

void LimitTable::note_value(uint32_t id, int64_t value) {
  const uint32_t code = id < part_.size() ? part_[id] : 0;
  if (code == 0) return;
  Tally& t = tallies_[code >> 3];
  if (t.stamp != stamp_) {
    t = Tally{stamp_, false, 0, 0, 0, 0, t.processes, t.queued_processes, t.unqueued_free};
    touched_.push_back(code >> 3);
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
    default:  // counters: no part of a process's spread
      break;
  }
}

// The segment holds the limits it has a live limit record of: one process
// more each, and its free slots (limit_slots()) count as stranded if it has
// no caller queued.
void LimitTable::close_segment() {
  for (uint32_t k : touched_) {
    Tally& t = tallies_[k];
    if (!t.held) continue;
    ++t.processes;
    if (t.queued > 0) {
      ++t.queued_processes;
    } else {
      const int64_t free = limit_slots(t.limit, t.available, t.holds).free;
      if (free > 0) t.unqueued_free = segment::wrapping_add(t.unqueued_free, free);
    }
  }
  touched_.clear();
  ++stamp_;
}

// Placed in output order, a limit becomes a row at its limit series (so the
// limits now come in series order) or, lacking one, at its holds' series
// (those whose writers are gone and whose admissions remain, after them).
void LimitTable::place(uint32_t id, size_t index) {
  const uint32_t code = id < part_.size() ? part_[id] : 0;
  if (code == 0) return;
  if (placed_.size() < tallies_.size()) placed_.resize(tallies_.size());
  const uint32_t k = code >> 3;
  Placed& p = placed_[k];
  const uint32_t part = code & 7u;
  p.at[part] = static_cast<uint32_t>(index);
  if ((part == kLimitPart || part == kHoldsPart) && !p.ordered) {
    p.ordered = true;
    order_.push_back(k);
  }
}

void LimitTable::rows(Snapshot& snap) {
  snap.limits.clear();
  snap.limits.reserve(order_.size());
  auto at = [](uint32_t i) { return i == Placed::kNone ? LimitRow::kNone : size_t{i}; };
  for (uint32_t k : order_) {
    const Placed& p = placed_[k];
    LimitRow row;
    row.series = at(p.at[kLimitPart]);
    row.available = at(p.at[kAvailablePart]);
    row.queue_depth = at(p.at[kQueuedPart]);
    row.holds = at(p.at[kHoldsPart]);
    row.timeouts = at(p.at[kTimeoutsPart]);
    row.cancelled = at(p.at[kCancelledPart]);
    if (row.present()) fill(snap, tallies_[k], row);
    snap.limits.push_back(row);
  }
  std::fill(placed_.begin(), placed_.end(), Placed{});
  order_.clear();
}

// A present row's values, from its series' summed values and its spread.
void LimitTable::fill(const Snapshot& snap, const Tally& t, LimitRow& row) {
  auto gauge = [&](size_t i) { return i == LimitRow::kNone ? 0 : snap.series[i].gauge; };
  row.limit = gauge(row.series);
  row.queued = gauge(row.queue_depth);
  row.holds_now = gauge(row.holds);
  if (row.available == LimitRow::kNone) {  // no free slots known: all are held
    row.free = 0;
    row.active = row.limit;
  } else {
    const LimitSlots slots = limit_slots(row.limit, gauge(row.available), row.holds_now);
    row.free = slots.free;
    row.active = slots.active;
  }
  if (row.holds != LimitRow::kNone && snap.series[row.holds].in_progress)
    row.oldest_hold_seconds = age_seconds(snap, snap.series[row.holds]);
  row.processes = t.processes;
  row.stranded_slots = t.queued_processes > 0 ? t.unqueued_free : 0;
}

}  // namespace gym::reader_internal
