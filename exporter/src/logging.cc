#include "logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace gym::exporter {

namespace {

// The fields of the line being logged on this thread (log_event sets them;
// spdlog formats on the calling thread).
thread_local const LogFields* t_fields = nullptr;

// `text` escaped for a double-quoted logfmt or JSON string.
void append_escaped(std::string_view text, spdlog::memory_buf_t& dest) {
  for (char c : text) {
    switch (c) {
      case '"':
        dest.append(std::string_view("\\\""));
        break;
      case '\\':
        dest.append(std::string_view("\\\\"));
        break;
      case '\n':
        dest.append(std::string_view("\\n"));
        break;
      case '\t':
        dest.append(std::string_view("\\t"));
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          dest.append(std::string_view(buf));
        } else {
          dest.push_back(c);
        }
    }
  }
}

// The message, escaped.
class EscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    append_escaped(std::string_view(msg.payload.data(), msg.payload.size()), dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<EscapedMessage>();
  }
};

// The fields: ` key=value` (quoted when the value needs it) or `,"key":"value"`.
class Fields : public spdlog::custom_flag_formatter {
 public:
  explicit Fields(bool json) : json_(json) {}
  void format(const spdlog::details::log_msg&, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    if (t_fields == nullptr) return;
    for (const auto& [key, value] : *t_fields) {
      if (json_) {
        dest.append(std::string_view(",\""));
        append_escaped(key, dest);
        dest.append(std::string_view("\":\""));
        append_escaped(value, dest);
        dest.push_back('"');
        continue;
      }
      dest.push_back(' ');
      dest.append(std::string_view(key));
      dest.push_back('=');
      const bool quote = value.empty() || value.find_first_of(" =\"\\") != std::string::npos ||
                         std::any_of(value.begin(), value.end(),
                                     [](char c) { return static_cast<unsigned char>(c) < 0x20; });
      if (!quote) {
        dest.append(std::string_view(value));
        continue;
      }
      dest.push_back('"');
      append_escaped(value, dest);
      dest.push_back('"');
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<Fields>(json_);
  }

 private:
  bool json_;
};

constexpr size_t kMaxMessages = 1000;

}  // namespace

void log_event(spdlog::level::level_enum level, std::string_view message, const LogFields& fields) {
  t_fields = &fields;
  spdlog::log(level, "{}", message);
  t_fields = nullptr;
}

bool log_enabled(spdlog::level::level_enum level) {
  return spdlog::default_logger_raw()->should_log(level);
}

RateLimitedLog::RateLimitedLog(std::chrono::seconds every, Clock clock)
    : every_(every), clock_(std::move(clock)) {}

void RateLimitedLog::warn(const std::string& message) {
  uint64_t suppressed = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = clock_();
    auto it = seen_.find(message);
    if (it != seen_.end() && now - it->second.last < every_) {
      ++it->second.suppressed;
      return;
    }
    if (it == seen_.end()) {
      if (seen_.size() >= kMaxMessages) seen_.clear();  // bounded: forget all
      it = seen_.emplace(message, Seen{}).first;
    }
    suppressed = it->second.suppressed;
    it->second = Seen{now, 0};
  }
  if (suppressed == 0)
    log_event(spdlog::level::warn, message);
  else
    log_event(spdlog::level::warn, message, {{"suppressed", std::to_string(suppressed)}});
}

void setup_logging(const std::string& level, const std::string& format) {
  auto logger = spdlog::get("gym-exporter");
  if (!logger) {
    logger = spdlog::stderr_logger_mt("gym-exporter");
    spdlog::set_default_logger(logger);
  }
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  formatter->add_flag<EscapedMessage>('*');
  formatter->add_flag<Fields>('&', format == "json");
  if (format == "json")
    formatter->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","msg":"%*"%&})");
  else
    formatter->set_pattern(R"(ts=%Y-%m-%dT%H:%M:%S.%eZ level=%l msg="%*"%&)");
  logger->set_formatter(std::move(formatter));
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::debug);
}

}  // namespace gym::exporter
