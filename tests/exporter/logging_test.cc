// Log lines: fields and rate-limited warnings, captured through an in-memory
// sink with the exporter's own format.
#include "logging.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

namespace gym::exporter {
namespace {

using namespace std::chrono_literals;

// The default logger writes into a string, in `format`, while this lives.
class CapturedLog {
 public:
  explicit CapturedLog(const std::string& format) {
    setup_logging("debug", format);
    auto logger = spdlog::default_logger();
    previous_ = logger->sinks();
    logger->sinks() = {std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)};
    setup_logging("debug", format);  // the format, on the new sink
  }
  ~CapturedLog() {
    spdlog::default_logger()->sinks() = previous_;
    setup_logging("info", "logfmt");
  }
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }

 private:
  std::ostringstream out_;
  std::vector<spdlog::sink_ptr> previous_;
};

TEST(Logging, FieldsFollowTheMessageQuotedOnlyWhenNeeded) {
  CapturedLog log("logfmt");
  log_event(spdlog::level::warn, "a \"bad\" file",
            {{"path", "/dev/shm/x y"}, {"pid", "42"}, {"empty", ""}, {"ctl", "a\nb"}});
  const auto lines = log.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(R"(level=warning msg="a \"bad\" file" path="/dev/shm/x y" pid=42 )"
                          R"(empty="" ctl="a\nb")"),
            std::string::npos)
      << lines[0];
}

TEST(Logging, JsonFieldsAreEscapedStrings) {
  CapturedLog log("json");
  log_event(spdlog::level::info, "m", {{"server", "math \"v2\"\\"}});
  const auto lines = log.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(R"("msg":"m","server":"math \"v2\"\\"})"), std::string::npos) << lines[0];
}

TEST(Logging, ARepeatedWarningIsWrittenOnceAMinuteWithHowManyWereSuppressed) {
  CapturedLog log("logfmt");
  auto now = std::chrono::steady_clock::time_point{} + 1h;
  RateLimitedLog warnings(60s, [&] { return now; });
  for (int i = 0; i < 5; ++i) {
    warnings.warn("segment x is not valid");
    now += 10s;
  }
  warnings.warn("another problem");
  EXPECT_EQ(log.lines().size(), 2u) << "5 in 50 s: once; another message: its own line";
  now += 20s;  // 70 s after the first
  warnings.warn("segment x is not valid");
  const auto lines = log.lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[2].find(R"(msg="segment x is not valid" suppressed=4)"), std::string::npos)
      << lines[2];
  now += 61s;
  warnings.warn("segment x is not valid");
  ASSERT_EQ(log.lines().size(), 4u);
  EXPECT_EQ(log.lines()[3].find("suppressed"), std::string::npos) << "none since";
}

}  // namespace
}  // namespace gym::exporter
