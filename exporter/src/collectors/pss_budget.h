// The PSS stall budget: whether a server's tree may have its smaps_rollup
// read now, from a prediction of how long each read would stop its process.
//
// Reading /proc/PID/smaps_rollup walks the process's page tables under its
// memory lock: every mmap, munmap and brk of the process waits for it, about
// 13 ms per GiB resident on this host's kernel. The budget keeps that stall
// within a single cap (max_stall_seconds) and a share of the process's wall
// time (max_stall_fraction) by predicting each read's stall before making
// it, from the process's RSS (read lock-free from statm or status) times the
// stall per GiB that this host's own reads measured (StallModel), so that the
// first read of a huge process is never the one that stalls it.
//
// Thread-safety: one PssBudget belongs to the memory collector's sampling
// thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace gym::exporter {

struct PssBudgetConfig {
  // No single read may stop a process for longer than this (predicted).
  double max_stall_seconds = 0.010;
  // Nor, over time, for more than this share of its wall time.
  double max_stall_fraction = 0.001;
  // The stall per GiB resident assumed until this host's reads have
  // measured it (above this kernel's 13 ms: the first guess errs on the safe side).
  double prior_seconds_per_gib = 0.020;
  // The exporter spends at most this share of one core reading smaps_rollup
  // (its budget each sample: this times the sample interval); the trees read
  // longest ago go first, the rest wait for a later sample.
  double max_cpu_fraction = 0.005;
};

// Seconds a smaps_rollup read stops a process, per GiB resident, learned
// from the reads made: the 3rd quartile of the last 16 reads of processes
// large enough for the walk to dominate the read (kMinLearnBytes), the prior
// until 4 were made. A read's time includes opening and parsing the file, so
// the estimate errs high, never low.
class StallModel {
 public:
  static constexpr uint64_t kMinLearnBytes = uint64_t{64} << 20;
  explicit StallModel(double prior_seconds_per_gib) : prior_(prior_seconds_per_gib) {}
  double seconds_per_gib() const;
  double predict(uint64_t rss_bytes) const;
  // A read of a process with `rss_bytes` resident that took `seconds`.
  void observe(uint64_t rss_bytes, double seconds);
  size_t observations() const { return count_; }

 private:
  double prior_;
  std::array<double, 16> recent_{};
  size_t count_ = 0;  // reads learned from (the ring holds the last 16)
};

// What the budget says of a tree whose PSS is due.
enum class PssVerdict {
  kRead,      // read it now
  kDeferred,  // within the cap, but read too recently for the wall-time share
  kRefused,   // a member's read would stop it beyond the single-stall cap
  kBusy,      // the exporter spent this sample's reading budget on other trees
};

// The verdict for a tree whose largest member would stall `worst_seconds`
// (predicted) and whose last read was `since_last_read` seconds ago (empty:
// never read), when the exporter has `budget_left` for reading this sample.
// `forced`: the target says `pss: true`, so it is read anyway.
PssVerdict pss_verdict(const PssBudgetConfig& config, double worst_seconds,
                       std::optional<double> since_last_read, bool forced, bool budget_left);

}  // namespace gym::exporter
