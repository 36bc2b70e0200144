#include "logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace gym::exporter {

namespace {

// The message, escaped for a double-quoted logfmt or JSON string.
class EscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    for (char c : msg.payload) {
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
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<EscapedMessage>();
  }
};

}  // namespace

void setup_logging(const std::string& level, const std::string& format) {
  auto logger = spdlog::get("gym-exporter");
  if (!logger) {
    logger = spdlog::stderr_logger_mt("gym-exporter");
    spdlog::set_default_logger(logger);
  }
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  formatter->add_flag<EscapedMessage>('*');
  if (format == "json")
    formatter->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","msg":"%*"})");
  else
    formatter->set_pattern(R"(ts=%Y-%m-%dT%H:%M:%S.%eZ level=%l msg="%*")");
  logger->set_formatter(std::move(formatter));
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::debug);
}

}  // namespace gym::exporter
