// The runtime of a language's own event loop and process (the
// gym_python_* families): what the Python package's instrument_runtime()
// reports through the C ABI. The library runs no thread and no timer for it:
// the loop's own periodic probe reports, and the exporter computes what needs
// a clock from outside (how overdue the loop's heartbeat is now).
//
// LoopMeter, one per instrumented loop:
// - beat(lag, due_in): the probe ran `lag` late (the lag histogram), and the
//   next one is due in `due_in` (its interval plus a grace for ordinary
//   lateness). The due time is the start of the heartbeat's ages record, so
//   the exporter's age of it, how long the heartbeat is overdue now (0 while
//   it is not due yet), grows while the loop is blocked and drops to 0 at the
//   next beat.
// - set_tasks(n): tasks alive in the loop.
// Destroyed (the loop closed), its gauges and heartbeat stop reporting.
//
// RuntimeMeter, one per process: garbage-collector pauses and collections by
// generation, and the process's threads.
//
// Series carry nemo_gym_server_name: the name given, else the server this
// process declared (declare_server) when the meter was made, else none.
//
// Thread-safety: every method may be called from any thread; beat() calls
// of one LoopMeter are serialized by a mutex held for a few instructions.
//
// Internal (docs/api.md): the Python package's event-loop meter.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "gym/contract.h"
#include "gym/segment_writer.h"

namespace gym {

class LoopMeter {
 public:
  // Throws std::invalid_argument for an empty or over-long server name.
  LoopMeter(std::optional<std::string_view> server_name, SegmentWriter& writer);
  LoopMeter(const LoopMeter&) = delete;
  LoopMeter& operator=(const LoopMeter&) = delete;

  // Negative values count as 0.
  void beat(int64_t lag_ns, int64_t due_in_ns) noexcept;
  void set_tasks(int64_t tasks) noexcept { tasks_.set(tasks); }

  const std::string& server_name() const { return server_; }
  const AgeSlots& heartbeat() const { return heartbeat_; }

 private:
  std::string server_;
  Histogram lag_;
  AgeSlots heartbeat_;
  Gauge tasks_;
  std::mutex mu_;
  int64_t ticket_ = 0;  // the heartbeat's slot, 0 before the first beat
};

class RuntimeMeter {
 public:
  // Throws std::invalid_argument for an empty or over-long server name.
  RuntimeMeter(std::optional<std::string_view> server_name, SegmentWriter& writer);

  // A collection of `generation` (0..2) that paused the process `pause_ns`.
  // False, changing nothing, for another generation.
  bool collected(int generation, int64_t pause_ns) const;
  void set_threads(int64_t threads) noexcept { threads_.set(threads); }

  const std::string& server_name() const { return server_; }

 private:
  // A generation's pause histogram, and its count of collections,
  // registered at its first collection.
  const Histogram& pauses(size_t generation) const;

  std::string server_;
  SegmentWriter& writer_;
  Gauge threads_;
  LazyHistogram pauses_[kGcGenerations.size()];
  // Set inside pauses()' registration, read after it.
  mutable Counter collections_[kGcGenerations.size()];
};

}  // namespace gym
