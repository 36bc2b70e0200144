// Every death of every process of a server, from the kernel's process
// events (host/proc_events.h): a fork under a server's process joins the
// server at once, an exec renames it, an exit is counted by reason and kept
// as a record, however short the process's life. The sampled trees seed and
// resynchronise who is whose (resync): a process the events missed (lost,
// or before the log began) is the server's from the next sample.
//
// Reasons: exit_zero, exit_nonzero, signal (its number in the record), and
// oom_kill: a SIGKILL the kernel's OOM killer sent, known from its log
// (host/kmsg.h: on_oom, told before the exit it causes), counted once.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "host/kmsg.h"
#include "host/proc_events.h"
#include "snapshot/view.h"

namespace gym::exporter {

inline constexpr std::array<const char*, 4> kDeathReasons = {"exit_zero", "exit_nonzero", "signal",
                                                             "oom_kill"};

// A server's process as a sample saw it.
struct DeathMember {
  pid_t pid = 0, parent = 0;
  std::string server, server_type, command;
  double start_seconds = 0;  // since boot
  std::optional<uint64_t> rss_bytes;
};

// How many death records a host keeps (about 200 bytes each).
struct DeathLimits {
  size_t records = 10000;         // kept at most
  double max_age_seconds = 3600;  // and none older
};

class DeathLog {
 public:
  explicit DeathLog(DeathLimits limits = {});

  // The servers' processes at a sample taken at `taken` (seconds since boot,
  // CLOCK_BOOTTIME): watched from now on. A process the log holds from a
  // fork after `taken` stays; one it holds from before that two samples in
  // a row did not see is dropped (it died unseen, or left): one miss may be
  // an exit whose event is still on its way.
  void resync(const std::vector<DeathMember>& members, double taken);
  // One event at `now` (seconds since boot; `unix_now` for the record).
  // `command` reads a process's command at its exec ("" when gone).
  void on_event(const procev::ProcEvent& e, double now, double unix_now,
                const std::function<std::string(pid_t)>& command);
  // An OOM kill the kernel logged at `now` (seconds since boot): the exit of
  // its pid by SIGKILL that follows is an oom_kill. Kills of no server's
  // process are forgotten after a minute; at most 1,024 wait.
  void on_oom(kmsg::OomKill kill, double now);

  struct Count {
    std::string server, server_type;
    std::array<uint64_t, kDeathReasons.size()> exits{};
  };
  // Exits by server (every server ever resynced) and reason.
  std::vector<Count> counts() const;
  // Records, oldest first: of `server` (empty: any), at or after `since`
  // (Unix seconds), of `reason` (empty: any).
  std::vector<ProcessDeath> records(const std::string& server, double since,
                                    const std::string& reason) const;
  size_t watched() const;
  // Its counts count from `unix_now` (a later call keeps the first; a
  // restored file's time replaces it).
  void start_counting(double unix_now);
  // Unix seconds its counts count from (0 before start_counting).
  double since() const;
  // The counts and records as a file (an exporter started again goes on
  // from them):
  //   gym-exporter-deaths 1
  //   since <Unix seconds>
  //   server <exit_zero> <exit_nonzero> <signal> <oom_kill> <type>\t<name>
  //   death <time> <pid> <parent> <lifetime> <reason> <code> <signal> <rss>
  //         <memcg usage> <memcg limit> <type>\t<server>\t<command>\t<memcg>
  // ("-": not known). A server or record whose names hold a tab or a
  // newline is not kept.
  std::string encode() const;
  // Takes the counts and records of such a file, when it has none yet;
  // false with `why` (not such a file: nothing changes).
  bool restore(std::string_view text, std::string& why);
  // Deaths counted so far (to tell whether the file is behind).
  uint64_t version() const;
  // Keeps at most `limits` records from now on (a reload's settings).
  void set_limits(DeathLimits limits);
  // Whether process events feed it (the deaths collector says so).
  void set_connected(bool on) { connected_.store(on, std::memory_order_relaxed); }
  bool connected() const { return connected_.load(std::memory_order_relaxed); }

 private:
  struct Watched {
    size_t server = 0;  // index into servers_
    pid_t parent = 0;
    std::string command;
    double born = 0;   // seconds since boot
    double added = 0;  // when the log learnt of it
    std::optional<uint64_t> rss_bytes;
    bool missed = false;  // not in the last sample
  };
  size_t server_index(const std::string& name, const std::string& type);
  void died(pid_t pid, const Watched& w, uint32_t status, double now, double unix_now);

  DeathLimits limits_;
  mutable std::mutex mu_;
  std::map<pid_t, Watched> watched_;
  std::map<pid_t, std::pair<kmsg::OomKill, double>> ooms_;  // by pid, with when
  std::vector<Count> servers_;
  std::deque<ProcessDeath> records_;
  std::atomic<bool> connected_{false};
  double since_ = 0;  // 0: not counting yet
  uint64_t version_ = 0;
};

}  // namespace gym::exporter
