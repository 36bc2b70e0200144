// The registry's own cleaning when no exporter runs: writers fold the
// segments of exited writers into the directory's totals and remove them
// (RegistryReader::fold_exited), so that /dev/shm holds what the live writers
// need plus the totals, with or without an exporter (docs/registry.md).
//
// Thread-safety: fold_exited_soon may run in any writer's thread, holding
// that writer's mutex; release_at_exit runs once, at the process's exit.
#pragma once

#include <string>

namespace gym::writer_internal {

// After a writer made its segment (at first use, or in a forked child):
// folds the directory's exited segments unless a writer or an exporter took
// the directory's lock in the last second (the lock file's modification
// time) and the directory grew by less than a quarter (and 4 entries) since the
// last fold, so that a burst of forks pays for few folds, and exited
// segments stay bounded by the live ones: past that threshold it waits (up
// to 50 ms) for another writer's fold to end and folds after it.
void fold_exited_soon(const std::string& dir) noexcept;

// Registers (once a process, inherited by forked children) the exit hook
// that lets the process's segments go and folds them with the rest.
void fold_at_exit() noexcept;

}  // namespace gym::writer_internal
