// AgeSlots: the start times of the oldest waiters and holders in a record of
// the segment (claimed and freed with one compare-exchange each), and the
// per-thread lanes that count how many began. The writer that registers the
// record is segment_writer.cc.
#include <algorithm>
#include <atomic>
#include <utility>

#include "gym/segment_writer.h"

namespace gym {

namespace {
using segment::kAgeSlots;

bool cas_relaxed(int64_t* p, int64_t expected, int64_t desired) noexcept {
  return __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED);
}
int64_t ticket_base(int64_t start) noexcept {
  return std::max(start, int64_t{1} << segment::kAgeIndexBits) & ~segment::kAgeIndexMask;
}
// The slot word a ticket names, or 0 when it names none.
uint32_t slot_of(int64_t ticket) noexcept {
  const auto w = static_cast<uint32_t>(ticket & segment::kAgeIndexMask);
  return w <= kAgeSlots ? w : 0;
}

// Lanes 1..kAgeLanes-1 taken by a thread of this process (bit = lane).
std::atomic<uint64_t> g_age_lanes{1};  // lane 0 is shared, never handed out

// Hands the thread's lane back when it exits (constructed on first use only,
// so that the fast path reads a plain initial-exec variable).
struct AgeLaneOwner {
  uint32_t lane = 0;
  ~AgeLaneOwner() {
    // Anything this thread begins from now on counts in the shared lane.
    detail::t_age_lane_plus_one = 1;
    if (lane != 0) g_age_lanes.fetch_and(~(uint64_t{1} << lane), std::memory_order_release);
  }
};
thread_local AgeLaneOwner t_age_lane_owner;
}  // namespace

constinit thread_local uint32_t detail::t_age_lane_plus_one = 0;

uint32_t detail::assign_age_lane() noexcept {
  uint64_t taken = g_age_lanes.load(std::memory_order_relaxed);
  uint32_t lane = 0;
  for (;;) {
    const uint64_t free = ~taken & ((uint64_t{1} << segment::kAgeLanes) - 1);
    if (free == 0) break;
    const auto l = static_cast<uint32_t>(__builtin_ctzll(free));
    if (g_age_lanes.compare_exchange_weak(taken, taken | (uint64_t{1} << l),
                                          std::memory_order_acquire)) {
      lane = l;
      break;
    }
  }
  t_age_lane_owner.lane = lane;
  t_age_lane_plus_one = lane + 1;
  return lane;
}

void detail::age_lanes_after_fork() noexcept {
  const uint32_t l = t_age_lane_plus_one;
  g_age_lanes.store(1 | (l > 1 ? uint64_t{1} << (l - 1) : 0), std::memory_order_relaxed);
}

namespace {
// Where lane `lane` lives among the lane words: lanes 0..3 on four cache
// lines, lane 4 beside lane 0 and so on, so that the first threads' lanes
// never share a line (each thread writes its own at every begin; lanes side
// by side made two threads on one semaphore pass their line back and forth).
// The reader adds up all lanes, in any order.
constexpr uint32_t lane_word(uint32_t lane) {
  constexpr uint32_t kPerLine = segment::kLineBytes / 8;
  constexpr uint32_t kLines = segment::kAgeLanes / kPerLine;
  return segment::kAgeFirstLane + (lane % kLines) * kPerLine + lane / kLines;
}
static_assert(segment::kAgeLanes % (segment::kLineBytes / 8) == 0);
static_assert(lane_word(1) / 8 != lane_word(2) / 8 && lane_word(2) / 8 != lane_word(3) / 8);
static_assert(lane_word(segment::kAgeLanes - 1) == segment::kAgeWords - 1);
}  // namespace

uint32_t AgeSlots::count_begun() const noexcept {
  const uint32_t lane = detail::age_lane();
  int64_t* c = &words_[lane_word(lane)];
  if (lane == 0)
    segment::add_relaxed(c, int64_t{1});
  else  // this thread's own lane: no read-modify-write needed
    segment::store_relaxed(c, segment::load_relaxed(c) + 1);
  return lane;
}

AgeSlots::AgeSlots(AgeSlots&& other) noexcept
    : writer_(std::exchange(other.writer_, nullptr)),
      record_(other.record_),
      words_(std::exchange(other.words_, nullptr)) {}

AgeSlots& AgeSlots::operator=(AgeSlots&& other) noexcept {
  if (this != &other) {
    if (writer_ != nullptr) writer_->release_gauge(record_);
    writer_ = std::exchange(other.writer_, nullptr);
    record_ = other.record_;
    words_ = std::exchange(other.words_, nullptr);
  }
  return *this;
}

AgeSlots::~AgeSlots() {
  if (writer_ != nullptr) writer_->release_gauge(record_);
}

int64_t AgeSlots::begin(int64_t start) const noexcept {
  if (words_ == nullptr) return 0;
  const uint32_t lane = count_begun();
  const int64_t base = ticket_base(start);
  // Each thread (its lane) starts looking on a cache line of its own.
  uint32_t i = (lane * (segment::kLineBytes / 8)) % kAgeSlots;
  for (uint32_t n = 0; n < kAgeSlots; ++n) {
    int64_t* slot = &words_[1 + i];
    if (segment::load_relaxed(slot) == 0 && cas_relaxed(slot, 0, base | (1 + i)))
      return base | (1 + i);
    i = i + 1 == kAgeSlots ? 0 : i + 1;
  }
  segment::add_relaxed(&words_[0], int64_t{1});
  return base;
}

int64_t AgeSlots::end(int64_t ticket) const noexcept {
  if (words_ == nullptr) return 0;
  const uint32_t w = slot_of(ticket);
  if (w != 0 && cas_relaxed(&words_[w], ticket, 0)) return segment::ticket_start(ticket);
  const int64_t other = end_any();
  return ticket != 0 ? segment::ticket_start(ticket) : other;
}

int64_t AgeSlots::end_any() const noexcept {
  for (int64_t n = segment::load_relaxed(&words_[0]); n > 0;)
    if (__atomic_compare_exchange_n(&words_[0], &n, n - 1, true, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
      return 0;
  for (;;) {
    uint32_t oldest = 0;
    int64_t oldest_ticket = 0;
    for (uint32_t w = 1; w <= kAgeSlots; ++w) {
      const int64_t t = segment::load_relaxed(&words_[w]);
      if (t != 0 && (oldest == 0 || t < oldest_ticket)) {
        oldest = w;
        oldest_ticket = t;
      }
    }
    if (oldest == 0) return 0;  // nothing in progress: nothing to end
    if (cas_relaxed(&words_[oldest], oldest_ticket, 0)) return segment::ticket_start(oldest_ticket);
  }
}

int64_t AgeSlots::restart(int64_t ticket, int64_t start) const noexcept {
  if (words_ == nullptr) return 0;
  const int64_t base = ticket_base(start);
  const uint32_t w = slot_of(ticket);
  if (w == 0 && ticket != 0) {  // counted without a slot: stays so
    count_begun();
    return base;
  }
  if (w != 0 && cas_relaxed(&words_[w], ticket, base | w)) {
    count_begun();
    return base | w;
  }
  end_any();
  return begin(start);
}

int64_t AgeSlots::count() const noexcept {
  if (words_ == nullptr) return 0;
  int64_t n = segment::load_relaxed(&words_[0]);
  for (uint32_t w = 1; w <= kAgeSlots; ++w) n += segment::load_relaxed(&words_[w]) != 0;
  return n;
}

int64_t AgeSlots::begun() const noexcept {
  if (words_ == nullptr) return 0;
  int64_t n = 0;
  for (uint32_t l = 0; l < segment::kAgeLanes; ++l)
    n += segment::load_relaxed(&words_[segment::kAgeFirstLane + l]);
  return n;
}

int64_t AgeSlots::oldest_start() const noexcept {
  if (words_ == nullptr) return 0;
  int64_t oldest = 0;
  for (uint32_t w = 1; w <= kAgeSlots; ++w) {
    const int64_t t = segment::load_relaxed(&words_[w]);
    if (t != 0 && (oldest == 0 || t < oldest)) oldest = t;
  }
  return segment::ticket_start(oldest);
}

}  // namespace gym
