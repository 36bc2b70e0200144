// The registry's guard against SIGBUS. A shared file mapping faults when the
// file is truncated under it (any process of the same user can do that) or
// when tmpfs has no page left for a hole that is touched. Neither may kill a
// server or the exporter:
//
// - Writers: a fault inside a segment mapping this process writes replaces
//   that whole mapping with private zero pages at the same address, so every
//   handle keeps working (unmetered), and marks the mapping lost; the writer
//   counts it at its next registration.
// - Readers: code that loads from a mapping runs inside a ReadGuard; a fault
//   inside the guarded range replaces the mapping with zero pages and marks
//   the guard, which the reader then reports.
//
// Any other SIGBUS goes to the handler that was installed before ours (or to
// the default action), so the process sees exactly what it would have seen
// without the library. A handler the application installs after the first
// segment replaces ours; the library then has no protection.
//
// Thread-safety: all functions may be called from any thread; the handler is
// async-signal-safe (atomics, mmap, sigaction).
#pragma once

#include <signal.h>

#include <cstddef>
#include <cstdint>

namespace gym::detail {

// Installs the handler once per process (idempotent, thread-safe).
void install_fault_handler() noexcept;

// A writer mapping of `size` bytes at `base`: protected until unregistered.
// False when the table of protected mappings is full (it holds 256; a process
// with more writers runs the rest unprotected, as before).
bool protect_writer_mapping(void* base, size_t size) noexcept;
void unprotect_writer_mapping(void* base) noexcept;
// After fork, in the child (no lock taken): the mapping at `base` is a fresh
// one again.
void reset_writer_mapping_lost(const void* base) noexcept;
// Whether a fault replaced the mapping at `base` with private pages.
bool writer_mapping_lost(const void* base) noexcept;

// Reader side: loads from a read-only mapping of [lo, lo + size) (page
// aligned) between begin_read_guard and end_read_guard. A fault inside the
// range replaces the whole mapping with private zero pages (the load then
// reads 0) and sets `faulted`: the caller discards what it read and treats
// the file as damaged. No jump, so any code may run in between.
struct ReadGuard {
  const unsigned char* lo = nullptr;
  const unsigned char* hi = nullptr;
  volatile sig_atomic_t faulted = 0;
};
void begin_read_guard(ReadGuard* g, const void* lo, size_t size) noexcept;
void end_read_guard() noexcept;

}  // namespace gym::detail
