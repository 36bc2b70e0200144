// Who a process is, beyond its pid: the start time the kernel records for it
// and the boot it belongs to. Used by the writer to stamp its segment and by
// the reader where no lock can tell whether an owner is alive.
//
// Thread-safety: all functions are reentrant; they only read procfs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string_view>

namespace gym::detail {

// Field 22 of /proc/<pid>/stat (starttime, clock ticks after boot), parsed
// after the last ')' so that a comm with spaces or parentheses is harmless.
std::optional<uint64_t> parse_stat_start_ticks(std::string_view stat);
std::optional<uint64_t> process_start_ticks(pid_t pid, const char* proc_root = "/proc");
// The calling process's start ticks, from /proc/self/stat: right also in a
// pid namespace whose /proc is still its parent's (unshare --pid without
// --mount-proc, a sandbox), where /proc/<getpid()> is another process.
// Falls back to /proc/<getpid()> when /proc/self is not there.
std::optional<uint64_t> own_start_ticks();

// /proc/sys/kernel/random/boot_id as 16 raw bytes; false if unreadable.
bool read_boot_id(uint8_t out[16], const char* proc_root = "/proc");

// The inode of <proc_root>/<pid or self>/ns/pid: the identity of a pid
// namespace (0: unreadable). pid 0 means the calling process.
uint64_t pid_namespace(pid_t pid = 0, const char* proc_root = "/proc");

// Whether the process `pid` is the one that started at `start_ticks`.
bool process_matches(pid_t pid, uint64_t start_ticks, const char* proc_root = "/proc");

// Writes the decimal form of v at p, returns the end. No allocation.
char* format_decimal(char* p, uint64_t v);

}  // namespace gym::detail
