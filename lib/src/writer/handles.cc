// The handles' own parts: which histogram shard a thread writes (handed out
// at its first observation, handed back when it exits) and Gauge's moves.
// The writer that registers them is segment_writer.cc.
#include <atomic>

#include "gym/segment_writer.h"

namespace gym {

namespace {
// Histogram shards held by a live thread of this process (bit = shard).
std::atomic<uint32_t> g_shards{0};

// Hands the thread's shard back when it exits (constructed on first use
// only, so that the fast path reads a plain initial-exec variable).
struct ShardOwner {
  uint32_t held_plus_one = 0;  // 0: it shares one
  ~ShardOwner() {
    if (held_plus_one == 0) return;
    // Observations after this (another thread-local's destructor) go to the
    // shared shard with atomic adds: the one handed back may have a new
    // owner writing it with plain stores.
    detail::t_shard_plus_one = segment::kHistogramShards;
    g_shards.fetch_and(~(uint32_t{1} << (held_plus_one - 1)), std::memory_order_release);
  }
};
thread_local ShardOwner t_shard_owner;
}  // namespace

constinit thread_local uint32_t detail::t_shard_plus_one = 0;

// The lowest shard of its own no live thread holds, so that up to
// kHistogramShards threads never share one (the first kHistogramShards - 1
// each alone in theirs, the next in the shared one); beyond, threads share
// the last.
uint32_t detail::assign_thread_shard() noexcept {
  constexpr uint32_t all = (uint32_t{1} << (segment::kHistogramShards - 1)) - 1;
  uint32_t taken = g_shards.load(std::memory_order_relaxed);
  uint32_t shard = 0;
  for (;;) {
    const uint32_t free = ~taken & all;
    if (free == 0) {
      shard = segment::kHistogramShards - 1;
      break;
    }
    const auto s = static_cast<uint32_t>(__builtin_ctz(free));
    if (g_shards.compare_exchange_weak(taken, taken | (uint32_t{1} << s),
                                       std::memory_order_acquire)) {
      shard = s;
      t_shard_owner.held_plus_one = s + 1;
      break;
    }
  }
  t_shard_plus_one = shard + 1;
  return shard;
}

void detail::shards_after_fork() noexcept {
  const uint32_t held = t_shard_owner.held_plus_one;
  g_shards.store(held != 0 ? uint32_t{1} << (held - 1) : 0, std::memory_order_relaxed);
}

// ---------------------------------------------------------------- Gauge

Gauge::Gauge() = default;

namespace {
// Where moved-from gauges point: they may still be updated (atomically, so
// sharing it is no data race) but nothing reads it.
int64_t g_moved_from_sink[8];
}  // namespace

// Takes other's slot; an unregistered value moves into this gauge's own
// storage (moves are not concurrent with updates of either gauge).
void Gauge::take_value(Gauge& other) noexcept {
  writer_ = other.writer_;
  record_ = other.record_;
  if (other.value_ == &other.local_) {
    local_ = other.local_;
    value_ = &local_;
  } else {
    value_ = other.value_;
  }
  other.writer_ = nullptr;
  other.value_ = g_moved_from_sink;
}

Gauge::Gauge(Gauge&& other) noexcept {
  take_value(other);
}

Gauge& Gauge::operator=(Gauge&& other) noexcept {
  if (this != &other) {
    reset();
    take_value(other);
  }
  return *this;
}

Gauge::~Gauge() {
  reset();
}

void Gauge::reset() noexcept {
  if (writer_ != nullptr) writer_->release_gauge(record_);
  writer_ = nullptr;
}

}  // namespace gym
