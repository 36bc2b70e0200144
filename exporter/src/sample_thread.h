// One thread that runs the samples of several collectors, each on its own
// period: the per-server collectors (servers, memory, cpu, cgroup) share
// one, so that a host's exporter samples on one thread however many of them
// are on; a collector whose source can hang (NVML) keeps one of its own.
//
// A job runs every period from when it was added (a period, not a delay: a
// job that starts late because the one before it ran long starts at once,
// and the starts it missed are counted through `missed`). Jobs of one thread
// never run at once.
//
// Thread-safety: every member may be called from any thread but the
// thread's own jobs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gym::exporter {

class SampleThread {
 public:
  using Clock = std::chrono::steady_clock;
  // The thread of `group`, shared by every holder of the group's name while
  // one holds it; an empty group: a thread of its own.
  static std::shared_ptr<SampleThread> of(const std::string& group);
  SampleThread();
  ~SampleThread();  // its jobs are removed by then
  SampleThread(const SampleThread&) = delete;
  SampleThread& operator=(const SampleThread&) = delete;

  // Runs `job` every `period`, first a period from now, under `key`; `missed`
  // receives the number of starts a late job missed.
  void add(const void* key, Clock::duration period, std::function<void()> job,
           std::function<void(uint64_t)> missed);
  // Takes the job of `key` out, after its run if it runs now.
  void remove(const void* key);

 private:
  struct Job {
    const void* key;
    Clock::duration period;
    Clock::time_point next;
    std::function<void()> run;
    std::function<void(uint64_t)> missed;
  };
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Job> jobs_;
  const void* running_ = nullptr;  // the key of the job running now
  bool stopping_ = false;
  std::thread thread_;  // last: it starts with every member ready
};

}  // namespace gym::exporter
