// spdlog set up as Prometheus exporters log: one line per event to standard
// error, in logfmt or JSON, at the chosen level.
//
// A line carries fields after its message: `log_event(info, "listening",
// {{"port", "9478"}})` prints `... msg="listening" port=9478` in logfmt and
// `..., "msg":"listening","port":"9478"}` in JSON.
#pragma once

#include <spdlog/common.h>

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gym::exporter {

// level: debug, info, warn, error; format: logfmt, json. Callable again (reload).
void setup_logging(const std::string& level, const std::string& format);

using LogFields = std::vector<std::pair<std::string, std::string>>;
void log_event(spdlog::level::level_enum level, std::string_view message,
               const LogFields& fields = {});
// Whether lines of this level are written (to skip building their fields).
bool log_enabled(spdlog::level::level_enum level);

// Warnings that may repeat (a bad file seen at every scrape): each distinct
// message at most once per `every`; the next line after a quiet spell carries
// how many were suppressed (field `suppressed`). Thread-safe.
class RateLimitedLog {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  explicit RateLimitedLog(std::chrono::seconds every = std::chrono::seconds(60),
                          Clock clock = std::chrono::steady_clock::now);
  void warn(const std::string& message);

 private:
  struct Seen {
    std::chrono::steady_clock::time_point last;
    uint64_t suppressed = 0;
  };
  std::chrono::seconds every_;
  Clock clock_;
  std::mutex mu_;
  std::map<std::string, Seen> seen_;  // at most kMaxMessages
};

}  // namespace gym::exporter
