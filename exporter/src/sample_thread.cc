#include "sample_thread.h"

#include <algorithm>
#include <map>

namespace gym::exporter {

std::shared_ptr<SampleThread> SampleThread::of(const std::string& group) {
  if (group.empty()) return std::make_shared<SampleThread>();
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<SampleThread>> groups;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<SampleThread> t = groups[group].lock();
  if (!t) {
    t = std::make_shared<SampleThread>();
    groups[group] = t;
  }
  return t;
}

SampleThread::SampleThread() : thread_([this] { loop(); }) {}

SampleThread::~SampleThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void SampleThread::add(const void* key, Clock::duration period, std::function<void()> job,
                       std::function<void(uint64_t)> missed) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back({key, period, Clock::now() + period, std::move(job), std::move(missed)});
  }
  cv_.notify_all();
}

void SampleThread::remove(const void* key) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return running_ != key; });
  std::erase_if(jobs_, [&](const Job& j) { return j.key == key; });
  cv_.notify_all();
}

void SampleThread::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    auto due = std::min_element(jobs_.begin(), jobs_.end(),
                                [](const Job& a, const Job& b) { return a.next < b.next; });
    if (due == jobs_.end()) {
      cv_.wait(lock);
      continue;
    }
    // A copy: wait_until reads it after the lock is let go, and an add()
    // meanwhile may move the jobs.
    if (const Clock::time_point when = due->next; Clock::now() < when) {
      cv_.wait_until(lock, when);
      continue;
    }
    const void* key = due->key;
    const std::function<void()> run = due->run;
    running_ = key;
    lock.unlock();
    run();
    lock.lock();
    running_ = nullptr;
    cv_.notify_all();
    // Found again: adds may have moved it (a remove waited for it to end).
    auto it = std::find_if(jobs_.begin(), jobs_.end(), [&](const Job& j) { return j.key == key; });
    if (it == jobs_.end()) continue;
    it->next += it->period;
    const auto now = Clock::now();
    if (now >= it->next) {  // this run (or the one before it) ran into the next period(s)
      it->missed(uint64_t((now - it->next) / it->period + 1));
      it->next = now + it->period;
    }
  }
}

}  // namespace gym::exporter
